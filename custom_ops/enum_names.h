// Enum <-> name, one table per enum in enum_names.cc: the attributes (strategy, precision,
// cpu_kernel, tuned), the debug overrides (strategy, mma), their error messages, the reports and
// the Python side's entry points (LstmOrt*Names, checked against lstm_ort.ops.identity) all read
// them, so a new strategy, precision mode, CPU kernel or tensor-core operand is named in one row.
#pragma once

#include <string>

#include "cuda/persistent/mma_operand.h"
#include "lstm_ort/contract.h"

namespace lstm_ort {

// Exact (case-sensitive) match; false for anything not in Enum's table. Defined for Strategy,
// Precision, Arithmetic, CpuKernel and MmaOperand.
template <typename Enum>
bool ParseEnum(const char* name, Enum* out);

// "?" for a value outside the table (a cast from a bad integer).
template <typename Enum>
const char* EnumName(Enum value);

// Every name in enum order, joined by `separator`.
template <typename Enum>
std::string EnumNames(const char* separator);

// "a, b or c", for error messages.
template <typename Enum>
std::string EnumChoices();

}  // namespace lstm_ort
