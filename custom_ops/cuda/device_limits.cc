#include "cuda/device_limits.h"

#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <utility>

#include "cuda/cuda_check.h"
#include "cuda/persistent/launch.h"
#include "cuda/persistent/plan.h"
#include "cuda/process_cache.h"

namespace lstm_ort {

SmAttributes ReadSmAttributes(int device) {
  SmAttributes a;
  cudaDeviceGetAttribute(&a.sm_count, cudaDevAttrMultiProcessorCount, device);
  cudaDeviceGetAttribute(&a.smem_per_block, cudaDevAttrMaxSharedMemoryPerBlockOptin, device);
  cudaDeviceGetAttribute(&a.smem_per_sm, cudaDevAttrMaxSharedMemoryPerMultiprocessor, device);
  cudaDeviceGetAttribute(&a.reserved, cudaDevAttrReservedSharedMemoryPerBlock, device);
  return a;
}

int FewestBlocksByRegisters(std::initializer_list<const void*> kernels, int threads, int smem_per_block,
                            const char* what) {
  int fewest = 1 << 30;
  for (const void* kernel : kernels) {
    int n = 0;
    Check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_per_block),
          "raise the shared memory limit");
    Check(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kernel, threads, 0), what);
    fewest = std::min(fewest, n);
  }
  return fewest;
}

namespace {

template <typename T>
DeviceLimits PersistentLimits(int device) {
  const SmAttributes sm = ReadSmAttributes(device);
  const int smem_per_sm = sm.smem_per_sm, reserved = sm.reserved;
  const int r4 = FewestBlocksByRegisters({PersistentKernelFor<T>(4)}, kPersistentThreads, sm.smem_per_block,
                                         "occupancy of the persistent kernel");
  const int r8 = FewestBlocksByRegisters({PersistentKernelFor<T>(8)}, kPersistentThreads, sm.smem_per_block,
                                         "occupancy of the persistent kernel");
  // The tensor-core kernels: the fewest co-resident blocks any operand type's registers allow.
  const int mma_by_registers = FewestBlocksByRegisters(
      {PersistentMmaKernelFor<T>(MmaOperand::kTf32x3), PersistentMmaKernelFor<T>(MmaOperand::kTf32),
       PersistentMmaKernelFor<T>(MmaOperand::kFp16), PersistentMmaKernelFor<T>(MmaOperand::kBf16)},
      kPersistentThreads, sm.smem_per_block, "occupancy of the tensor-core persistent kernel");
  DeviceLimits dev;
  dev.sm_count = sm.sm_count;
  dev.smem_per_block = static_cast<size_t>(sm.smem_per_block);
  dev.blocks_per_sm = [r4, r8, smem_per_sm, reserved](size_t bytes, int R) {
    return std::min<int>(R == 4 ? r4 : r8, static_cast<int>(smem_per_sm / (bytes + reserved)));
  };
  dev.mma_blocks_per_sm = [mma_by_registers, smem_per_sm, reserved](size_t bytes) {
    return std::min<int>(mma_by_registers, static_cast<int>(smem_per_sm / (bytes + reserved)));
  };
  return dev;
}

}  // namespace

template <typename T>
const DeviceLimits& CachedDeviceLimits(int device) {
  return ProcessCached(device, [device] { return PersistentLimits<T>(device); });
}

template const DeviceLimits& CachedDeviceLimits<float>(int device);
template const DeviceLimits& CachedDeviceLimits<__half>(int device);

std::string DeviceName(int device) {
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, device) != cudaSuccess) {
    (void)cudaGetLastError();
    return {};
  }
  return prop.name;
}

}  // namespace lstm_ort
