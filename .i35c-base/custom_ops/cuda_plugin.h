// The CUDA kernels live in a plugin library, liblstm_ort_cuda.so, beside this one. It links the
// CUDA runtime and cuBLAS, so it loads only where those libraries are found; this library (the CPU
// kernel) loads everywhere and registers the CUDA kernels only when the plugin loads.
#pragma once

#include <string>

#include "ort_api.h"

namespace lstm_ort {

// The plugin's one registration function (exported by custom_ops/cuda/plugin_entry.cc):
// initialises the plugin's copy of the ORT C++ API with `api`, adds the CUDA kernels to `domain`;
// 0 on success, else nonzero with the message in `out`.
using CudaAddOpsFn = int (*)(const OrtApi* api, OrtCustomOpDomain* domain, char* out, int size);
inline constexpr const char* kCudaAddOpsSymbol = "LstmOrtCudaAddOps";
inline constexpr const char* kCudaPluginName = "liblstm_ort_cuda.so";

struct CudaPluginState {
  CudaAddOpsFn add_ops = nullptr;  // null: not loaded, `error` says why
  std::string path;                // where the plugin is (or was looked for)
  std::string error;
};

// Loads the plugin once it can be loaded (a failed attempt is retried on the next call, e.g. after
// Python preloaded the CUDA libraries); thread-safe. The plugin stays loaded for the process.
CudaPluginState LoadCudaPlugin();

}  // namespace lstm_ort
