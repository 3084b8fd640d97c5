#include "tensor_layout.h"

#include <cstring>
#include <stdexcept>
#include <string>

namespace lstm_ort::streams {

size_t TensorLayout::Elements() const {
  size_t n = 1;
  for (int64_t d : shape) n *= static_cast<size_t>(d);
  return n;
}

std::vector<int64_t> TensorLayout::Stacked(int64_t n) const {
  std::vector<int64_t> out = shape;
  if (batched()) out[batch_axis] = rows * n;
  return out;
}

size_t TensorLayout::Outer() const {
  size_t outer = 1;
  for (int k = 0; k < batch_axis; ++k) outer *= static_cast<size_t>(shape[k]);
  return outer;
}

size_t TensorLayout::BlockBytes() const {
  size_t inner = elem_size * static_cast<size_t>(rows);
  for (size_t k = static_cast<size_t>(batch_axis) + 1; k < shape.size(); ++k) inner *= static_cast<size_t>(shape[k]);
  return inner;
}

void Stack(const TensorLayout& layout, const void* const* src, int64_t n, void* dst) {
  const size_t outer = layout.Outer(), block = layout.BlockBytes();
  char* out = static_cast<char*>(dst);
  if (outer == 1) {  // batch-major: each stream's tensor is one block
    for (int64_t i = 0; i < n; ++i) std::memcpy(out + i * block, src[i], block);
    return;
  }
  for (size_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < n; ++i)
      std::memcpy(out + (o * n + i) * block, static_cast<const char*>(src[i]) + o * block, block);
}

void Unstack(const TensorLayout& layout, const void* src, int64_t n, void* const* dst) {
  const size_t outer = layout.Outer(), block = layout.BlockBytes();
  const char* in = static_cast<const char*>(src);
  if (outer == 1) {
    for (int64_t i = 0; i < n; ++i) std::memcpy(dst[i], in + i * block, block);
    return;
  }
  for (size_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < n; ++i)
      std::memcpy(static_cast<char*>(dst[i]) + o * block, in + (o * n + i) * block, block);
}

TensorLayout OutputLayout(const std::vector<int64_t>& stacked, int32_t type, size_t elem_size, int axis, int64_t rows,
                          int64_t n) {
  TensorLayout out;
  out.type = type;
  out.elem_size = elem_size;
  out.shape = stacked;
  out.batch_axis = axis;
  out.rows = rows;
  if (axis >= 0) {
    if (axis >= static_cast<int>(stacked.size()) || stacked[axis] != rows * n)
      throw std::invalid_argument("an output has " + std::string(axis < static_cast<int>(stacked.size())
                                                                       ? std::to_string(stacked[axis])
                                                                       : "no axis " + std::to_string(axis)) +
                                  " on its batch axis for " + std::to_string(n) + " streams of " +
                                  std::to_string(rows) + " rows");
    out.shape[axis] = rows;
  }
  return out;
}

}  // namespace lstm_ort::streams
