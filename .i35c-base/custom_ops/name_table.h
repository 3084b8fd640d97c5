// Enum <-> name through one constexpr table per enum (strategy_names.cc, precision_names.cc), so
// each attribute's parser, its error message and the Python tools' entry points read the same
// names and the lookups are written once.
#pragma once

#include <cstddef>
#include <cstring>
#include <string>

namespace lstm_ort {

template <typename Enum>
struct NamedValue {
  const char* name;
  Enum value;
};

// Exact (case-sensitive) match; false for anything not in the table.
template <typename Enum, size_t N>
bool LookUpName(const NamedValue<Enum> (&table)[N], const char* name, Enum* out) {
  for (const NamedValue<Enum>& entry : table) {
    if (std::strcmp(name, entry.name) == 0) {
      *out = entry.value;
      return true;
    }
  }
  return false;
}

// "?" for a value outside the table (a cast from a bad integer).
template <typename Enum, size_t N>
const char* NameOf(const NamedValue<Enum> (&table)[N], Enum value) {
  for (const NamedValue<Enum>& entry : table)
    if (entry.value == value) return entry.name;
  return "?";
}

// Every name in table order, joined by `separator`.
template <typename Enum, size_t N>
std::string JoinNames(const NamedValue<Enum> (&table)[N], const char* separator) {
  std::string out;
  for (size_t i = 0; i < N; ++i) out += std::string(i ? separator : "") + table[i].name;
  return out;
}

// "a, b or c", for error messages.
template <typename Enum, size_t N>
std::string ChoicesOf(const NamedValue<Enum> (&table)[N]) {
  std::string out;
  for (size_t i = 0; i < N; ++i) out += std::string(i == 0 ? "" : i + 1 == N ? " or " : ", ") + table[i].name;
  return out;
}

}  // namespace lstm_ort
