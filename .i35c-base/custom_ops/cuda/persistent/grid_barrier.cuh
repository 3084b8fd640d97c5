// A grid-wide barrier for kernels whose blocks are all resident (cooperative launch): one
// counter that every block bumps once per interval; a block waits until the count reaches
// blocks * intervals. Cheaper than cooperative groups' grid.sync, which also needs -rdc.
#pragma once

namespace lstm_ort {

// `target` = gridDim.x * (number of barriers passed so far, this one included). The release
// add publishes the block's writes (ordered before it by __syncthreads); the acquire loads
// make the other blocks' writes visible to this block after the closing __syncthreads.
__device__ __forceinline__ void GridBarrier(unsigned* counter, unsigned target) {
  __syncthreads();
  if (threadIdx.x == 0) {
    asm volatile("red.release.gpu.global.add.u32 [%0], 1;" ::"l"(counter) : "memory");
    unsigned seen = 0;
    do {
      asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(seen) : "l"(counter) : "memory");
    } while (seen < target);
  }
  __syncthreads();
}

}  // namespace lstm_ort
