// The storage types of the CUDA path as values, for code that must not see __half (heuristics,
// scratch layout, the unit tests) and for the Python tools, which name them.
#pragma once

#include <cstddef>
#include <cstring>

namespace lstm_ort {

enum class ElementType { kFloat32, kFloat16 };

inline size_t ElementBytes(ElementType type) { return type == ElementType::kFloat16 ? 2 : 4; }

// "float32" or "float16", as numpy and the Python tools spell them; false for anything else.
inline bool ParseElementType(const char* name, ElementType* out) {
  if (std::strcmp(name, "float32") == 0) *out = ElementType::kFloat32;
  else if (std::strcmp(name, "float16") == 0) *out = ElementType::kFloat16;
  else return false;
  return true;
}

}  // namespace lstm_ort
