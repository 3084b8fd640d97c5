#include "enum_names.h"

#include <cstddef>
#include <cstring>

namespace lstm_ort {
namespace {

template <typename Enum>
struct NamedValue {
  const char* name;
  Enum value;
};

// Each table in enum order.
constexpr NamedValue<Strategy> kStrategies[] = {
    {"auto", Strategy::kAuto},           {"tiled", Strategy::kTiled},         {"splitk", Strategy::kSplitK},
    {"persistent", Strategy::kPersistent}, {"wavefront", Strategy::kWavefront}, {"cluster", Strategy::kCluster},
};
constexpr NamedValue<Precision> kPrecisions[] = {
    {"fp32", Precision::kFp32}, {"tf32", Precision::kTf32}, {"fp16", Precision::kFp16},
    {"bf16", Precision::kBf16}, {"auto", Precision::kAuto},
};
constexpr NamedValue<Arithmetic> kArithmetics[] = {
    {"fp32", Arithmetic::kFp32}, {"tf32", Arithmetic::kTf32}, {"fp16", Arithmetic::kFp16}, {"bf16", Arithmetic::kBf16},
};
constexpr NamedValue<Int8Scales> kInt8Scales[] = {{"call", Int8Scales::kCall}, {"row", Int8Scales::kRow},
                                                  {"slices", Int8Scales::kSlices}};
constexpr NamedValue<CpuKernel> kCpuKernels[] = {
    {"auto", CpuKernel::kAuto}, {"fused", CpuKernel::kFused},
    {"stock", CpuKernel::kStock}, {"stock_split", CpuKernel::kStockSplit},
    {"stock_threads", CpuKernel::kStockThreads},
};
constexpr NamedValue<MmaOperand> kMmaOperands[] = {
    {"3xtf32", MmaOperand::kTf32x3}, {"tf32", MmaOperand::kTf32},
    {"fp16", MmaOperand::kFp16}, {"bf16", MmaOperand::kBf16},
};

template <typename Enum, size_t N>
struct Table {
  const NamedValue<Enum> (&entries)[N];
};
template <typename Enum, size_t N>
Table<Enum, N> MakeTable(const NamedValue<Enum> (&entries)[N]) {
  return {entries};
}
auto TableOf(Strategy) { return MakeTable(kStrategies); }
auto TableOf(Precision) { return MakeTable(kPrecisions); }
auto TableOf(Arithmetic) { return MakeTable(kArithmetics); }
auto TableOf(CpuKernel) { return MakeTable(kCpuKernels); }
auto TableOf(Int8Scales) { return MakeTable(kInt8Scales); }
auto TableOf(MmaOperand) { return MakeTable(kMmaOperands); }

}  // namespace

template <typename Enum>
bool ParseEnum(const char* name, Enum* out) {
  for (const auto& entry : TableOf(Enum{}).entries) {
    if (std::strcmp(name, entry.name) == 0) {
      *out = entry.value;
      return true;
    }
  }
  return false;
}

template <typename Enum>
const char* EnumName(Enum value) {
  for (const auto& entry : TableOf(Enum{}).entries)
    if (entry.value == value) return entry.name;
  return "?";
}

template <typename Enum>
std::string EnumNames(const char* separator) {
  std::string out;
  for (const auto& entry : TableOf(Enum{}).entries) out += (out.empty() ? "" : separator) + std::string(entry.name);
  return out;
}

template <typename Enum>
std::string EnumChoices() {
  const auto& entries = TableOf(Enum{}).entries;
  const size_t n = sizeof(entries) / sizeof(entries[0]);
  std::string out;
  for (size_t i = 0; i < n; ++i) out += std::string(i == 0 ? "" : i + 1 == n ? " or " : ", ") + entries[i].name;
  return out;
}

#define LSTM_ORT_ENUM_NAMES(Enum)                                  \
  template bool ParseEnum<Enum>(const char* name, Enum* out);      \
  template const char* EnumName<Enum>(Enum value);                 \
  template std::string EnumNames<Enum>(const char* separator);     \
  template std::string EnumChoices<Enum>();
LSTM_ORT_ENUM_NAMES(Strategy)
LSTM_ORT_ENUM_NAMES(Precision)
LSTM_ORT_ENUM_NAMES(Arithmetic)
LSTM_ORT_ENUM_NAMES(CpuKernel)
LSTM_ORT_ENUM_NAMES(Int8Scales)
LSTM_ORT_ENUM_NAMES(MmaOperand)
#undef LSTM_ORT_ENUM_NAMES

}  // namespace lstm_ort
