// Conventions of the C entry points for lstm_ort's Python tools (ctypes, outside any
// onnxruntime session): exported, 0 on success, else nonzero with the message in `out`.
#pragma once

#include <algorithm>
#include <cstring>
#include <string>

#define LSTM_ORT_C_ENTRY extern "C" __attribute__((visibility("default")))

namespace lstm_ort {

// `text` into out[0, size), cut short if it does not fit; nonzero only when there is no room at all.
inline int CopyOut(const std::string& text, char* out, int size) {
  if (!out || size <= 0) return 1;
  const size_t n = std::min<size_t>(text.size(), static_cast<size_t>(size) - 1);
  std::memcpy(out, text.data(), n);
  out[n] = '\0';
  return 0;
}

// As CopyOut, but a result cut short is an error: callers that compare the text need all of it.
inline int CopyOutWhole(const std::string& text, char* out, int size) {
  if (size > 0 && text.size() >= static_cast<size_t>(size)) {
    CopyOut("output buffer too small: " + std::to_string(text.size() + 1) + " bytes needed", out, size);
    return 1;
  }
  return CopyOut(text, out, size);
}

inline int Failure(const std::string& message, char* out, int size) {
  CopyOut(message, out, size);
  return 1;
}

}  // namespace lstm_ort
