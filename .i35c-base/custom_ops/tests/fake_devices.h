// DeviceLimits as device_limits.cc would fill them, for devices the tests have no access to.
#pragma once

#include <algorithm>
#include <cstddef>
#include <vector>

#include "cuda/device_limits.h"

namespace unit {

// blocks_per_sm as CachedDeviceLimits computes it: registers allow `by_registers` blocks, shared
// memory the rest.
inline lstm_ort::DeviceLimits FakeDevice(int sm_count, size_t smem_per_block, size_t smem_per_sm, size_t reserved,
                                         int by_registers) {
  lstm_ort::DeviceLimits dev;
  dev.sm_count = sm_count;
  dev.smem_per_block = smem_per_block;
  dev.blocks_per_sm = [=](size_t bytes, int /*R*/) {
    return std::min<int>(by_registers, static_cast<int>(smem_per_sm / (bytes + reserved)));
  };
  return dev;
}

// An H100 SXM: 132 SMs, 227 KiB opt-in per block, 228 KiB per SM, 1 KiB reserved per block; the
// persistent kernel's 168-180 registers x 256 threads leave room for one block per SM.
inline lstm_ort::DeviceLimits H100() { return FakeDevice(132, 227 * 1024, 228 * 1024, 1024, 1); }

// A small GPU: 8 SMs, 48 KiB per block, 64 KiB per SM.
inline lstm_ort::DeviceLimits SmallGpu() { return FakeDevice(8, 48 * 1024, 64 * 1024, 1024, 1); }

// The devices the planner tests plan for, by name.
struct NamedDevice {
  const char* name;
  lstm_ort::DeviceLimits dev;
};
inline std::vector<NamedDevice> TestDevices() { return {{"h100", H100()}, {"small", SmallGpu()}}; }

inline bool IsPowerOfTwo(int n) { return n > 0 && (n & (n - 1)) == 0; }

}  // namespace unit
