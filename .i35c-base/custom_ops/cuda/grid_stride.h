// Launch shape of the element-wise kernels (state init/final, TF32 split), which loop with a
// grid stride.
#pragma once

#include <algorithm>

namespace lstm_ort {

constexpr int kGridStrideThreads = 256;

// Enough blocks to fill any GPU, few enough that each thread handles several elements.
inline int GridStrideBlocks(long long n) { return static_cast<int>(std::min<long long>((n + 255) / 256, 4096)); }

}  // namespace lstm_ort
