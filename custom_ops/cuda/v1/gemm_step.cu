// v1's cuBLAS step for shapes the persistent kernels cannot hold and the tiled kernel serves
// poorly (large H or B): the recurrent product of both directions as one strided-batched GEMM
// (gates[d] = h_in[d] . R[d], on tensor cores in the reduced precision modes), or at small
// batches (heuristics.h, StreamsStepWith) the weight-streaming step (v1/step_stream.cuh, product
// and cell in one launch); after cuBLAS, one pointwise kernel adds the input projection and bias
// and runs the cell (v1/step_args.cuh).
#include <cuda_fp16.h>

#include <stdexcept>
#include <string>

#include "cuda/cuda_check.h"
#include "cuda/grid_stride.h"
#include "cuda/v1/launch_step.h"
#include "cuda/v1/step_args.cuh"
#include "cuda/v1/step_stream.cuh"

namespace lstm_ort {
namespace {

// gates: [D][B][4H] recurrent products, or null when h is zero.
template <typename T>
__global__ void GemmStepCell(StepArgs<T> a, const float* gates, long long gates_sd) {
  const int d = blockIdx.y;
  const long long n = static_cast<long long>(a.B) * a.H;
  for (long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<long long>(gridDim.x) * blockDim.x) {
    const int b = static_cast<int>(i / a.H), u = static_cast<int>(i - static_cast<long long>(b) * a.H);
    const UnitInputs in = LoadUnit(a, d, b, u);
    const float4 acc =
        in.active && gates ? *reinterpret_cast<const float4*>(gates + d * gates_sd + 4 * i) : float4{};
    FinishUnit(a, d, b, u, acc, in);
  }
}

template <int kB>
void LaunchStream(const StepArgs<float>& a, const StreamArgs& s, int tiles, int D, cudaStream_t stream) {
  StreamRecurrentStep<kB><<<dim3(tiles, D, s.splits), kStreamThreads, 0, stream>>>(a, s);
}

// The weight-streaming step: product and cell in one launch.
void StreamStep(const StepArgs<float>& a, int D, const GemmStepScratch& scratch, int sm_count, cudaStream_t stream) {
  StreamArgs s{};
  const int tiles = StreamColumnTiles(a.H);
  s.splits = StreamSplits(a.H, tiles, D, sm_count);
  s.rows_per_split = (a.H + s.splits - 1) / s.splits;
  s.partial = scratch.gates;
  s.done = scratch.stream_done;
  if (a.B <= 2) LaunchStream<2>(a, s, tiles, D, stream);  // StreamsStepWith: B >= 2
  else if (a.B <= 4) LaunchStream<4>(a, s, tiles, D, stream);
  else if (a.B <= 8) LaunchStream<8>(a, s, tiles, D, stream);
  else LaunchStream<16>(a, s, tiles, D, stream);
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

}  // namespace

void LaunchGemmStep(const StepArgs<float>& a, int D, const GemmStepScratch& scratch, ProjectionMath math,
                    bool h_is_zero, int sm_count, cublasHandle_t cublas, cudaStream_t stream) {
  const int G = kGates * a.H;
  const long long gates_sd = static_cast<long long>(a.B) * G;
  const long long n = static_cast<long long>(a.B) * a.H;
  const dim3 cell_grid(GridStrideBlocks(n), D);
  if (h_is_zero) {  // the first step from a zero state: no product to compute
    GemmStepCell<float><<<cell_grid, kGridStrideThreads, 0, stream>>>(a, nullptr, gates_sd);
    return;
  }
  Dims d;
  d.B = a.B;
  d.H = a.H;
  if (StreamsStepWith(math, d)) {
    StreamStep(a, D, scratch, sm_count, stream);
    return;
  }
  float* gates = scratch.gates;
  const float one = 1.f, zero = 0.f;
  // Column-major view: gates^T [4H, B] = R^T [4H, H] . h^T [H, B]; the directions as a batch.
  const long long w_stride = D == 2 ? a.wh[1] - a.wh[0] : 0;
  const long long h_stride = D == 2 ? a.h_in[1] - a.h_in[0] : 0;
  const cublasStatus_t st = cublasGemmStridedBatchedEx(
      cublas, CUBLAS_OP_N, CUBLAS_OP_N, G, a.B, a.H, &one, a.wh[0], CUDA_R_32F, G, w_stride, a.h_in[0], CUDA_R_32F,
      a.H, h_stride, &zero, gates, CUDA_R_32F, G, gates_sd, D, ComputeTypeOf(math), CUBLAS_GEMM_DEFAULT);
  if (st != CUBLAS_STATUS_SUCCESS)
    throw std::runtime_error("FusedLSTM cuBLAS: recurrent step GEMM failed with status " + std::to_string(st));
  GemmStepCell<float><<<cell_grid, kGridStrideThreads, 0, stream>>>(a, gates, gates_sd);
}

}  // namespace lstm_ort
