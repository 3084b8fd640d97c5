#include "element_types.h"

namespace lstm_ort::streams {

namespace {
// onnx.TensorProto.DataType values
enum : int32_t {
  kFloat = 1, kUint8 = 2, kInt8 = 3, kUint16 = 4, kInt16 = 5, kInt32 = 6, kInt64 = 7, kBool = 9,
  kFloat16 = 10, kDouble = 11, kUint32 = 12, kUint64 = 13, kBfloat16 = 16,
};
}  // namespace

size_t ElementSize(int32_t t) {
  switch (t) {
    case kBool: case kUint8: case kInt8: return 1;
    case kUint16: case kInt16: case kFloat16: case kBfloat16: return 2;
    case kFloat: case kInt32: case kUint32: return 4;
    case kInt64: case kUint64: case kDouble: return 8;
    default: return 0;
  }
}

int32_t TypeOfFormat(const char* format, size_t itemsize) {
  if (!format) return itemsize == 1 ? kUint8 : 0;  // no format: unsigned bytes
  while (*format == '<' || *format == '=' || *format == '@' || *format == '!' || *format == '>') {
    if (*format == '>' || *format == '!') return 0;  // big-endian: not what onnxruntime reads
    ++format;
  }
  if (format[0] == 0 || format[1] != 0) return 0;
  switch (format[0]) {
    case 'f': return kFloat;
    case 'd': return kDouble;
    case 'e': return kFloat16;
    case '?': return kBool;
    case 'b': return kInt8;
    case 'B': return kUint8;
    case 'h': return kInt16;
    case 'H': return kUint16;
    case 'i': return itemsize == 4 ? kInt32 : 0;
    case 'I': return itemsize == 4 ? kUint32 : 0;
    case 'l': case 'q': return itemsize == 8 ? kInt64 : (itemsize == 4 ? kInt32 : 0);
    case 'L': case 'Q': return itemsize == 8 ? kUint64 : (itemsize == 4 ? kUint32 : 0);
    default: return 0;
  }
}

}  // namespace lstm_ort::streams
