// Where one stream's rows sit in a call's tensors: a tensor of one stream (its batch axis holding
// `rows`, 1 for inputs) and the same tensor for n streams stacked on that axis. Stacking and
// splitting are plain strided copies; nothing here knows onnxruntime.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace lstm_ort::streams {

struct TensorLayout {
  int32_t type = 0;          // ONNX element type
  size_t elem_size = 0;      // bytes per element
  std::vector<int64_t> shape;  // one stream's shape (batch_axis holds `rows`)
  int batch_axis = -1;       // -1: the tensor has no batch axis (one value serves every stream)
  int64_t rows = 1;          // one stream's extent on the batch axis

  bool batched() const { return batch_axis >= 0; }
  size_t Elements() const;
  size_t Bytes() const { return Elements() * elem_size; }
  // The shape of n streams stacked on the batch axis (the shape itself without one).
  std::vector<int64_t> Stacked(int64_t n) const;
  // prod(shape[:batch_axis]) and the bytes of one row block after it (rows * prod(shape[axis+1:])).
  size_t Outer() const;
  size_t BlockBytes() const;
};

// Copies n streams' tensors (src[i]: one stream's, `layout.shape`) into `dst`, stacked on the batch axis.
void Stack(const TensorLayout& layout, const void* const* src, int64_t n, void* dst);
// Splits a stacked tensor of n streams into each stream's (dst[i]: `layout.shape`).
void Unstack(const TensorLayout& layout, const void* src, int64_t n, void* const* dst);

// One stream's layout of a call's output: `stacked` is the call's shape for n streams, `axis`
// the output's batch axis (-1: none), `rows` one stream's extent there.
TensorLayout OutputLayout(const std::vector<int64_t>& stacked, int32_t type, size_t elem_size, int axis, int64_t rows,
                          int64_t n);

}  // namespace lstm_ort::streams
