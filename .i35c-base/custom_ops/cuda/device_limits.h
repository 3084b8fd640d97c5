// What the persistent planner knows about a device. DeviceLimits is plain C++, so the planner and
// its unit tests take it as a value (tests fake one); device_limits.cc fills it from the CUDA
// runtime once per (element type, device), so a call plans on plain arithmetic.
#pragma once

#include <cstddef>
#include <functional>
#include <initializer_list>
#include <string>

namespace lstm_ort {

struct DeviceLimits {
  int sm_count = 0;
  size_t smem_per_block = 0;                             // opt-in maximum
  std::function<int(size_t smem, int R)> blocks_per_sm;  // co-resident blocks of the kernel
  std::function<int(size_t smem)> mma_blocks_per_sm;     // of the tensor-core kernel; unset: as blocks_per_sm
  int only_u = 0, only_bb = 0;                           // developer knob: plan with this tile only
  int resident_chunks = 1;                               // chunks (cp.async groups) of resident h, 1..4
};

// The attributes every planner's limits start from: SMs, opt-in shared memory per block, shared
// memory per SM and what the runtime reserves of it per block.
struct SmAttributes {
  int sm_count = 0, smem_per_block = 0, smem_per_sm = 0, reserved = 0;
};
SmAttributes ReadSmAttributes(int device);

// The fewest co-resident blocks of `threads` that any of `kernels`' registers allow, after each
// kernel's dynamic shared memory limit is raised to the opt-in `smem_per_block`.
int FewestBlocksByRegisters(std::initializer_list<const void*> kernels, int threads, int smem_per_block,
                            const char* what);

// The persistent kernel's occupancy for element type T on `device`, developer knobs included.
template <typename T>
const DeviceLimits& CachedDeviceLimits(int device);

// The device's name, as tuned entries record it; empty when its properties cannot be read.
std::string DeviceName(int device);

}  // namespace lstm_ort
