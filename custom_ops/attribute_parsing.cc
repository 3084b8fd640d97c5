#include "attribute_parsing.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <sstream>
#include <tuple>

#include "enum_names.h"
#include "overrides.h"

namespace lstm_ort {
namespace {

[[noreturn]] void Reject(const std::string& message) { throw AttributeError(message); }

std::string Lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

std::string Trim(const std::string& s) {
  const auto b = s.find_first_not_of(" \t");
  const auto e = s.find_last_not_of(" \t");
  return b == std::string::npos ? std::string() : s.substr(b, e - b + 1);
}

std::vector<std::string> Split(const std::string& text, char separator) {
  std::vector<std::string> parts;
  std::stringstream ss(text);
  std::string part;
  while (std::getline(ss, part, separator)) parts.push_back(part);
  return parts;
}

// A whole decimal field; strtoll's leading blanks and sign are accepted, as before.
bool ParseInt(const std::string& field, int64_t* out) {
  if (field.empty()) return false;
  char* end = nullptr;
  *out = std::strtoll(field.c_str(), &end, 10);
  return *end == '\0';
}

struct ActSpec {
  const char* name;  // as docs/ops.md spells it; matched case-insensitively
  ActKind kind;
  bool alpha, beta;
  float alpha_default, beta_default;
};

// The activations ONNX LSTM allows; alpha/beta defaults as stock onnxruntime applies them.
constexpr ActSpec kActs[] = {
    {"Sigmoid", ActKind::kSigmoid, false, false, 0.f, 0.f},
    {"Tanh", ActKind::kTanh, false, false, 0.f, 0.f},
    {"Relu", ActKind::kRelu, false, false, 0.f, 0.f},
    {"Affine", ActKind::kAffine, true, true, 0.f, 0.f},
    {"LeakyRelu", ActKind::kLeakyRelu, true, false, 0.01f, 0.f},
    {"ThresholdedRelu", ActKind::kThresholdedRelu, true, false, 0.f, 0.f},
    {"ScaledTanh", ActKind::kScaledTanh, true, true, 0.f, 0.f},
    {"HardSigmoid", ActKind::kHardSigmoid, true, true, 0.2f, 0.5f},
    {"Elu", ActKind::kElu, true, false, 1.f, 0.f},
    {"Softsign", ActKind::kSoftsign, false, false, 0.f, 0.f},
    {"Softplus", ActKind::kSoftplus, false, false, 0.f, 0.f},
};

const ActSpec* FindActivation(const std::string& name) {
  const std::string lower = Lower(name);
  for (const ActSpec& s : kActs)
    if (lower == Lower(s.name)) return &s;
  return nullptr;
}

const ActSpec& SpecOf(ActKind kind) {
  for (const ActSpec& s : kActs)
    if (s.kind == kind) return s;
  throw std::logic_error("no activation of this kind");
}

std::string ActivationNames() {
  std::string out;
  for (const ActSpec& s : kActs) out += std::string(out.empty() ? "" : ", ") + s.name;
  return out;
}

}  // namespace

void ResolveDirection(const std::string& direction, int* num_directions, bool* reverse_only) {
  *num_directions = 1;
  *reverse_only = false;
  if (direction == "bidirectional") {
    *num_directions = 2;
  } else if (direction == "reverse") {
    *reverse_only = true;
  } else if (direction != "forward") {
    Reject("attribute direction must be forward, reverse or bidirectional, got '" + direction + "'");
  }
}

void ValidateLayout(int64_t layout) {
  if (layout != 0 && layout != 1) Reject("attribute layout must be 0 or 1, got " + std::to_string(layout));
}

Strategy ResolveStrategy(const std::string& name) {
  Strategy s;
  if (!ParseEnum(name.c_str(), &s))
    Reject("attribute strategy must be " + EnumChoices<Strategy>() + ", got '" + name + "'");
  return s;
}

CpuKernel ResolveCpuKernel(const std::string& name) {
  CpuKernel k;
  if (!ParseEnum(name.c_str(), &k))
    Reject("attribute cpu_kernel must be " + EnumChoices<CpuKernel>() + ", got '" + name + "'");
  return k;
}

Precision ResolvePrecision(const std::string& name) {
  Precision p;
  if (!ParseEnum(name.c_str(), &p))
    Reject("attribute precision must be " + EnumChoices<Precision>() + ", got '" + name + "'");
  return p;
}

std::vector<TunedStrategy> ParseTuned(const std::string& text) {
  std::vector<TunedStrategy> out;
  for (const std::string& entry : Split(text, ';')) {
    if (Trim(entry).empty()) continue;
    const std::vector<std::string> f = Split(entry, '|');
    TunedStrategy t;
    const bool cpu = f.size() == 4 && f[0].rfind(kTunedCpuPrefix, 0) == 0;
    const bool ok = f.size() == 4 && !f[0].empty() && ParseInt(f[1], &t.T) && ParseInt(f[2], &t.B) &&
                    (cpu ? ParseEnum(f[3].c_str(), &t.cpu_kernel) : ParseEnum(f[3].c_str(), &t.strategy));
    if (!ok)
      Reject("attribute tuned must hold 'gpu|T|B|strategy' (or 'cpu:NAME|T|B|cpu_kernel') entries separated by ';', got '" +
             entry + "'");
    t.gpu = f[0];
    out.push_back(t);
  }
  return out;
}

std::string FormatTuned(const std::vector<TunedStrategy>& entries) {
  std::string out;
  for (const TunedStrategy& t : entries) {
    if (!out.empty()) out += ';';
    const bool cpu = t.gpu.rfind(kTunedCpuPrefix, 0) == 0;
    out += t.gpu + '|' + std::to_string(t.T) + '|' + std::to_string(t.B) + '|' +
           (cpu ? EnumName(t.cpu_kernel) : EnumName(t.strategy));
  }
  return out;
}

const char* ActivationName(ActKind kind) { return SpecOf(kind).name; }

void ActivationTakes(ActKind kind, bool* alpha, bool* beta) {
  *alpha = SpecOf(kind).alpha;
  *beta = SpecOf(kind).beta;
}

void ResolveActivations(const std::optional<std::string>& names, const std::vector<float>& alphas,
                        const std::vector<float>& betas, int num_directions, Activation (&act)[2][3]) {
  std::vector<std::string> list;
  if (names) {
    for (const std::string& item : Split(*names, ',')) list.push_back(Trim(item));
  } else {
    for (int d = 0; d < num_directions; ++d) list.insert(list.end(), {"Sigmoid", "Tanh", "Tanh"});
  }
  if (list.size() != static_cast<size_t>(3 * num_directions))
    Reject("attribute activations must name " + std::to_string(3 * num_directions) +
           " functions (f, g, h per direction, comma-separated), got '" + names.value_or("") + "'");

  size_t next_alpha = 0, next_beta = 0;
  for (size_t k = 0; k < list.size(); ++k) {
    const ActSpec* spec = FindActivation(list[k]);
    if (!spec) Reject("unknown activation '" + list[k] + "'; expected one of " + ActivationNames());
    Activation& a = act[k / 3][k % 3];
    a.kind = spec->kind;
    a.alpha = spec->alpha && next_alpha < alphas.size() ? alphas[next_alpha++] : spec->alpha_default;
    a.beta = spec->beta && next_beta < betas.size() ? betas[next_beta++] : spec->beta_default;
  }
  if (num_directions == 1)
    for (int k = 0; k < 3; ++k) act[1][k] = act[0][k];
}

Ranks ResolveRanks(const std::optional<std::vector<int64_t>>& input,
                   const std::optional<std::vector<int64_t>>& recurrent, int64_t layers, int num_directions) {
  Ranks ranks;
  const size_t want = static_cast<size_t>(layers * num_directions);
  for (const auto& [name, given, out] : {std::make_tuple("rank_input", &input, &ranks.input),
                                         std::make_tuple("rank_recurrent", &recurrent, &ranks.recurrent)}) {
    if (!*given) continue;
    const std::vector<int64_t>& v = **given;
    bool ok = v.size() == want;
    for (int64_t r : v) ok = ok && r >= 0;
    if (!ok) {
      std::string got;
      for (int64_t r : v) got += (got.empty() ? "" : ", ") + std::to_string(r);
      Reject(std::string("attribute ") + name + " must hold " + std::to_string(want) +
             " ranks >= 0 (one per layer and direction, 0 = not factored), got [" + got + "]");
    }
    *out = v;
  }
  return ranks;
}

Attributes ResolveAttributes(const RawAttributes& raw) {
  Attributes a;
  if (!raw.hidden_size || *raw.hidden_size <= 0) Reject("attribute hidden_size is required and must be > 0");
  a.hidden_size = *raw.hidden_size;
  a.num_layers = raw.num_layers.value_or(1);
  if (a.num_layers <= 0) Reject("attribute num_layers must be > 0, got " + std::to_string(a.num_layers));

  ResolveDirection(raw.direction.value_or("forward"), &a.num_directions, &a.reverse_only);

  a.layout = raw.layout.value_or(0);
  ValidateLayout(a.layout);

  a.has_clip = raw.clip.has_value();
  if (a.has_clip) {
    a.clip = *raw.clip;
    if (!(a.clip > 0.f)) Reject("attribute clip must be > 0");
  }

  if (raw.strategy) a.strategy = ResolveStrategy(*raw.strategy);
  if (raw.precision) a.precision = ResolvePrecision(*raw.precision);
  if (raw.cpu_kernel) a.cpu_kernel = ResolveCpuKernel(*raw.cpu_kernel);
  a.cpu_kernel_set = raw.cpu_kernel.has_value();
  if (raw.int8_scales && !ParseEnum(raw.int8_scales->c_str(), &a.int8_scales))
    Reject("attribute int8_scales must be " + EnumChoices<Int8Scales>() + ", got '" + *raw.int8_scales + "'");
  if (raw.tuned) a.tuned = ParseTuned(*raw.tuned);
  if (raw.debug) {
    try {
      ParseDebugOptions(*raw.debug);
    } catch (const std::invalid_argument& e) {
      Reject(std::string("attribute debug: ") + e.what());
    }
    a.debug = *raw.debug;
  }

  const int64_t input_forget = raw.input_forget.value_or(0);
  if (input_forget != 0 && input_forget != 1) Reject("attribute input_forget must be 0 or 1");
  a.input_forget = input_forget == 1;

  ResolveActivations(raw.activations, raw.activation_alpha, raw.activation_beta, a.num_directions, a.act);
  a.ranks = ResolveRanks(raw.rank_input, raw.rank_recurrent, a.num_layers, a.num_directions);
  return a;
}

}  // namespace lstm_ort
