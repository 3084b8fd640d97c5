// The storage type T a CUDA template is instantiated for (float or __half), as an ElementType.
#pragma once

#include <cuda_fp16.h>

#include "cuda/element_type.h"

namespace lstm_ort {

template <typename T>
struct ElementTraits;
template <>
struct ElementTraits<float> {
  static constexpr ElementType kType = ElementType::kFloat32;
};
template <>
struct ElementTraits<__half> {
  static constexpr ElementType kType = ElementType::kFloat16;
};

template <typename T>
constexpr ElementType kElementTypeOf = ElementTraits<T>::kType;

}  // namespace lstm_ort
