#include "cuda_plugin.h"

#include <dlfcn.h>
#include <unistd.h>

#include <mutex>

#include "c_entry_point.h"

namespace lstm_ort {
namespace {

std::string ThisLibraryDirectory() {
  Dl_info info{};
  if (!dladdr(reinterpret_cast<void*>(&LoadCudaPlugin), &info) || !info.dli_fname) return ".";
  const std::string self = info.dli_fname;
  const size_t slash = self.rfind('/');
  return slash == std::string::npos ? "." : self.substr(0, slash);
}

}  // namespace

CudaPluginState LoadCudaPlugin() {
  static std::mutex mutex;
  static CudaPluginState state;
  std::lock_guard<std::mutex> lock(mutex);
  if (state.add_ops) return state;
  state.path = ThisLibraryDirectory() + "/" + kCudaPluginName;
  if (access(state.path.c_str(), F_OK) != 0) {
    state.error = "this build of lstm_ort has no CUDA kernels (no " + state.path + ")";
    return state;
  }
  // RTLD_NODELETE: cached cuBLAS handles and registered ops must outlive every session.
  void* handle = dlopen(state.path.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
  if (!handle) {
    const char* why = dlerror();
    state.error = std::string("could not load the CUDA kernels: ") + (why ? why : "dlopen failed") +
                  " (they need the CUDA 13 runtime and cuBLAS: pip install 'lstm-ort[gpu]', or call "
                  "onnxruntime.preload_dlls() first)";
    return state;
  }
  auto fn = reinterpret_cast<CudaAddOpsFn>(dlsym(handle, kCudaAddOpsSymbol));
  if (!fn) {
    state.error = state.path + " has no " + kCudaAddOpsSymbol + ": not this version's CUDA plugin";
    return state;
  }
  state.add_ops = fn;
  state.error.clear();
  return state;
}

}  // namespace lstm_ort

// 0 with the plugin's path in `out` when the CUDA kernels are loaded (loading them if they can be),
// else nonzero with the reason they are not.
LSTM_ORT_C_ENTRY int LstmOrtCudaPluginStatus(char* out, int size) {
  const lstm_ort::CudaPluginState state = lstm_ort::LoadCudaPlugin();
  if (!state.add_ops) return lstm_ort::Failure(state.error, out, size);
  return lstm_ort::CopyOut(state.path, out, size);
}
