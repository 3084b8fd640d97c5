// v1's cuBLAS step for shapes the persistent kernels cannot hold and the tiled kernel serves
// poorly (large H or B): the recurrent product of both directions as one strided-batched GEMM
// (gates[d] = h_in[d] . R[d], on tensor cores in the reduced precision modes), or at small
// batches (heuristics.h, StreamsStepWith) the weight-streaming step (v1/step_stream.cuh, product
// and cell in one launch); after cuBLAS, one pointwise kernel adds the input projection and bias
// and runs the cell (v1/step_args.cuh). In the reduced modes both read a 16-bit copy of R
// (v1/half_weights.cuh, heuristics.h StepWeightsFor).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <stdexcept>
#include <string>

#include "cuda/cuda_check.h"
#include "cuda/grid_stride.h"
#include "cuda/v1/half_weights.cuh"
#include "cuda/v1/launch_step.h"
#include "cuda/v1/step_args.cuh"
#include "cuda/v1/step_stream.cuh"

namespace lstm_ort {
namespace {

// gates: [D][B][4H] recurrent products, or null when h is zero. W: the type of the GEMM's
// operands; a 16-bit W means the next step's GEMM reads h from h_copy ([D][B][H]), which this
// kernel writes. amax: the weights' maxima when the products carry the fp16 copy's scale, else null.
template <typename W>
__global__ void GemmStepCell(StepArgs<float> a, const float* gates, long long gates_sd, const unsigned* amax,
                             W* h_copy) {
  const int d = blockIdx.y;
  const long long n = static_cast<long long>(a.B) * a.H;
  const int unscale = gates && amax ? -StepWeightScale<W>(amax, d) : 0;
  for (long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<long long>(gridDim.x) * blockDim.x) {
    const int b = static_cast<int>(i / a.H), u = static_cast<int>(i - static_cast<long long>(b) * a.H);
    const UnitInputs in = LoadUnit(a, d, b, u);
    float4 acc = in.active && gates ? *reinterpret_cast<const float4*>(gates + d * gates_sd + 4 * i) : float4{};
    if (unscale) acc = make_float4(ldexpf(acc.x, unscale), ldexpf(acc.y, unscale), ldexpf(acc.z, unscale),
                                   ldexpf(acc.w, unscale));
    const float h = FinishUnit(a, d, b, u, acc, in);
    if constexpr (!std::is_same_v<W, float>) h_copy[d * n + i] = ToStepWeight<W>(h);
  }
}

// Blocks of this variant one SM holds, with shared memory preferred over L1 (the kernel reads
// its weights once: L1 has nothing to keep). Queried once per variant: it depends on the
// kernel and the architecture only.
template <int kB, typename W>
int StreamBlocksPerSm() {
  static const int blocks = [] {
    cudaFuncSetAttribute(StreamRecurrentStep<kB, W>, cudaFuncAttributePreferredSharedMemoryCarveout,
                         cudaSharedmemCarveoutMaxShared);
    int n = 0;
    cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, StreamRecurrentStep<kB, W>, kStreamThreads, 0);
    return std::max(1, n);
  }();
  return blocks;
}

template <int kB, typename W>
void LaunchStream(const StepArgs<float>& a, StreamArgs s, int D, int sm_count, cudaStream_t stream) {
  const int tiles = StreamColumnTiles(a.H);
  s.splits = StreamSplits(a.H, tiles, D, StreamBlocksPerSm<kB, W>() * sm_count);
  s.rows_per_split = (a.H + s.splits - 1) / s.splits;
  StreamRecurrentStep<kB, W><<<dim3(tiles, D, s.splits), kStreamThreads, 0, stream>>>(a, s);
}

template <typename W>
void LaunchStreamFor(const StepArgs<float>& a, const StreamArgs& s, int D, int sm_count, cudaStream_t stream) {
  if (a.B <= 2) LaunchStream<2, W>(a, s, D, sm_count, stream);  // B = 1 only with 16-bit weights
  else if (a.B <= 4) LaunchStream<4, W>(a, s, D, sm_count, stream);
  else if (a.B <= 8) LaunchStream<8, W>(a, s, D, sm_count, stream);
  else LaunchStream<16, W>(a, s, D, sm_count, stream);
}

// The weight-streaming step: product and cell in one launch.
void StreamStep(const StepArgs<float>& a, int D, const GemmStepScratch& scratch, StepWeights weights, int sm_count,
                cudaStream_t stream) {
  StreamArgs s{};
  s.partial = scratch.gates;
  s.done = scratch.stream_done;
  s.amax = scratch.wh_amax;
  const long long layer = static_cast<long long>(a.H) * kGates * a.H;
  switch (weights) {
    case StepWeights::kFp32:
      s.w[0] = a.wh[0];
      s.w[1] = a.wh[1];
      return LaunchStreamFor<float>(a, s, D, sm_count, stream);
    case StepWeights::kFp16:
      s.w[0] = static_cast<const __half*>(scratch.wh_half);
      s.w[1] = static_cast<const __half*>(scratch.wh_half) + layer;
      return LaunchStreamFor<__half>(a, s, D, sm_count, stream);
    case StepWeights::kBf16:
      s.w[0] = static_cast<const __nv_bfloat16*>(scratch.wh_half);
      s.w[1] = static_cast<const __nv_bfloat16*>(scratch.wh_half) + layer;
      return LaunchStreamFor<__nv_bfloat16>(a, s, D, sm_count, stream);
  }
}

cublasComputeType_t ComputeTypeOf(ProjectionMath math) {
  switch (math) {
    case ProjectionMath::kTf32: return CUBLAS_COMPUTE_32F_FAST_TF32;
    case ProjectionMath::kFp16: return CUBLAS_COMPUTE_32F_FAST_16F;
    case ProjectionMath::kBf16: return CUBLAS_COMPUTE_32F_FAST_16BF;
    case ProjectionMath::kFp32: break;
  }
  return CUBLAS_COMPUTE_32F;
}

template <typename W>
void LaunchCell(const StepArgs<float>& a, int D, const float* gates, long long gates_sd, const unsigned* amax,
                const GemmStepScratch& scratch, cudaStream_t stream) {
  const long long n = static_cast<long long>(a.B) * a.H;
  GemmStepCell<W><<<dim3(GridStrideBlocks(n), D), kGridStrideThreads, 0, stream>>>(a, gates, gates_sd, amax,
                                                                                   static_cast<W*>(scratch.h_half));
}

// scaled: the products came from the fp16 copy of the weights.
void LaunchCellFor(StepWeights weights, bool scaled, const StepArgs<float>& a, int D, const float* gates,
                   long long gates_sd, const GemmStepScratch& scratch, cudaStream_t stream) {
  const unsigned* amax = scaled ? scratch.wh_amax : nullptr;
  switch (weights) {
    case StepWeights::kFp32: return LaunchCell<float>(a, D, gates, gates_sd, nullptr, scratch, stream);
    case StepWeights::kFp16: return LaunchCell<__half>(a, D, gates, gates_sd, amax, scratch, stream);
    case StepWeights::kBf16: return LaunchCell<__nv_bfloat16>(a, D, gates, gates_sd, amax, scratch, stream);
  }
}

template <typename W>
void ConvertLayer(const StepArgs<float>& a, int D, const GemmStepScratch& scratch, cudaStream_t stream) {
  const long long n = static_cast<long long>(a.H) * kGates * a.H;
  const dim3 grid(GridStrideBlocks(n), D);
  if constexpr (std::is_same_v<W, __half>) {
    Check(cudaMemsetAsync(scratch.wh_amax, 0, 2 * sizeof(unsigned), stream), "zero weight maxima");
    RecurrentAbsMax<<<grid, kGridStrideThreads, 0, stream>>>(a.wh[0], a.wh[D - 1], n, scratch.wh_amax);
  }
  ToStepWeights<W><<<grid, kGridStrideThreads, 0, stream>>>(a.wh[0], a.wh[D - 1], n, scratch.wh_amax,
                                                           static_cast<W*>(scratch.wh_half));
  Check(cudaGetLastError(), "16-bit copy of the recurrent weights");  // the steps clear what is pending
}

// The product's operands: the fp32 weights and h, or the 16-bit copies ([D][H][4H], [D][B][H]).
struct GemmOperands {
  const void *w, *h;
  long long w_stride, h_stride;
  cudaDataType_t type;
  cublasComputeType_t compute;
};

GemmOperands OperandsOf(const StepArgs<float>& a, int D, const GemmStepScratch& scratch, ProjectionMath math,
                        StepWeights weights) {
  const long long states = static_cast<long long>(a.B) * a.H;  // h_in[d] = h + d * states
  if (weights == StepWeights::kFp32)
    return {a.wh[0], a.h_in[0], D == 2 ? a.wh[1] - a.wh[0] : 0, D == 2 ? states : 0, CUDA_R_32F,
            ComputeTypeOf(math)};
  const cudaDataType_t half = weights == StepWeights::kFp16 ? CUDA_R_16F : CUDA_R_16BF;
  return {scratch.wh_half, scratch.h_half, static_cast<long long>(a.H) * kGates * a.H, states, half, CUBLAS_COMPUTE_32F};
}

}  // namespace

GemmStepPlan PrepareGemmSteps(const StepArgs<float>& a, const Dims& d, ProjectionMath math, StepWeights weights,
                              bool streams, const GemmStepScratch& scratch, cudaStream_t stream) {
  const int D = static_cast<int>(d.D);
  GemmStepPlan plan;
  plan.math = math;
  plan.streams = streams;
  plan.weights = weights;
  if (streams && scratch.stream_done)  // the scratch has them for the shape; a one-step tf32 call does not stream
    Check(cudaMemsetAsync(scratch.stream_done, 0, sizeof(unsigned) * D * StreamColumnTiles(d.H), stream),
          "zero split counters");
  if (plan.weights == StepWeights::kFp16) ConvertLayer<__half>(a, D, scratch, stream);
  if (plan.weights == StepWeights::kBf16) ConvertLayer<__nv_bfloat16>(a, D, scratch, stream);
  // cublasLt for the 16-bit operands only: with fp32 operands and no workspace it chose slower
  // kernels than the legacy API at large shapes (tf32 H2048 B256 9.2 vs 7.8 ms).
  if (!plan.streams && plan.weights != StepWeights::kFp32) {
    const GemmOperands o = OperandsOf(a, D, scratch, math, plan.weights);
    const int G = kGates * a.H;
    plan.gemm = std::make_unique<StepGemm>(
        StepGemmShape{G, a.B, a.H, D, o.type, o.compute, o.w_stride, o.h_stride, static_cast<long long>(a.B) * G});
  }
  return plan;
}

void LaunchGemmStep(const StepArgs<float>& a, const Dims& d, const GemmStepScratch& scratch, const GemmStepPlan& plan,
                    bool h_is_zero, int sm_count, cublasHandle_t cublas, cudaStream_t stream) {
  const int D = static_cast<int>(d.D), G = kGates * a.H;
  const long long gates_sd = static_cast<long long>(a.B) * G;
  float* gates = scratch.gates;
  if (scratch.staged) {  // [x h0] . [W; R]: the layer's rows follow one another, W's then R's
    const float one = 1.f, zero = 0.f;
    const int row = a.I + a.H, K = h_is_zero ? a.I : row;
    const cublasStatus_t st = cublasGemmStridedBatchedEx(
        cublas, CUBLAS_OP_N, CUBLAS_OP_N, G, a.B, K, &one, a.wx[0], CUDA_R_32F, G, D == 2 ? a.wx[1] - a.wx[0] : 0,
        scratch.staged, CUDA_R_32F, row, static_cast<long long>(a.B) * row, &zero, gates, CUDA_R_32F, G, gates_sd, D,
        ComputeTypeOf(plan.math), CUBLAS_GEMM_DEFAULT);
    if (st != CUBLAS_STATUS_SUCCESS)
      throw std::runtime_error("FusedLSTM cuBLAS: one-step GEMM of [x h] failed with status " + std::to_string(st));
    LaunchCellFor(StepWeights::kFp32, false, a, D, gates, gates_sd, scratch, stream);
    return;
  }
  if (h_is_zero) {  // the first step from a zero state: no product to compute
    LaunchCellFor(plan.streams ? StepWeights::kFp32 : plan.weights, false, a, D, nullptr, gates_sd, scratch, stream);
    return;
  }
  if (plan.streams) {
    StreamStep(a, D, scratch, plan.weights, sm_count, stream);
    return;
  }
  // The first step multiplies initial_h as it is (it may lie beyond fp16's range); its cell writes
  // the 16-bit copy of h that the later steps read (|h| <= 1 then).
  const bool first = a.step == 0;
  // Column-major view: gates^T [4H, B] = R^T [4H, H] . h^T [H, B]; the directions as a batch.
  const GemmOperands o = OperandsOf(a, D, scratch, plan.math, first ? StepWeights::kFp32 : plan.weights);
  if (!first && plan.gemm && plan.gemm->Ready()) {
    plan.gemm->Run(o.w, o.h, gates, stream);
  } else {
    const float one = 1.f, zero = 0.f;
    const cublasStatus_t st =
        cublasGemmStridedBatchedEx(cublas, CUBLAS_OP_N, CUBLAS_OP_N, G, a.B, a.H, &one, o.w, o.type, G, o.w_stride,
                                   o.h, o.type, a.H, o.h_stride, &zero, gates, CUDA_R_32F, G, gates_sd, D, o.compute,
                                   CUBLAS_GEMM_DEFAULT);
    if (st != CUBLAS_STATUS_SUCCESS)
      throw std::runtime_error("FusedLSTM cuBLAS: recurrent step GEMM failed with status " + std::to_string(st));
  }
  LaunchCellFor(plan.weights, !first, a, D, gates, gates_sd, scratch, stream);
}

}  // namespace lstm_ort
