// The onnxruntime side of FusedLSTM's configuration: reads an OrtKernelInfo into RawAttributes
// (the rules live in attribute_parsing.cc) and validates one call's inputs.
#include "op_config.h"

#include <algorithm>
#include <sstream>
#include <vector>

#include "attribute_parsing.h"
#include "overrides.h"

namespace lstm_ort {
namespace {

std::string ShapeStr(const std::vector<int64_t>& s) {
  std::ostringstream os;
  os << "[";
  for (size_t i = 0; i < s.size(); ++i) os << (i ? ", " : "") << s[i];
  os << "]";
  return os.str();
}

bool Succeeds(OrtStatus* st) {
  if (st) Ort::GetApi().ReleaseStatus(st);
  return st == nullptr;
}

enum class Kind { kInt, kFloat, kString, kInts, kFloats };

// An attribute the C API cannot read as `want`: absent, or there as another type. The second is an
// error naming the attribute and the type it has (an int cpu_kernel once ran as if none were given).
void RequireAbsent(const OrtKernelInfo* info, const char* name, Kind want) {
  const OrtApi& api = Ort::GetApi();
  static const char* const kWant[] = {"an int", "a float", "a string", "a list of ints", "a list of floats"};
  int64_t i = 0;
  float f = 0.f;
  size_t chars = 0, ints = 0, floats = 0;
  const char* found = nullptr;
  if (want != Kind::kInt && Succeeds(api.KernelInfoGetAttribute_int64(info, name, &i))) {
    found = "an int";
  } else if (want != Kind::kFloat && Succeeds(api.KernelInfoGetAttribute_float(info, name, &f))) {
    found = "a float";
  } else if (want != Kind::kString && Succeeds(api.KernelInfoGetAttribute_string(info, name, nullptr, &chars))) {
    found = "a string";
  } else if (want != Kind::kInts && Succeeds(api.KernelInfoGetAttributeArray_int64(info, name, nullptr, &ints)) &&
             ints > 0) {  // onnxruntime reads any attribute there as an array, an empty one: only elements show one
    found = "a list of ints";
  } else if (want != Kind::kFloats && Succeeds(api.KernelInfoGetAttributeArray_float(info, name, nullptr, &floats)) &&
             floats > 0) {
    found = "a list of floats";
  }
  if (found)
    Fail(std::string("attribute ") + name + " must be " + kWant[static_cast<int>(want)] + ", got " + found);
}

// Absent attributes come back empty; the C API reports them as an error status.
std::optional<int64_t> IntAttribute(const OrtKernelInfo* info, const char* name) {
  int64_t v = 0;
  if (Succeeds(Ort::GetApi().KernelInfoGetAttribute_int64(info, name, &v))) return v;
  RequireAbsent(info, name, Kind::kInt);
  return std::nullopt;
}

std::optional<float> FloatAttribute(const OrtKernelInfo* info, const char* name) {
  float v = 0.f;
  if (Succeeds(Ort::GetApi().KernelInfoGetAttribute_float(info, name, &v))) return v;
  RequireAbsent(info, name, Kind::kFloat);
  return std::nullopt;
}

std::optional<std::string> StringAttribute(const OrtKernelInfo* info, const char* name) {
  size_t size = 0;
  if (!Succeeds(Ort::GetApi().KernelInfoGetAttribute_string(info, name, nullptr, &size))) {
    RequireAbsent(info, name, Kind::kString);
    return std::nullopt;
  }
  std::string s(size, '\0');
  Ort::ThrowOnError(Ort::GetApi().KernelInfoGetAttribute_string(info, name, s.data(), &size));
  s.resize(size > 0 ? size - 1 : 0);  // size counts the terminating NUL
  return s;
}

std::vector<float> FloatsOrEmpty(const OrtKernelInfo* info, const char* name) {
  size_t size = 0;
  if (!Succeeds(Ort::GetApi().KernelInfoGetAttributeArray_float(info, name, nullptr, &size)) || size == 0) {
    RequireAbsent(info, name, Kind::kFloats);
    return {};
  }
  std::vector<float> v(size);
  if (size) Ort::ThrowOnError(Ort::GetApi().KernelInfoGetAttributeArray_float(info, name, v.data(), &size));
  return v;
}

std::optional<std::vector<int64_t>> IntsAttribute(const OrtKernelInfo* info, const char* name) {
  size_t size = 0;
  if (!Succeeds(Ort::GetApi().KernelInfoGetAttributeArray_int64(info, name, nullptr, &size))) {
    RequireAbsent(info, name, Kind::kInts);
    return std::nullopt;
  }
  if (size == 0) RequireAbsent(info, name, Kind::kInts);  // an empty list, or another type read as one
  std::vector<int64_t> v(size);
  if (size) Ort::ThrowOnError(Ort::GetApi().KernelInfoGetAttributeArray_int64(info, name, v.data(), &size));
  return v;
}

RawAttributes ReadAttributes(const OrtKernelInfo* info) {
  RawAttributes raw;
  raw.hidden_size = IntAttribute(info, "hidden_size");
  raw.num_layers = IntAttribute(info, "num_layers");
  raw.direction = StringAttribute(info, "direction");
  raw.layout = IntAttribute(info, "layout");
  raw.clip = FloatAttribute(info, "clip");
  raw.strategy = StringAttribute(info, "strategy");
  raw.precision = StringAttribute(info, "precision");
  raw.cpu_kernel = StringAttribute(info, "cpu_kernel");
  raw.int8_scales = StringAttribute(info, "int8_scales");
  raw.tuned = StringAttribute(info, "tuned");
  raw.debug = StringAttribute(info, "debug");
  raw.input_forget = IntAttribute(info, "input_forget");
  raw.activations = StringAttribute(info, "activations");
  raw.activation_alpha = FloatsOrEmpty(info, "activation_alpha");
  raw.activation_beta = FloatsOrEmpty(info, "activation_beta");
  raw.rank_input = IntsAttribute(info, "rank_input");
  raw.rank_recurrent = IntsAttribute(info, "rank_recurrent");
  return raw;
}

// A rank above the smaller side of the matrix it factors saves nothing and is not a truncation.
void CheckRanks(const Dims& d, const Ranks& ranks) {
  for (int64_t k = 0; k < d.L * d.D; ++k) {
    const int64_t rows[2] = {d.LayerInput(k / d.D), d.H};
    const int64_t r[2] = {ranks.Input(k), ranks.Recurrent(k)};
    for (int part = 0; part < 2; ++part) {
      const int64_t bound = std::min(rows[part], kGates * d.H);
      if (r[part] > bound)
        Fail(std::string("attribute ") + (part ? "rank_recurrent[" : "rank_input[") + std::to_string(k) + "] = " +
             std::to_string(r[part]) + " exceeds min(" + (part ? "H" : "I_l") + " = " + std::to_string(rows[part]) +
             ", 4H = " + std::to_string(kGates * d.H) + ")");
    }
  }
}

}  // namespace

void Fail(const std::string& message) { throw Ort::Exception(std::string("FusedLSTM: ") + message, ORT_INVALID_ARGUMENT); }

Attributes ParseAttributes(const OrtKernelInfo* info) {
  const RawAttributes raw = ReadAttributes(info);
  Attributes attrs;
  try {
    attrs = ResolveAttributes(raw);
  } catch (const AttributeError& e) {
    Fail(e.what());
  }
  // The per-node overrides (their environment aliases, then the debug attribute) on every kernel,
  // the CPU's too: a bad value is an error whichever device runs the node, never read on one and
  // ignored on the other.
  try {
    OverridesForNode(attrs.debug);
  } catch (const std::invalid_argument& e) {
    Fail(e.what());
  }
  return attrs;
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
  // Factors with no rank to read them by: W alone would then be too small, which says less.
  if (!attrs.ranks.Any() && input(kFactors))
    Fail("input factors is given, but no rank_input/rank_recurrent attribute names a factored part");
  const WeightLayout layout(d, attrs.ranks);
  require_1d(w, "W", layout.WeightCount());
  io.in[kX] = x.GetTensorRawData();
  io.in[kW] = w.GetTensorRawData();
  // int8 weights come with their scales, float weights without (docs/ops.md, "int8 weights").
  const bool int8 = w.GetTensorTypeAndShapeInfo().GetElementType() == ONNX_TENSOR_ELEMENT_DATA_TYPE_INT8;
  if (Ort::ConstValue s = input(kWScale)) {
    if (!int8) Fail("input W_scale is given, but W is not int8");
    require_1d(s, "W_scale", d.WeightScaleCount());
    io.in[kWScale] = s.GetTensorRawData();
  } else if (int8) {
    Fail("input W_scale is required: W is int8");
  }
  if (int8 && attrs.ranks.Any()) Fail("int8 weights cannot be factored (attributes rank_input/rank_recurrent)");
  if (attrs.ranks.Any()) {
    CheckRanks(d, attrs.ranks);
    Ort::ConstValue f = input(kFactors);
    if (!f) Fail("input factors is required: attributes rank_input/rank_recurrent name factored parts");
    require_1d(f, "factors", layout.FactorCount());
    io.in[kFactors] = f.GetTensorRawData();
  }

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
