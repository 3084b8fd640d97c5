// RegisterCustomOps: the library's one entry point, for SessionOptions.register_custom_ops_library
// and for C++ hosts.
#include <dlfcn.h>

#include <atomic>
#include <cstdio>

#include <mutex>
#include <string>
#include <vector>

#include "cpu/cpu_kernel.h"
#include "cuda_plugin.h"
#include "fused_lstm_op.h"
#include "session_keys.h"

namespace {

// ORT keeps raw pointers to the domain and its ops: both live as long as the library.
std::mutex g_mutex;
std::vector<Ort::CustomOpDomain> g_domains;
// The onnxruntime that registered us last: the StreamBatcher's native step path makes its sessions
// through it (custom_ops/streams), the onnxruntime Python runs, whose C API is not exported.
std::atomic<const OrtApiBase*> g_api_base{nullptr};

const lstm_ort::FusedLstmOp<lstm_ort::CpuOpKernel<float>> g_cpu_f32;
const lstm_ort::FusedLstmOp<lstm_ort::CpuOpKernel<Ort::Float16_t>> g_cpu_f16;
const lstm_ort::FusedLstmOp<lstm_ort::CpuInt8Kernel> g_cpu_int8;  // int8 W (docs/ops.md, "int8 weights")

// The keys of a session's config entries, from onnxruntime 1.23 on (C API version 23); nothing
// before. This build's headers (1.21) do not declare those functions; OrtApi only ever grows at its
// end, so their slots are fixed for good: offsetof(OrtApi, f) / sizeof(void*) in onnxruntime_c_api.h
// of 1.23.2 (GetKeyValuePairs and ReleaseKeyValuePairs since 1.22).
std::vector<std::string> SessionConfigKeys(const OrtSessionOptions* options, const OrtApiBase* api_base) {
  constexpr size_t kGetKeyValuePairs = 298, kReleaseKeyValuePairs = 300, kGetSessionOptionsConfigEntries = 379;
  // OrtKeyValuePairs (opaque, undeclared before 1.22) travels as void*.
  using GetEntries = OrtStatus*(ORT_API_CALL*)(const OrtSessionOptions*, void**);
  using GetPairs = void(ORT_API_CALL*)(const void*, const char* const**, const char* const**, size_t*);
  using ReleasePairs = void(ORT_API_CALL*)(void*);
  // Asked only of onnxruntime >= 1.23: an older one prints an error for an API version it lacks.
  int major = 0, minor = 0;
  if (std::sscanf(api_base->GetVersionString(), "%d.%d", &major, &minor) != 2 || major * 1000 + minor < 1023) return {};
  const OrtApi* api23 = api_base->GetApi(23);
  if (!api23) return {};
  void* const* slots = reinterpret_cast<void* const*>(api23);
  void* pairs = nullptr;
  if (OrtStatus* status = reinterpret_cast<GetEntries>(slots[kGetSessionOptionsConfigEntries])(options, &pairs)) {
    api23->ReleaseStatus(status);
    return {};
  }
  const char* const* keys = nullptr;
  const char* const* values = nullptr;
  size_t count = 0;
  reinterpret_cast<GetPairs>(slots[kGetKeyValuePairs])(pairs, &keys, &values, &count);
  std::vector<std::string> out(keys, keys + count);
  reinterpret_cast<ReleasePairs>(slots[kReleaseKeyValuePairs])(pairs);
  return out;
}

// onnxruntime dlcloses a custom-op library with the session options that loaded it. Unloading
// this one would unregister its CUDA kernels and leave cached cuBLAS handles dangling for the
// next session: pin it in the process instead.
void PinLibrary();

}  // namespace

extern "C" __attribute__((visibility("default"))) OrtStatus* ORT_API_CALL
RegisterCustomOps(OrtSessionOptions* options, const OrtApiBase* api_base) {
  const OrtApi* api = api_base->GetApi(LSTM_ORT_API_VERSION);
  if (!api) {
    // Every onnxruntime has API version 1, enough to report that this one is too old.
    const OrtApi* v1 = api_base->GetApi(1);
    return v1->CreateStatus(ORT_FAIL, "lstm_ort needs onnxruntime >= 1.21 (ORT API version 21)");
  }
  Ort::InitApi(api);
  // An entry under "lstm_ort." that nothing reads is a misspelt option: refused, naming it (the
  // entries set before the library is registered, as lstm_ort.InferenceSession registers it).
  const std::string unknown = lstm_ort::UnknownSessionKey(SessionConfigKeys(options, api_base));
  if (!unknown.empty()) return api->CreateStatus(ORT_INVALID_ARGUMENT, lstm_ort::UnknownSessionKeyMessage(unknown).c_str());
  g_api_base.store(api_base);
  PinLibrary();
  try {
    std::lock_guard<std::mutex> lock(g_mutex);
    Ort::CustomOpDomain domain(lstm_ort::kDomain);
    domain.Add(&g_cpu_f32);
    domain.Add(&g_cpu_f16);
    domain.Add(&g_cpu_int8);
    // The CUDA kernels when their plugin loads (custom_ops/cuda_plugin.h); without it the CPU
    // kernel serves every node, and Python says why the CUDA kernels are missing.
    const lstm_ort::CudaPluginState cuda = lstm_ort::LoadCudaPlugin();
    if (cuda.add_ops) {
      char error[1024] = {};
      if (cuda.add_ops(api, domain, error, sizeof error) != 0)
        return api->CreateStatus(ORT_FAIL, (std::string("lstm_ort: registering the CUDA kernels failed: ") + error).c_str());
    }
    Ort::UnownedSessionOptions(options).Add(domain);
    g_domains.push_back(std::move(domain));
  } catch (const std::exception& e) {
    return lstm_ort::ToStatus(e);
  }
  return nullptr;
}

// The OrtApiBase of the onnxruntime that registered this library last; null before any did.
extern "C" __attribute__((visibility("default"))) const OrtApiBase* LstmOrtApiBase() { return g_api_base.load(); }

namespace {
void PinLibrary() {
  static std::once_flag once;
  std::call_once(once, [] {
    Dl_info info{};
    if (dladdr(reinterpret_cast<void*>(&RegisterCustomOps), &info) && info.dli_fname)
      dlopen(info.dli_fname, RTLD_NOW | RTLD_NODELETE);
  });
}
}  // namespace
