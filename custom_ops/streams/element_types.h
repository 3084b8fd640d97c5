// ONNX element types as the step path moves them: their sizes, and the Python buffer-protocol
// format characters numpy writes for them.
#pragma once

#include <cstddef>
#include <cstdint>

namespace lstm_ort::streams {

// Bytes of one element of an ONNX tensor type; 0 for types the step path does not move (strings).
size_t ElementSize(int32_t onnx_type);
// The ONNX type of a buffer's format (struct module syntax, as numpy exports it) and item size; 0 if none.
int32_t TypeOfFormat(const char* format, size_t itemsize);

}  // namespace lstm_ort::streams
