#include "overrides.h"

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <stdexcept>
#include <vector>

#include "cuda/mma_step/plan.h"
#include "enum_names.h"

namespace lstm_ort {
namespace {

// A value the key does not take; the caller names the key and what it takes.
struct BadValue {};

int64_t Integer(const std::string& v, int64_t lo, int64_t hi) {
  if (v.empty() || v.size() > 18) throw BadValue{};
  char* end = nullptr;
  errno = 0;
  const long long n = std::strtoll(v.c_str(), &end, 10);
  if (errno || *end || n < lo || n > hi) throw BadValue{};
  return n;
}

bool Flag(const std::string& v) {
  if (v == "1") return true;
  if (v == "0") return false;
  throw BadValue{};
}

template <typename Enum>
Enum Named(const std::string& v) {
  Enum e;
  if (!ParseEnum(v.c_str(), &e)) throw BadValue{};
  return e;
}

// One override: its key (the `debug` attribute's and the session config's lstm_ort.debug.<key>),
// its environment variable, whether it is per node or per process (CPU, environment only), what it
// takes (for the error message) and how it applies.
struct Key {
  const char* key;
  const char* env;
  bool per_node;
  std::string (*takes)();
  void (*apply)(const std::string& value, Overrides& node, CpuOverrides& cpu);
};

std::string Text(const char* s) { return s; }

const std::vector<Key>& Keys() {
  static const std::vector<Key> keys = {
      {"strict", "LSTM_ORT_STRICT", true, [] { return Text("0 or 1"); },
       [](const std::string& v, Overrides& o, CpuOverrides&) { o.strict = Flag(v); }},
      {"strategy", "LSTM_ORT_STRATEGY", true, [] { return EnumChoices<Strategy>(); },
       [](const std::string& v, Overrides& o, CpuOverrides&) { o.strategy = Named<Strategy>(v); }},
      {"mma", "LSTM_ORT_MMA", true, [] { return "fma, " + EnumChoices<MmaOperand>(); },
       [](const std::string& v, Overrides& o, CpuOverrides&) {
         o.mma_forced = true;
         o.mma = v == "fma" ? std::nullopt : std::optional<MmaOperand>(Named<MmaOperand>(v));
       }},
      {"gemm_step", "LSTM_ORT_GEMM_STEP", true, [] { return Text("0 or 1"); },
       [](const std::string& v, Overrides& o, CpuOverrides&) { o.gemm_step = Flag(v); }},
      {"half_step_weights", "LSTM_ORT_HALF_STEP_WEIGHTS", true, [] { return Text("0 or 1"); },
       [](const std::string& v, Overrides& o, CpuOverrides&) { o.half_step_weights = Flag(v); }},
      {"cluster_size", "LSTM_ORT_CLUSTER_SIZE", true, [] { return Text("a cluster size from 1 to 16"); },
       [](const std::string& v, Overrides& o, CpuOverrides&) { o.cluster_size = static_cast<int>(Integer(v, 1, 16)); }},
      {"cluster_slices", "LSTM_ORT_CLUSTER_SLICES", true, [] { return Text("2, 4 or 8"); },
       [](const std::string& v, Overrides& o, CpuOverrides&) {
         const int64_t s = Integer(v, 2, 8);
         if (s != 2 && s != 4 && s != 8) throw BadValue{};
         o.cluster_slices = static_cast<int>(s);
       }},
      {"persistent_tile", "LSTM_ORT_PERSISTENT_TILE", true,
       [] { return Text("U,Bb (units and batch rows of a block; 0 leaves one to the planner)"); },
       [](const std::string& v, Overrides& o, CpuOverrides&) {
         const size_t comma = v.find(',');
         if (comma == std::string::npos) throw BadValue{};
         o.tile_u = static_cast<int>(Integer(v.substr(0, comma), 0, 1024));
         o.tile_bb = static_cast<int>(Integer(v.substr(comma + 1), 0, 1024));
       }},
      {"persistent_chunks", "LSTM_ORT_PERSISTENT_CHUNKS", true, [] { return Text("1, 2, 3 or 4"); },
       [](const std::string& v, Overrides& o, CpuOverrides&) { o.resident_chunks = static_cast<int>(Integer(v, 1, 4)); }},
      {"low_rank_stepwise", "LSTM_ORT_LOW_RANK_STEPWISE", true, [] { return Text("0 or 1"); },
       [](const std::string& v, Overrides& o, CpuOverrides&) { o.low_rank_stepwise = Flag(v); }},
      {"call_graphs", "LSTM_ORT_CALL_GRAPHS", true, [] { return Text("0 or 1"); },
       [](const std::string& v, Overrides& o, CpuOverrides&) { o.call_graphs = Flag(v); }},
      {"mma_step", "LSTM_ORT_MMA_STEP", true, [] { return Text("0 or 1"); },
       [](const std::string& v, Overrides& o, CpuOverrides&) { o.mma_step = Flag(v); }},
      {"mma_step_tile", "LSTM_ORT_MMA_STEP_TILE", true,
       [] {
         std::string names;
         for (const MmaStepTile& t : kMmaStepTileTable) names += (names.empty() ? "" : ", ") + std::string(t.name);
         return "one of " + names;
       },
       [](const std::string& v, Overrides& o, CpuOverrides&) {
         o.mma_step_tile = -1;
         for (int i = 0; i < kMmaStepTiles; ++i)
           if (v == kMmaStepTileTable[i].name) o.mma_step_tile = i;
         if (o.mma_step_tile < 0) throw BadValue{};
       }},
      {"mma_step_pdl", "LSTM_ORT_MMA_STEP_PDL", true, [] { return Text("0 or 1"); },
       [](const std::string& v, Overrides& o, CpuOverrides&) { o.mma_step_pdl = Flag(v); }},
      {"mma_step_resident", "LSTM_ORT_MMA_STEP_RESIDENT", true, [] { return Text("0 or 1"); },
       [](const std::string& v, Overrides& o, CpuOverrides&) { o.mma_step_resident = Flag(v); }},
      {"mma_step_layers", "LSTM_ORT_MMA_STEP_LAYERS", true, [] { return Text("a layer count from 1 to 8"); },
       [](const std::string& v, Overrides& o, CpuOverrides&) {
         o.mma_step_layers = static_cast<int>(Integer(v, 1, kMaxMmaStepLayers));
       }},
      {"refuse_launches", "LSTM_ORT_REFUSE_LAUNCHES", true, [] { return Text("0 or 1"); },
       [](const std::string& v, Overrides& o, CpuOverrides&) { o.refuse_launches = Flag(v); }},
      {"cpu_threads", "LSTM_ORT_CPU_THREADS", false, [] { return Text("a thread count >= 0 (0: the cores)"); },
       [](const std::string& v, Overrides&, CpuOverrides& c) { c.threads = Integer(v, 0, 1 << 16); }},
      {"cpu_split_min", "LSTM_ORT_CPU_SPLIT_MIN", false, [] { return Text("a flop count >= 1"); },
       [](const std::string& v, Overrides&, CpuOverrides& c) { c.split_min = Integer(v, 1, INT64_MAX); }},
      {"cpu_parallel_min", "LSTM_ORT_CPU_PARALLEL_MIN", false, [] { return Text("a flop count >= 1"); },
       [](const std::string& v, Overrides&, CpuOverrides& c) { c.parallel_min = Integer(v, 1, INT64_MAX); }},
      {"cpu_verbose", "LSTM_ORT_CPU_VERBOSE", false, [] { return Text("0 or 1"); },
       [](const std::string& v, Overrides&, CpuOverrides& c) { c.verbose = Flag(v); }},
      {"cpu_split", "LSTM_ORT_CPU_SPLIT", false, [] { return Text("0, 1, 2 or 3"); },
       [](const std::string& v, Overrides&, CpuOverrides& c) { c.split = Integer(v, 0, 3); }},
      {"cpu_kernel", "LSTM_ORT_CPU_KERNEL", false, [] { return EnumChoices<CpuKernel>(); },
       [](const std::string& v, Overrides&, CpuOverrides& c) {
         Named<CpuKernel>(v);
         c.cpu_kernel = v;
       }},
      {"cpu_int8_split_min", "LSTM_ORT_CPU_INT8_SPLIT_MIN", false, [] { return Text("a multiply-add count >= 1"); },
       [](const std::string& v, Overrides&, CpuOverrides& c) { c.int8_split_min = Integer(v, 1, INT64_MAX); }},
      {"cpu_int8_step_split_min", "LSTM_ORT_CPU_INT8_STEP_SPLIT_MIN", false,
       [] { return Text("a multiply-add count >= 1"); },
       [](const std::string& v, Overrides&, CpuOverrides& c) { c.int8_step_split_min = Integer(v, 1, INT64_MAX); }},
      {"cpu_int8_isa", "LSTM_ORT_CPU_INT8_ISA", false,
       [] { return Text("amx, vnni512, vnni256, avxvnni, avx2 or generic (checked against the CPU when the kernel is picked)"); },
       [](const std::string& v, Overrides&, CpuOverrides& c) { c.int8_isa = v; }},
      {"cpu_bf16_isa", "LSTM_ORT_CPU_BF16_ISA", false,
       [] { return Text("amx, avx512bf16 or none (none: precision bf16 is refused as on a CPU without bf16)"); },
       [](const std::string& v, Overrides&, CpuOverrides& c) {
         if (v != "amx" && v != "avx512bf16" && v != "none") throw BadValue{};
         c.bf16_isa = v;
       }},
      {"cpu_isa", "LSTM_ORT_CPU_ISA", false,
       [] { return Text("v2, v3, v4 or auto (checked against the CPU when the kernel is picked)"); },
       [](const std::string& v, Overrides&, CpuOverrides& c) {
         if (v != "v2" && v != "v3" && v != "v4" && v != "auto") throw BadValue{};
         c.fp32_isa = v == "auto" ? "" : v;
       }},
  };
  return keys;
}

// Applies `value` through `key`; a bad value is an error naming `source` (the variable or the
// debug key) and what the key takes.
void Apply(const Key& key, const std::string& source, const std::string& value, Overrides& node, CpuOverrides& cpu) {
  try {
    key.apply(value, node, cpu);
  } catch (const BadValue&) {
    throw std::invalid_argument(source + " must be " + key.takes() + ", got '" + value + "'");
  }
}

// Every variable of the keys of one scope that is set and not empty, applied in table order.
void ApplyEnvironment(bool per_node, Overrides& node, CpuOverrides& cpu) {
  for (const Key& key : Keys()) {
    if (key.per_node != per_node) continue;
    const char* value = std::getenv(key.env);
    if (value && *value) Apply(key, key.env, value, node, cpu);
  }
}

std::string Trimmed(const std::string& s) {
  const size_t first = s.find_first_not_of(" \t");
  if (first == std::string::npos) return {};
  return s.substr(first, s.find_last_not_of(" \t") - first + 1);
}

}  // namespace

Overrides ParseDebugOptions(const std::string& text, Overrides base) {
  CpuOverrides unused;
  size_t at = 0;
  while (at <= text.size()) {
    const size_t end = std::min(text.find(';', at), text.size());
    const std::string entry = Trimmed(text.substr(at, end - at));
    at = end + 1;
    if (entry.empty()) continue;
    const size_t eq = entry.find('=');
    const std::string name = Trimmed(entry.substr(0, eq));
    const Key* key = nullptr;
    for (const Key& k : Keys())
      if (name == k.key) key = &k;
    if (!key) throw std::invalid_argument("debug key '" + name + "' is none of " + DebugKeys(", "));
    if (!key->per_node)
      throw std::invalid_argument("debug key " + name + " is process-wide: set " + key->env + " instead");
    if (eq == std::string::npos) throw std::invalid_argument("debug entry '" + entry + "' must be " + name + "=value");
    Apply(*key, "debug key " + name, Trimmed(entry.substr(eq + 1)), base, unused);
  }
  return base;
}

Overrides OverridesFromEnvironment() {
  Overrides node;
  CpuOverrides unused;
  ApplyEnvironment(true, node, unused);
  return node;
}

const CpuOverrides& CpuOverridesFromEnvironment() {
  static const CpuOverrides cpu = [] {
    Overrides unused;
    CpuOverrides c;
    ApplyEnvironment(false, unused, c);
    return c;
  }();
  return cpu;
}

std::string ForcedFp32Isa() noexcept {
  try {
    return CpuOverridesFromEnvironment().fp32_isa;
  } catch (...) {
    return {};
  }
}

std::string DebugKeys(const char* separator) {
  std::string out;
  for (const Key& key : Keys())
    if (key.per_node) out += (out.empty() ? "" : separator) + std::string(key.key);
  return out;
}

}  // namespace lstm_ort
