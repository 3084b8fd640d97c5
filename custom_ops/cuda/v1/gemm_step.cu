// v1's cuBLAS step for shapes the persistent kernels cannot hold and the tiled kernel serves
// poorly (large H or B): the recurrent product of both directions as one strided-batched GEMM
// (gates[d] = h_in[d] . R[d], on tensor cores in the reduced precision modes), or for FP32 math at
// small batches the weight-streaming product (v1/step_stream.cuh); then one pointwise kernel adds the
// product's partial sums, the input projection and bias and runs the cell (v1/step_args.cuh).
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

// gates: `splits` partial products of [D][B][4H] each, split_sd floats apart (none: h is zero).
template <typename T>
__global__ void GemmStepCell(StepArgs<T> a, const float* gates, long long gates_sd, int splits, long long split_sd) {
  const int d = blockIdx.y;
  const long long n = static_cast<long long>(a.B) * a.H;
  for (long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<long long>(gridDim.x) * blockDim.x) {
    const int b = static_cast<int>(i / a.H), u = static_cast<int>(i - static_cast<long long>(b) * a.H);
    const UnitInputs in = LoadUnit(a, d, b, u);
    float4 acc{};
    if (in.active) {
      const float* g = gates + d * gates_sd + 4 * i;
      for (int s = 0; s < splits; ++s, g += split_sd) {
        const float4 p = *reinterpret_cast<const float4*>(g);
        acc.x += p.x;
        acc.y += p.y;
        acc.z += p.z;
        acc.w += p.w;
      }
    }
    FinishUnit(a, d, b, u, acc, in);
  }
}

template <int kB>
void LaunchStream(const StreamArgs& s, int tiles, int splits, cudaStream_t stream) {
  StreamRecurrentProduct<kB><<<dim3(tiles, s.D, splits), kStreamThreads, 0, stream>>>(s);
}

// The streaming product's partial sums into `gates`; returns the number of splits.
int StreamProduct(const StepArgs<float>& a, int D, float* gates, int sm_count, cudaStream_t stream) {
  StreamArgs s{};
  s.B = a.B;
  s.H = a.H;
  s.G = kGates * a.H;
  s.D = D;
  const int tiles = (s.G + kStreamTileCols - 1) / kStreamTileCols;
  const int splits = StreamSplits(a.H, tiles, D, sm_count);
  s.rows_per_split = (a.H + splits - 1) / splits;
  for (int d = 0; d < D; ++d) {
    s.w[d] = a.wh[d];
    s.h[d] = a.h_in[d];
  }
  s.partial = gates;
  if (a.B <= 1) LaunchStream<1>(s, tiles, splits, stream);
  else if (a.B <= 2) LaunchStream<2>(s, tiles, splits, stream);
  else if (a.B <= 4) LaunchStream<4>(s, tiles, splits, stream);
  else if (a.B <= 8) LaunchStream<8>(s, tiles, splits, stream);
  else LaunchStream<16>(s, tiles, splits, stream);
  return splits;
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

void LaunchGemmStep(const StepArgs<float>& a, int D, float* gates, ProjectionMath math, bool h_is_zero,
                    int sm_count, cublasHandle_t cublas, cudaStream_t stream) {
  const int G = kGates * a.H;
  const long long gates_sd = static_cast<long long>(a.B) * G;
  const long long n = static_cast<long long>(a.B) * a.H;
  const dim3 cell_grid(GridStrideBlocks(n), D);
  if (h_is_zero) {  // the first step from a zero state: no product to compute
    GemmStepCell<float><<<cell_grid, kGridStrideThreads, 0, stream>>>(a, nullptr, gates_sd, 0, 0);
    return;
  }
  Dims d;
  d.B = a.B;
  d.H = a.H;
  if (math == ProjectionMath::kFp32 && StepStreamsWeights(d)) {
    const int splits = StreamProduct(a, D, gates, sm_count, stream);
    GemmStepCell<float><<<cell_grid, kGridStrideThreads, 0, stream>>>(a, gates, gates_sd, splits, D * gates_sd);
    return;
  }
  const float one = 1.f, zero = 0.f;
  // Column-major view: gates^T [4H, B] = R^T [4H, H] . h^T [H, B]; the directions as a batch.
  const long long w_stride = D == 2 ? a.wh[1] - a.wh[0] : 0;
  const long long h_stride = D == 2 ? a.h_in[1] - a.h_in[0] : 0;
  const cublasStatus_t st = cublasGemmStridedBatchedEx(
      cublas, CUBLAS_OP_N, CUBLAS_OP_N, G, a.B, a.H, &one, a.wh[0], CUDA_R_32F, G, w_stride, a.h_in[0], CUDA_R_32F,
      a.H, h_stride, &zero, gates, CUDA_R_32F, G, gates_sd, D, ComputeTypeOf(math), CUBLAS_GEMM_DEFAULT);
  if (st != CUBLAS_STATUS_SUCCESS)
    throw std::runtime_error("FusedLSTM cuBLAS: recurrent step GEMM failed with status " + std::to_string(st));
  GemmStepCell<float><<<cell_grid, kGridStrideThreads, 0, stream>>>(a, gates, gates_sd, 1, 0);
}

}  // namespace lstm_ort
