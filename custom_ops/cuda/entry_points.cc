// C entry points for lstm_ort's Python tools that need the CUDA path (built with it only).
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <exception>
#include <string>

#include "c_entry_point.h"
#include "cuda/device_limits.h"
#include "cuda/element_type.h"
#include "cuda/gemm/cublas_handles.h"
#include "cuda/lstm_cuda.h"
#include "enum_names.h"

// The name of the current CUDA device, as tuned entries record it.
LSTM_ORT_C_ENTRY int LstmOrtCudaDeviceName(char* out, int size) {
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) {
    (void)cudaGetLastError();
    return lstm_ort::Failure("no CUDA device", out, size);
  }
  const std::string name = lstm_ort::DeviceName(device);
  if (name.empty()) return lstm_ort::Failure("could not read the CUDA device's properties", out, size);
  return lstm_ort::CopyOut(name, out, size);
}

// What the CUDA kernel does for one call of these sizes, element type ("float32" or "float16"),
// `strategy` and `precision`, in words.
LSTM_ORT_C_ENTRY int LstmOrtDescribeStrategy(int64_t L, int64_t D, int64_t T, int64_t I, int64_t H, int64_t B,
                                             const char* element_type, const char* strategy, const char* precision,
                                             char* out, int size) {
  lstm_ort::ElementType type;
  if (!element_type || !lstm_ort::ParseElementType(element_type, &type))
    return lstm_ort::Failure("unknown element type", out, size);
  lstm_ort::Strategy s;
  if (!strategy || !lstm_ort::ParseEnum(strategy, &s)) return lstm_ort::Failure("unknown strategy", out, size);
  lstm_ort::Precision p;
  if (!precision || !lstm_ort::ParseEnum(precision, &p)) return lstm_ort::Failure("unknown precision", out, size);
  if (L < 1 || (D != 1 && D != 2) || T < 0 || I < 1 || H < 1 || B < 0)
    return lstm_ort::Failure("invalid sizes", out, size);
  const lstm_ort::Dims d = lstm_ort::MakeDims(L, D, T, B, I, H);
  try {
    const std::string text = type == lstm_ort::ElementType::kFloat16 ? lstm_ort::DescribeStrategy<__half>(d, s, p)
                                                                     : lstm_ort::DescribeStrategy<float>(d, s, p);
    return lstm_ort::CopyOut(text, out, size);
  } catch (const std::exception& e) {
    return lstm_ort::Failure(e.what(), out, size);
  }
}

// The CUDA graphs FusedLSTM's kernels captured and replayed in this process so far (whole short
// calls and v1's step loops; launch_graphs.h).
LSTM_ORT_C_ENTRY void LstmOrtCudaGraphCounts(uint64_t* captures, uint64_t* replays) {
  const lstm_ort::LaunchGraphCounts counts = lstm_ort::ProcessLaunchGraphCounts();
  *captures = counts.captures;
  *replays = counts.replays;
}

// The cuBLAS handles FusedLSTM made of its own in this process (none where onnxruntime lends the
// calls its handles; gemm/cublas_handles.h).
LSTM_ORT_C_ENTRY uint64_t LstmOrtOwnCublasHandles() { return lstm_ort::OwnCublasHandlesMade(); }
