#include "precision_names.h"

#include "name_table.h"

namespace lstm_ort {
namespace {

// In enum order.
constexpr NamedValue<Precision> kPrecisions[] = {
    {"fp32", Precision::kFp32},
    {"tf32", Precision::kTf32},
    {"fp16", Precision::kFp16},
    {"bf16", Precision::kBf16},
    {"auto", Precision::kAuto},
};

}  // namespace

bool ParsePrecision(const char* name, Precision* out) { return LookUpName(kPrecisions, name, out); }

const char* PrecisionName(Precision precision) { return NameOf(kPrecisions, precision); }

std::string PrecisionNames(const char* separator) { return JoinNames(kPrecisions, separator); }

std::string PrecisionChoices() { return ChoicesOf(kPrecisions); }

}  // namespace lstm_ort
