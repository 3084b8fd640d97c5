// Distributed shared memory signalling for the cluster kernel (sm_90 PTX): a block pushes values
// into another block's shared memory with st.async, and each push completes its bytes on the
// receiver's mbarrier, so a receiver waits for exactly the data it needs instead of a cluster-wide
// barrier.
#pragma once

#include <cstdint>

namespace lstm_ort {

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900

__device__ __forceinline__ uint32_t SharedAddress(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// The address of `local`'s counterpart in the shared memory of cluster block `rank`.
__device__ __forceinline__ uint32_t InBlock(uint32_t local, uint32_t rank) {
  uint32_t remote;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(local), "r"(rank));
  return remote;
}

__device__ __forceinline__ void InitBarrier(uint64_t* bar, uint32_t arrivals) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(SharedAddress(bar)), "r"(arrivals) : "memory");
}

// Makes initialised mbarriers visible to the cluster's other blocks (before a cluster barrier).
__device__ __forceinline__ void FenceBarrierInit() { asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory"); }

// The one local arrival of a phase, expecting `bytes` of pushes. Pushes may land before it: the
// phase cannot complete while this arrival is pending.
__device__ __forceinline__ void ExpectBytes(uint64_t* bar, uint32_t bytes) {
  asm volatile("{ .reg .b64 state; mbarrier.arrive.expect_tx.shared::cta.b64 state, [%0], %1; }" ::"r"(
                   SharedAddress(bar)),
               "r"(bytes)
               : "memory");
}

// Waits for phase `parity` of `bar` to complete. Acquire at CTA scope: what the waiter reads next
// is its own block's shared memory, which the pushes' complete_tx make visible; a cluster-scope
// acquire would also invalidate L1 (CCTL.IVALL) at every step, waiting for the loads in flight.
__device__ __forceinline__ void WaitPhase(uint64_t* bar, uint32_t parity) {
  asm volatile(
      "{\n\t.reg .pred done;\n\t"
      "WAIT_%=:\n\t"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n\t"
      "@!done bra WAIT_%=;\n\t}" ::"r"(SharedAddress(bar)),
      "r"(parity)
      : "memory");
}

// Stores v at shared::cluster address `remote` and completes 4 bytes on mbarrier `remote_bar`.
__device__ __forceinline__ void PushFloat(uint32_t remote, float v, uint32_t remote_bar) {
  asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.b32 [%0], %1, [%2];" ::"r"(remote),
               "r"(__float_as_uint(v)), "r"(remote_bar)
               : "memory");
}

#endif

}  // namespace lstm_ort
