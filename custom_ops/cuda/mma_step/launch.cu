#include "cuda/mma_step/launch.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstring>
#include <type_traits>
#include <utility>
#include <vector>

#include "cuda/cuda_check.h"
#include "cuda/device_limits.h"
#include "cuda/grid_stride.h"
#include "cuda/mma_step/kernel.cuh"
#include "cuda/process_cache.h"

namespace lstm_ort {
namespace {

// The kernel of tile kTile for operand storage S; null where the tile splits a chunk into more k
// steps than S has (MmaStepTileTakes).
template <typename T, typename S, int kTile>
const void* TileKernel(bool resident) {
  constexpr MmaStepTile t = kMmaStepTileTable[kTile];
  constexpr int k_steps = kMmaStepChunk / (std::is_same_v<S, float> ? 8 : 16);
  if constexpr (k_steps % t.ksplit != 0) {
    return nullptr;
  } else if (resident) {
    return reinterpret_cast<const void*>(
        mma_step::MmaStepResidentKernel<T, S, t.bm, t.bn, t.warps_m, t.warps_n, t.ksplit>);
  } else {
    return reinterpret_cast<const void*>(mma_step::MmaStepKernel<T, S, t.bm, t.bn, t.warps_m, t.warps_n, t.ksplit>);
  }
}

template <typename T, typename S>
const void* TileKernel(int tile, bool resident) {
  static_assert(kMmaStepTiles == 8, "one case per tile");
  switch (tile) {
    case 0: return TileKernel<T, S, 0>(resident);
    case 1: return TileKernel<T, S, 1>(resident);
    case 2: return TileKernel<T, S, 2>(resident);
    case 3: return TileKernel<T, S, 3>(resident);
    case 4: return TileKernel<T, S, 4>(resident);
    case 5: return TileKernel<T, S, 5>(resident);
    case 6: return TileKernel<T, S, 6>(resident);
    case 7: return TileKernel<T, S, 7>(resident);
  }
  return nullptr;
}

// The kernel of (operand, tile), per interval or resident, or null where T has none (3xTF32 reads
// fp32 weights: float storage only).
template <typename T>
const void* KernelFor(MmaOperand op, int tile, bool resident) {
  switch (op) {
    case MmaOperand::kFp16: return TileKernel<T, __half>(tile, resident);
    case MmaOperand::kBf16: return TileKernel<T, __nv_bfloat16>(tile, resident);
    case MmaOperand::kTf32x3:
      if constexpr (std::is_same_v<T, float>) return TileKernel<T, float>(tile, resident);
      return nullptr;
    case MmaOperand::kTf32: break;
  }
  return nullptr;
}

// The kernel's dynamic shared memory limit raised, once per device and kernel (before any capture:
// the first call of a shape launches directly): to what it uses, which is one size per kernel, or
// for the resident kernels, whose blocks hold as many weight rows as the range's layers have, to
// what a block may have (the first call's size would refuse a later range's larger one).
void AllowSmem(const void* kernel, size_t smem, bool resident) {
  int device = 0;
  Check(cudaGetDevice(&device), "current device");
  ProcessCached(std::make_pair(device, kernel), [&] {
    int limit = static_cast<int>(smem);
    if (resident)
      Check(cudaDeviceGetAttribute(&limit, cudaDevAttrMaxSharedMemoryPerBlockOptin, device), "shared memory per block");
    Check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, limit),
          "raise the tensor-core step's shared memory limit");
    return 0;
  });
}

// Programmatic dependent launch needs compute capability 9.0 (the kernel's griddepcontrol is
// compiled for sm_90 and later only).
bool DeviceOverlapsLaunches() {
  int device = 0;
  Check(cudaGetDevice(&device), "current device");
  return ProcessCached(std::make_pair(device, "pdl"), [&] {
    int major = 0;
    Check(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device), "compute capability");
    return major >= 9;
  });
}

// Each segment's elements over the grid's x; blockIdx.y = segment.
dim3 SegmentGrid(const mma_step::OperandSegments& s, int count) {
  long long widest = 0;
  for (int i = 0; i < count; ++i) widest = std::max(widest, s.n[i]);
  return dim3(std::max(1, GridStrideBlocks(widest) / std::max(1, count / 4)), count);
}

template <typename Tin, typename S>
void MakeOperands(const mma_step::OperandSegments& s, int count, unsigned* amax, int* exps, cudaStream_t stream) {
  if (!count) return;
  const dim3 grid = SegmentGrid(s, count);
  ClearPending();
  if (amax) mma_step::SegmentAbsMax<Tin><<<grid, kGridStrideThreads, 0, stream>>>(s, amax);
  mma_step::SegmentToOperand<Tin, S><<<grid, kGridStrideThreads, 0, stream>>>(s, amax, exps);
  Check(cudaGetLastError(), "the tensor-core step's operands");
}

template <typename T, typename S>
void Prepare(MmaStepArgs<T>& a, const MmaStepPlan& plan, const MmaStepInputs& in, cudaStream_t stream) {
  // fp16 operands of fp32 storage are scaled (kernel.cuh); fp16 storage is fp16 already.
  const bool scaled = std::is_same_v<S, __half> && std::is_same_v<T, float>;
  int* exps = scaled ? in.exps : nullptr;
  unsigned* amax = scaled ? reinterpret_cast<unsigned*>(in.exps + kMmaStepExps) : nullptr;
  a.exps = exps;
  a.barrier = plan.resident ? in.barrier : nullptr;
  if (amax) Check(cudaMemsetAsync(amax, 0, sizeof(unsigned) * kMmaStepExps, stream), "zero the operands' maxima");
  const long long G = 4LL * a.H, plane = static_cast<long long>(a.B) * a.H;
  mma_step::OperandSegments w{}, h{};
  int nw = 0, nh = 0;
  S* copy = static_cast<S*>(in.copies);
  for (int r = 0; r < a.layers; ++r) {
    for (int d = 0; d < a.D; ++d) {
      const int slot = r * a.D + d;
      const long long n = (a.in_rows[r] + static_cast<long long>(a.H)) * G;
      if (plan.copies_weights) {
        w.src[nw] = in.w[r][d];
        w.dst[nw] = copy;
        w.n[nw] = n;
        w.slot[nw++] = slot;
        a.w[r][d] = copy;
        copy += n;
      } else {
        a.w[r][d] = in.w[r][d];
      }
      if (in.h0) {  // layer r's first step (interval r) reads parity (r + 1) & 1
        h.src[nh] = in.h0 + slot * plane;
        h.dst[nh] = static_cast<S*>(a.hop) + (((r + 1) & 1) * static_cast<long long>(a.layers) * a.D + slot) * plane;
        h.n[nh] = plane;
        h.slot[nh++] = kMmaStepH0Exps + slot;
      }
    }
  }
  MakeOperands<T, S>(w, nw, amax, exps, stream);
  MakeOperands<float, S>(h, nh, amax, exps, stream);
}

}  // namespace

template <typename T>
void PrepareMmaStep(MmaStepArgs<T>& a, const MmaStepPlan& plan, const MmaStepInputs& in, cudaStream_t stream) {
  AllowSmem(KernelFor<T>(plan.operand, plan.tile, plan.resident), plan.smem, plan.resident);
  a.skip_h0 = in.h0 == nullptr;
  switch (plan.operand) {
    case MmaOperand::kFp16: return Prepare<T, __half>(a, plan, in, stream);
    case MmaOperand::kBf16: return Prepare<T, __nv_bfloat16>(a, plan, in, stream);
    case MmaOperand::kTf32x3:
      if constexpr (std::is_same_v<T, float>) return Prepare<T, float>(a, plan, in, stream);
      break;
    case MmaOperand::kTf32: break;
  }
  throw std::runtime_error("FusedLSTM CUDA: the tensor-core step has no kernel for this operand type");
}

template <typename T>
void EnqueueMmaStep(const MmaStepArgs<T>& a, const MmaStepPlan& plan, cudaStream_t stream) {
  const void* kernel = KernelFor<T>(plan.operand, plan.tile, plan.resident);
  const dim3 grid(plan.m_tiles * plan.n_tiles, a.layers * a.D), block(plan.threads);
  MmaStepArgs<T> args = a;
  void* params[] = {&args};
  size_t smem = plan.smem;
  bool pdl = plan.pdl && DeviceOverlapsLaunches();
  if (plan.resident) {  // one launch for every interval; its blocks meet at a.barrier
    Check(cudaMemsetAsync(a.barrier, 0, sizeof(unsigned), stream), "zero the tensor-core step's barrier");
    ClearPending();
    const cudaError_t e = cudaLaunchCooperativeKernel(kernel, grid, block, params, plan.smem, stream);
    if (e == cudaSuccess) return;
    if (e != cudaErrorCooperativeLaunchTooLarge && e != cudaErrorNotSupported) Check(e, "resident tensor-core step");
    // The device refused the grid at once (fewer SMs than it reports: a partitioned GPU): the same
    // tile, one launch per interval, the same results.
    ClearPending();
    kernel = KernelFor<T>(plan.operand, plan.tile, false);
    smem = MmaStepSmem(plan.operand, plan.tile);
    AllowSmem(kernel, smem, false);
    pdl = false;
  }
  // The first launch waits for everything before it (the weight copies among it); each later one
  // may start while the one before runs (kernel.cuh, LetNextStart / WaitForPrevious).
  cudaLaunchAttribute overlap{};
  overlap.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  overlap.val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = smem;
  config.stream = stream;
  ClearPending();
  for (int s = 0; s < a.max_len + a.layers - 1; ++s) {
    args.interval = s;
    config.attrs = pdl && s > 0 ? &overlap : nullptr;
    config.numAttrs = pdl && s > 0 ? 1 : 0;
    Check(cudaLaunchKernelExC(&config, kernel, params), "tensor-core step");
  }
}

template <typename T>
const DeviceLimits& MmaStepLimits(int device) {
  return ProcessCached(device, [device] {
    const SmAttributes sm = ReadSmAttributes(device);
    std::vector<int> by_key(kMmaStepKernelKeys, 0);
    for (bool resident : {false, true})
      for (MmaOperand op : {MmaOperand::kFp16, MmaOperand::kBf16, MmaOperand::kTf32x3}) {
        for (int tile = 0; tile < kMmaStepTiles; ++tile) {
          const void* kernel = KernelFor<T>(op, tile, resident);
          // The resident kernel's blocks hold up to a block's whole shared memory (plan.h).
          const size_t smem = resident ? static_cast<size_t>(sm.smem_per_block) : MmaStepSmem(op, tile);
          if (!kernel || smem > static_cast<size_t>(sm.smem_per_block)) continue;
          const MmaStepTile& t = kMmaStepTileTable[tile];
          int n = 0;
          Check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)),
                "raise the tensor-core step's shared memory limit");
          Check(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kernel, MmaStepThreads(t), smem),
                "occupancy of the tensor-core step");
          by_key[MmaStepKernelKey(op, tile, resident)] = n;
        }
      }
    DeviceLimits dev;
    dev.sm_count = sm.sm_count;
    dev.smem_per_block = static_cast<size_t>(sm.smem_per_block);
    dev.blocks_per_sm = [by_key](size_t, int key) {
      return key >= 0 && key < static_cast<int>(by_key.size()) ? by_key[key] : 0;
    };
    return dev;
  });
}

#define LSTM_ORT_INSTANTIATE(T)                                                                                \
  template void PrepareMmaStep<T>(MmaStepArgs<T> & a, const MmaStepPlan& plan, const MmaStepInputs& in,         \
                                  cudaStream_t stream);                                                        \
  template void EnqueueMmaStep<T>(const MmaStepArgs<T>& a, const MmaStepPlan& plan, cudaStream_t stream);      \
  template const DeviceLimits& MmaStepLimits<T>(int device);
LSTM_ORT_INSTANTIATE(float)
LSTM_ORT_INSTANTIATE(__half)
#undef LSTM_ORT_INSTANTIATE

}  // namespace lstm_ort
