// liblstm_ort_cuda.so's registration function, called by the core library's RegisterCustomOps
// (custom_ops/cuda_plugin.h) with the API it got from onnxruntime.
#include <exception>
#include <type_traits>

#include "c_entry_point.h"
#include "cuda/cuda_ops.h"
#include "cuda_plugin.h"

LSTM_ORT_C_ENTRY int LstmOrtCudaAddOps(const OrtApi* api, OrtCustomOpDomain* domain, char* out, int size) {
  static_assert(std::is_same_v<decltype(&LstmOrtCudaAddOps), lstm_ort::CudaAddOpsFn>);
  if (!api || !domain) return lstm_ort::Failure("no API or domain", out, size);
  try {
    Ort::InitApi(api);
    lstm_ort::AddCudaOps(domain);
    return 0;
  } catch (const std::exception& e) {
    return lstm_ort::Failure(e.what(), out, size);
  }
}
