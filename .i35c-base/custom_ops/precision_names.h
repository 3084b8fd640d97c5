// Precision <-> name, from one table: the `precision` attribute, its error message and the Python
// tools (LstmOrtPrecisionNames, checked against lstm_ort.ops.identity.PRECISIONS) all read it,
// so a new mode is named in one place.
#pragma once

#include <string>

#include "lstm_ort/contract.h"

namespace lstm_ort {

// "fp32", "tf32", "fp16", "bf16", "auto"; false for anything else (names are case-sensitive).
bool ParsePrecision(const char* name, Precision* out);

const char* PrecisionName(Precision precision);

// Every name in enum order, joined by `separator`.
std::string PrecisionNames(const char* separator);

// "fp32, tf32, fp16, bf16 or auto", for error messages.
std::string PrecisionChoices();

}  // namespace lstm_ort
