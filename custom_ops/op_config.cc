#include "op_config.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <vector>

namespace lstm_ort {
namespace {

std::string Lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

std::string Trim(const std::string& s) {
  const auto b = s.find_first_not_of(" \t");
  const auto e = s.find_last_not_of(" \t");
  return b == std::string::npos ? std::string() : s.substr(b, e - b + 1);
}

template <typename T>
std::string Join(const std::vector<T>& v) {
  std::ostringstream os;
  os << "[";
  for (size_t i = 0; i < v.size(); ++i) os << (i ? ", " : "") << v[i];
  os << "]";
  return os.str();
}

// Absent attributes come back as false; the C API reports them as an error status.
bool TryInt(const OrtKernelInfo* info, const char* name, int64_t* out) {
  OrtStatus* st = Ort::GetApi().KernelInfoGetAttribute_int64(info, name, out);
  if (st) Ort::GetApi().ReleaseStatus(st);
  return st == nullptr;
}

bool TryFloat(const OrtKernelInfo* info, const char* name, float* out) {
  OrtStatus* st = Ort::GetApi().KernelInfoGetAttribute_float(info, name, out);
  if (st) Ort::GetApi().ReleaseStatus(st);
  return st == nullptr;
}

bool TryString(const OrtKernelInfo* info, const char* name, std::string* out) {
  size_t size = 0;
  OrtStatus* st = Ort::GetApi().KernelInfoGetAttribute_string(info, name, nullptr, &size);
  if (st) {
    Ort::GetApi().ReleaseStatus(st);
    return false;
  }
  std::string s(size, '\0');
  Ort::ThrowOnError(Ort::GetApi().KernelInfoGetAttribute_string(info, name, s.data(), &size));
  s.resize(size > 0 ? size - 1 : 0);  // size counts the terminating NUL
  *out = s;
  return true;
}

std::vector<float> FloatsOrEmpty(const OrtKernelInfo* info, const char* name) {
  size_t size = 0;
  OrtStatus* st = Ort::GetApi().KernelInfoGetAttributeArray_float(info, name, nullptr, &size);
  if (st) {
    Ort::GetApi().ReleaseStatus(st);
    return {};
  }
  std::vector<float> v(size);
  if (size) Ort::ThrowOnError(Ort::GetApi().KernelInfoGetAttributeArray_float(info, name, v.data(), &size));
  return v;
}

struct ActSpec {
  const char* name;
  ActKind kind;
  bool alpha, beta;
  float alpha_default, beta_default;
};

// The activations ONNX LSTM allows; alpha/beta defaults as stock onnxruntime applies them.
constexpr ActSpec kActs[] = {
    {"sigmoid", ActKind::kSigmoid, false, false, 0.f, 0.f},
    {"tanh", ActKind::kTanh, false, false, 0.f, 0.f},
    {"relu", ActKind::kRelu, false, false, 0.f, 0.f},
    {"affine", ActKind::kAffine, true, true, 0.f, 0.f},
    {"leakyrelu", ActKind::kLeakyRelu, true, false, 0.01f, 0.f},
    {"thresholdedrelu", ActKind::kThresholdedRelu, true, false, 0.f, 0.f},
    {"scaledtanh", ActKind::kScaledTanh, true, true, 0.f, 0.f},
    {"hardsigmoid", ActKind::kHardSigmoid, true, true, 0.2f, 0.5f},
    {"elu", ActKind::kElu, true, false, 1.f, 0.f},
    {"softsign", ActKind::kSoftsign, false, false, 0.f, 0.f},
    {"softplus", ActKind::kSoftplus, false, false, 0.f, 0.f},
};

std::string ShapeStr(const std::vector<int64_t>& s) { return Join(s); }

}  // namespace

void Fail(const std::string& message) { throw Ort::Exception(std::string("FusedLSTM: ") + message, ORT_INVALID_ARGUMENT); }

// "gpu|T|B|strategy" entries separated by ';' (written by lstm_ort.tuning).
static std::vector<TunedStrategy> ParseTuned(const std::string& text) {
  std::vector<TunedStrategy> out;
  std::stringstream entries(text);
  std::string entry;
  while (std::getline(entries, entry, ';')) {
    if (Trim(entry).empty()) continue;
    std::vector<std::string> f;
    std::stringstream fields(entry);
    std::string field;
    while (std::getline(fields, field, '|')) f.push_back(field);
    TunedStrategy t;
    char* end = nullptr;
    bool ok = f.size() == 4 && !f[0].empty();
    if (ok) {
      t.gpu = f[0];
      t.T = std::strtoll(f[1].c_str(), &end, 10);
      ok = *end == '\0' && !f[1].empty();
      t.B = std::strtoll(f[2].c_str(), &end, 10);
      ok = ok && *end == '\0' && !f[2].empty() && ParseStrategy(f[3].c_str(), &t.strategy);
    }
    if (!ok) Fail("attribute tuned must hold 'gpu|T|B|strategy' entries separated by ';', got '" + entry + "'");
    out.push_back(t);
  }
  return out;
}

bool ParseStrategy(const char* name, Strategy* out) {
  static const struct {
    const char* name;
    Strategy value;
  } kNames[] = {{"auto", Strategy::kAuto},
                {"tiled", Strategy::kTiled},
                {"splitk", Strategy::kSplitK},
                {"persistent", Strategy::kPersistent},
                {"wavefront", Strategy::kWavefront}};
  for (const auto& n : kNames) {
    if (std::strcmp(name, n.name) == 0) {
      *out = n.value;
      return true;
    }
  }
  return false;
}

Attributes ParseAttributes(const OrtKernelInfo* info) {
  Attributes a;
  if (!TryInt(info, "hidden_size", &a.hidden_size) || a.hidden_size <= 0)
    Fail("attribute hidden_size is required and must be > 0");
  TryInt(info, "num_layers", &a.num_layers);
  if (a.num_layers <= 0) Fail("attribute num_layers must be > 0, got " + std::to_string(a.num_layers));

  std::string direction = "forward";
  TryString(info, "direction", &direction);
  if (direction == "bidirectional") {
    a.num_directions = 2;
  } else if (direction == "reverse") {
    a.reverse_only = true;
  } else if (direction != "forward") {
    Fail("attribute direction must be forward, reverse or bidirectional, got '" + direction + "'");
  }

  TryInt(info, "layout", &a.layout);
  if (a.layout != 0 && a.layout != 1) Fail("attribute layout must be 0 or 1, got " + std::to_string(a.layout));

  a.has_clip = TryFloat(info, "clip", &a.clip);
  if (a.has_clip && !(a.clip > 0.f)) Fail("attribute clip must be > 0");

  std::string strategy;
  if (TryString(info, "strategy", &strategy) && !ParseStrategy(strategy.c_str(), &a.strategy))
    Fail("attribute strategy must be auto, tiled, splitk, persistent or wavefront, got '" + strategy + "'");

  std::string tuned;
  if (TryString(info, "tuned", &tuned)) a.tuned = ParseTuned(tuned);

  int64_t input_forget = 0;
  TryInt(info, "input_forget", &input_forget);
  if (input_forget != 0 && input_forget != 1) Fail("attribute input_forget must be 0 or 1");
  a.input_forget = input_forget == 1;

  std::vector<std::string> names;
  std::string joined;
  if (TryString(info, "activations", &joined)) {
    std::stringstream ss(joined);
    std::string item;
    while (std::getline(ss, item, ',')) names.push_back(Trim(item));
  } else {
    for (int d = 0; d < a.num_directions; ++d) names.insert(names.end(), {"Sigmoid", "Tanh", "Tanh"});
  }
  if (names.size() != static_cast<size_t>(3 * a.num_directions))
    Fail("attribute activations must name " + std::to_string(3 * a.num_directions) +
         " functions (f, g, h per direction, comma-separated), got '" + joined + "'");

  // Alphas and betas are consumed in order by the activations that take them, as stock onnxruntime does.
  const std::vector<float> alphas = FloatsOrEmpty(info, "activation_alpha");
  const std::vector<float> betas = FloatsOrEmpty(info, "activation_beta");
  size_t next_alpha = 0, next_beta = 0;
  for (size_t k = 0; k < names.size(); ++k) {
    const std::string lower = Lower(names[k]);
    const ActSpec* spec = nullptr;
    for (const auto& s : kActs)
      if (lower == s.name) spec = &s;
    if (!spec)
      Fail("unknown activation '" + names[k] +
           "'; expected one of Sigmoid, Tanh, Relu, Affine, LeakyRelu, ThresholdedRelu, ScaledTanh, "
           "HardSigmoid, Elu, Softsign, Softplus");
    Activation& act = a.act[k / 3][k % 3];
    act.kind = spec->kind;
    act.alpha = spec->alpha && next_alpha < alphas.size() ? alphas[next_alpha++] : spec->alpha_default;
    act.beta = spec->beta && next_beta < betas.size() ? betas[next_beta++] : spec->beta_default;
  }
  if (a.num_directions == 1)
    for (int k = 0; k < 3; ++k) a.act[1][k] = a.act[0][k];
  return a;
}

CallIO PrepareCall(Ort::KernelContext& ctx, const Attributes& attrs) {
  CallIO io;
  Dims& d = io.dims;
  d.H = attrs.hidden_size;
  d.L = attrs.num_layers;
  d.D = attrs.num_directions;

  const size_t n_in = ctx.GetInputCount();
  auto input = [&](int i) -> Ort::ConstValue {
    return i < static_cast<int>(n_in) ? ctx.GetInput(i) : Ort::ConstValue(nullptr);
  };
  auto shape_of = [](const Ort::ConstValue& v) { return v.GetTensorTypeAndShapeInfo().GetShape(); };
  auto require_1d = [&](const Ort::ConstValue& v, const char* name, int64_t want) {
    const auto s = shape_of(v);
    if (s.size() != 1 || s[0] != want)
      Fail(std::string("input ") + name + " must be 1-D with " + std::to_string(want) +
           " elements for L=" + std::to_string(d.L) + ", D=" + std::to_string(d.D) + ", I=" + std::to_string(d.I) +
           ", H=" + std::to_string(d.H) + "; got shape " + ShapeStr(s));
  };

  Ort::ConstValue x = input(kX);
  Ort::ConstValue w = input(kW);
  if (!x) Fail("input X is required");
  if (!w) Fail("input W is required");
  const auto xs = shape_of(x);
  if (xs.size() != 3) Fail("input X must have rank 3, got shape " + ShapeStr(xs));
  d.T = attrs.layout == 0 ? xs[0] : xs[1];
  d.B = attrs.layout == 0 ? xs[1] : xs[0];
  d.I = xs[2];
  if (d.I <= 0) Fail("input X must have a feature size > 0, got shape " + ShapeStr(xs));
  require_1d(w, "W", d.WeightCount());
  io.in[kX] = x.GetTensorRawData();
  io.in[kW] = w.GetTensorRawData();

  if (Ort::ConstValue b = input(kB)) {
    require_1d(b, "B", d.BiasCount());
    io.in[kB] = b.GetTensorRawData();
  }
  if (Ort::ConstValue p = input(kP)) {
    require_1d(p, "P", d.PeepholeCount());
    io.in[kP] = p.GetTensorRawData();
  }

  const std::vector<int64_t> state_shape =
      attrs.layout == 0 ? std::vector<int64_t>{d.L * d.D, d.B, d.H} : std::vector<int64_t>{d.B, d.L * d.D, d.H};
  for (int i : {kInitialH, kInitialC}) {
    if (Ort::ConstValue s = input(i)) {
      if (shape_of(s) != state_shape)
        Fail(std::string("input ") + (i == kInitialH ? "initial_h" : "initial_c") + " must have shape " +
             ShapeStr(state_shape) + ", got " + ShapeStr(shape_of(s)));
      io.in[i] = s.GetTensorRawData();
    }
  }

  io.max_len = static_cast<int32_t>(d.T);
  if (Ort::ConstValue sl = input(kSequenceLens)) {
    const auto s = shape_of(sl);
    if (s.size() != 1 || s[0] != d.B)
      Fail("input sequence_lens must have shape [" + std::to_string(d.B) + "], got " + ShapeStr(s));
    io.seq_lens = sl.GetTensorData<int32_t>();
    io.max_len = 0;
    for (int64_t b = 0; b < d.B; ++b) {
      const int32_t len = io.seq_lens[b];
      if (len < 0 || len > d.T)
        Fail("sequence_lens[" + std::to_string(b) + "] = " + std::to_string(len) + " is outside [0, T=" +
             std::to_string(d.T) + "]");
      io.max_len = std::max(io.max_len, len);
    }
  }

  const std::vector<int64_t> y_shape = attrs.layout == 0 ? std::vector<int64_t>{d.T, d.D, d.B, d.H}
                                                         : std::vector<int64_t>{d.B, d.T, d.D, d.H};
  const size_t n_out = ctx.GetOutputCount();
  for (int i = 0; i < kNumOutputs && i < static_cast<int>(n_out); ++i) {
    Ort::UnownedValue v = ctx.GetOutput(i, i == kY ? y_shape : state_shape);
    io.out[i] = v ? v.GetTensorMutableRawData() : nullptr;
  }
  return io;
}

}  // namespace lstm_ort
