#include "cuda/device_limits.h"

#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <utility>

#include "cuda/cuda_check.h"
#include "cuda/developer_knobs.h"
#include "cuda/persistent/launch.h"
#include "cuda/persistent/plan.h"

namespace lstm_ort {

SmAttributes ReadSmAttributes(int device) {
  SmAttributes a;
  cudaDeviceGetAttribute(&a.sm_count, cudaDevAttrMultiProcessorCount, device);
  cudaDeviceGetAttribute(&a.smem_per_block, cudaDevAttrMaxSharedMemoryPerBlockOptin, device);
  cudaDeviceGetAttribute(&a.smem_per_sm, cudaDevAttrMaxSharedMemoryPerMultiprocessor, device);
  cudaDeviceGetAttribute(&a.reserved, cudaDevAttrReservedSharedMemoryPerBlock, device);
  return a;
}

template <typename T>
const DeviceLimits& CachedDeviceLimits(int device) {
  static std::mutex mu;
  static std::map<int, DeviceLimits> cache;  // map nodes stay put: references outlive the lock
  std::lock_guard<std::mutex> lock(mu);
  auto it = cache.find(device);
  if (it != cache.end()) return it->second;
  const SmAttributes sm = ReadSmAttributes(device);
  const int smem_per_block = sm.smem_per_block, smem_per_sm = sm.smem_per_sm, reserved = sm.reserved;
  int by_registers[2] = {};  // R = 4, 8
  for (int i = 0; i < 2; ++i) {
    const void* kernel = PersistentKernelFor<T>(i == 0 ? 4 : 8);
    Check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_per_block),
          "raise the shared memory limit");
    Check(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&by_registers[i], kernel, kPersistentThreads, 0),
          "occupancy of the persistent kernel");
  }
  // The tensor-core kernels: the fewest co-resident blocks any operand type's registers allow.
  int mma_by_registers = 1 << 30;
  for (MmaOperand op : {MmaOperand::kTf32x3, MmaOperand::kTf32, MmaOperand::kFp16, MmaOperand::kBf16}) {
    const void* kernel = PersistentMmaKernelFor<T>(op);
    int n = 0;
    Check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_per_block),
          "raise the shared memory limit");
    Check(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kernel, kPersistentThreads, 0),
          "occupancy of the tensor-core persistent kernel");
    mma_by_registers = std::min(mma_by_registers, n);
  }
  DeviceLimits dev;
  const PersistentKnobs knobs = PersistentKnobsFromEnvironment();
  dev.only_u = knobs.only_u;
  dev.only_bb = knobs.only_bb;
  dev.resident_chunks = knobs.resident_chunks;
  dev.sm_count = sm.sm_count;
  dev.smem_per_block = static_cast<size_t>(smem_per_block);
  const int r4 = by_registers[0], r8 = by_registers[1];
  dev.blocks_per_sm = [r4, r8, smem_per_sm, reserved](size_t bytes, int R) {
    return std::min<int>(R == 4 ? r4 : r8, static_cast<int>(smem_per_sm / (bytes + reserved)));
  };
  dev.mma_blocks_per_sm = [mma_by_registers, smem_per_sm, reserved](size_t bytes) {
    return std::min<int>(mma_by_registers, static_cast<int>(smem_per_sm / (bytes + reserved)));
  };
  return cache.emplace(device, std::move(dev)).first->second;
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
