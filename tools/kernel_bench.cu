// Times FusedLSTM's CUDA path without onnxruntime: RunLstmCuda on random weights, for fast
// kernel iteration on a GPU machine (tools/bench.py is the end-to-end comparison).
//   nvcc -std=c++17 -arch=sm_90 -O3 -Icustom_ops -Icustom_ops/include tools/kernel_bench.cu \
//     custom_ops/{enum_names,overrides}.cc $(ls custom_ops/cuda/*.c[cu] | grep -v 'cuda_ops\|entry') \
//     custom_ops/cuda/{v1,persistent,cluster,gemm,low_rank}/*.c[cu] -lcublas -lcublasLt -o kernel_bench
//   ./kernel_bench L T H B D strategy [runs]      strategy: auto tiled splitk persistent wavefront cluster
// (float32; the LSTM_ORT_* override aliases apply, docs/architecture.md "Overrides").
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "call_io.h"
#include "cuda/lstm_cuda.h"
#include "enum_names.h"
#include "overrides.h"

using namespace lstm_ort;

int main(int argc, char** argv) {
  if (argc < 7) {
    std::fprintf(stderr, "usage: %s L T H B D strategy [runs]\n", argv[0]);
    return 2;
  }
  const int64_t H = std::atoi(argv[3]);
  const Dims d = MakeDims(std::atoi(argv[1]), std::atoi(argv[5]), std::atoi(argv[2]), std::atoi(argv[4]), H, H);
  Strategy strategy = Strategy::kAuto;
  if (!ParseEnum(argv[6], &strategy)) {
    std::fprintf(stderr, "strategy must be one of %s\n", EnumNames<Strategy>(", ").c_str());
    return 2;
  }
  const int runs = argc > 7 ? std::atoi(argv[7]) : 20;

  Attributes attrs;
  attrs.hidden_size = d.H;
  attrs.num_layers = d.L;
  attrs.num_directions = static_cast<int>(d.D);
  for (auto& dir : attrs.act) {
    dir[0] = {ActKind::kSigmoid, 0.f, 0.f};
    dir[1] = {ActKind::kTanh, 0.f, 0.f};
    dir[2] = {ActKind::kTanh, 0.f, 0.f};
  }
  std::mt19937 gen(0);
  std::uniform_real_distribution<float> uni(-0.1f, 0.1f);
  auto device_random = [&](size_t n) {
    std::vector<float> host(n);
    for (auto& v : host) v = uni(gen);
    float* p = nullptr;
    cudaMalloc(&p, n * sizeof(float));
    cudaMemcpy(p, host.data(), n * sizeof(float), cudaMemcpyHostToDevice);
    return p;
  };
  CallIO io;
  io.dims = d;
  io.max_len = static_cast<int>(d.T);
  io.in[kX] = device_random(d.T * d.B * d.I);
  io.in[kW] = device_random(d.WeightCount());
  io.in[kB] = device_random(d.BiasCount());
  float *y, *yh, *yc;
  cudaMalloc(&y, sizeof(float) * d.T * d.D * d.B * d.H);
  cudaMalloc(&yh, sizeof(float) * d.L * d.D * d.B * d.H);
  cudaMalloc(&yc, sizeof(float) * d.L * d.D * d.B * d.H);
  io.out[kY] = y;
  io.out[kYH] = yh;
  io.out[kYC] = yc;
  int device = 0;
  cudaGetDevice(&device);
  const CallInputs in{d, static_cast<int>(d.T), ElementType::kFloat32, false};
  auto plan_for = [&](Strategy s) {
    attrs.strategy = s;
    return PlanCall(in, attrs, CallDeviceOf<float>(device, ""), OverridesFromEnvironment());
  };
  CallPlan plan = plan_for(strategy), tiled = plan_for(Strategy::kTiled);
  std::printf("%s\n", DescribeCallPlan(plan).c_str());
  void* scratch = nullptr;
  cudaMalloc(&scratch, std::max(plan.scratch_bytes, tiled.scratch_bytes));
  cudaStream_t stream;
  cudaStreamCreate(&stream);
  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  for (int i = 0; i < 3; ++i) RunLstmCuda<float>(attrs, io, stream, scratch, plan);
  std::vector<float> times;
  for (int i = 0; i < runs; ++i) {
    cudaEventRecord(start, stream);
    RunLstmCuda<float>(attrs, io, stream, scratch, plan);
    cudaEventRecord(stop, stream);
    cudaEventSynchronize(stop);
    float ms = 0;
    cudaEventElapsedTime(&ms, start, stop);
    times.push_back(ms);
  }
  std::sort(times.begin(), times.end());
  // Y against the per-step kernel's, the reference this tool trusts.
  const size_t ny = d.T * d.D * d.B * d.H;
  std::vector<float> got(ny), ref(ny);
  cudaMemcpy(got.data(), y, ny * sizeof(float), cudaMemcpyDeviceToHost);
  RunLstmCuda<float>(attrs, io, stream, scratch, tiled);
  cudaMemcpy(ref.data(), y, ny * sizeof(float), cudaMemcpyDeviceToHost);
  float err = 0;
  for (size_t i = 0; i < ny; ++i) err = std::max(err, std::fabs(got[i] - ref[i]));
  std::printf("L%d T%d H%d B%d D%d %s: %.3f ms (median of %d), max-abs vs tiled %.1e, %s\n", static_cast<int>(d.L), static_cast<int>(d.T),
              static_cast<int>(d.H), static_cast<int>(d.B), static_cast<int>(d.D), argv[6], times[times.size() / 2],
              runs, err, cudaGetErrorString(cudaGetLastError()));
  return 0;
}
