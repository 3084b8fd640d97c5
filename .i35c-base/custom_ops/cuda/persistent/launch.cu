#include "cuda/persistent/launch.h"

#include <cuda_fp16.h>

#include "cuda/persistent/kernel.cuh"
#include "cuda/persistent/mma_kernel.cuh"

namespace lstm_ort {

template <typename T>
const void* PersistentKernelFor(int R) {
  return R == 4 ? reinterpret_cast<const void*>(PersistentLstm<T, 4>) : reinterpret_cast<const void*>(PersistentLstm<T, 8>);
}

template <typename T>
cudaError_t LaunchPersistent(const PersistentArgs<T>& a, cudaStream_t stream) {
  PersistentArgs<T> args = a;  // the launch takes a pointer to each argument
  void* params[] = {&args};
  return cudaLaunchCooperativeKernel(PersistentKernelFor<T>(a.plan.R), dim3(a.plan.blocks), dim3(kPersistentThreads),
                                    params, a.plan.smem, stream);
}

template <typename T>
const void* PersistentMmaKernelFor(MmaOperand op) {
  switch (op) {
    case MmaOperand::kTf32x3: return reinterpret_cast<const void*>(PersistentMmaLstm<T, MmaOperand::kTf32x3>);
    case MmaOperand::kTf32: return reinterpret_cast<const void*>(PersistentMmaLstm<T, MmaOperand::kTf32>);
    case MmaOperand::kFp16: return reinterpret_cast<const void*>(PersistentMmaLstm<T, MmaOperand::kFp16>);
    case MmaOperand::kBf16: return reinterpret_cast<const void*>(PersistentMmaLstm<T, MmaOperand::kBf16>);
  }
  return nullptr;
}

template <typename T>
cudaError_t LaunchPersistentMma(const PersistentArgs<T>& a, MmaOperand op, cudaStream_t stream) {
  PersistentArgs<T> args = a;
  void* params[] = {&args};
  return cudaLaunchCooperativeKernel(PersistentMmaKernelFor<T>(op), dim3(a.plan.blocks), dim3(kPersistentThreads),
                                    params, a.plan.smem, stream);
}

void ReportPhaseClocks(cudaStream_t stream, int intervals) { PrintPhaseClocks(stream, intervals); }

template const void* PersistentKernelFor<float>(int R);
template const void* PersistentKernelFor<__half>(int R);
template cudaError_t LaunchPersistent<float>(const PersistentArgs<float>& a, cudaStream_t stream);
template const void* PersistentMmaKernelFor<float>(MmaOperand op);
template const void* PersistentMmaKernelFor<__half>(MmaOperand op);
template cudaError_t LaunchPersistentMma<float>(const PersistentArgs<float>& a, MmaOperand op, cudaStream_t stream);
template cudaError_t LaunchPersistentMma<__half>(const PersistentArgs<__half>& a, MmaOperand op, cudaStream_t stream);
template cudaError_t LaunchPersistent<__half>(const PersistentArgs<__half>& a, cudaStream_t stream);

}  // namespace lstm_ort
