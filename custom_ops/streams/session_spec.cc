#include "session_spec.h"

#include <mutex>
#include <stdexcept>

#include "capture_gate.h"

namespace lstm_ort::streams {

namespace {

Ort::Env& Env() {
  // onnxruntime has one environment a process: this is a reference to the one Python's made.
  // Never destroyed: sessions may outlive any static here at exit.
  static Ort::Env* env = new Ort::Env(ORT_LOGGING_LEVEL_WARNING, "lstm_ort_streams");
  return *env;
}

void AppendCuda(Ort::SessionOptions& options, const KeyValues& values) {
  const OrtApi& api = Ort::GetApi();
  OrtCUDAProviderOptionsV2* cuda = nullptr;
  Ort::ThrowOnError(api.CreateCUDAProviderOptions(&cuda));
  std::unique_ptr<OrtCUDAProviderOptionsV2, decltype(api.ReleaseCUDAProviderOptions)> owned(
      cuda, api.ReleaseCUDAProviderOptions);
  std::vector<const char*> keys, vals;
  for (const auto& [k, v] : values) {
    keys.push_back(k.c_str());
    vals.push_back(v.c_str());
  }
  if (!keys.empty()) Ort::ThrowOnError(api.UpdateCUDAProviderOptions(cuda, keys.data(), vals.data(), keys.size()));
  options.AppendExecutionProvider_CUDA_V2(*cuda);
}

}  // namespace

void InitOrtApi(const OrtApiBase* api_base) {
  static std::once_flag once;
  std::call_once(once, [api_base] {
    const OrtApi* api = api_base ? api_base->GetApi(LSTM_ORT_API_VERSION) : nullptr;
    if (!api) throw std::runtime_error("lstm_ort streams: onnxruntime's API version 21 is not available");
    Ort::InitApi(api);
  });
}

Ort::Session MakeSession(const SessionSpec& spec) { return MakeSession(spec, spec.model); }

Ort::Session MakeSession(const SessionSpec& spec, const std::string& model) {
  Ort::SessionOptions options;
  if (spec.intra_op_threads > 0) options.SetIntraOpNumThreads(spec.intra_op_threads);
  if (spec.inter_op_threads > 0) options.SetInterOpNumThreads(spec.inter_op_threads);
  options.SetGraphOptimizationLevel(static_cast<GraphOptimizationLevel>(spec.graph_optimization_level));
  options.SetExecutionMode(static_cast<ExecutionMode>(spec.execution_mode));
  if (!spec.cpu_mem_arena) options.DisableCpuMemArena();
  if (!spec.mem_pattern) options.DisableMemPattern();
  options.SetLogSeverityLevel(spec.log_severity);
  if (!spec.profile_prefix.empty()) options.EnableProfiling(spec.profile_prefix.c_str());
  for (const auto& [k, v] : spec.config) options.AddConfigEntry(k.c_str(), v.c_str());
  options.RegisterCustomOpsLibrary(spec.library_path.c_str());
  for (const auto& [name, values] : spec.providers) {
    if (name == "CPUExecutionProvider") continue;  // always there, last
    if (name == "CUDAExecutionProvider") {
      AppendCuda(options, values);
      continue;
    }
    throw std::invalid_argument("the native step path runs the CPU and CUDA execution providers, not " + name);
  }
  // its weights are allocated on the device, which a capture elsewhere forbids (capture_gate.h)
  CaptureGate::Together pass(ProcessCaptureGate(), CaptureGate::Length::kLong);
  return Ort::Session(Env(), model.data(), model.size(), options);
}

SessionSpec WideSpec(const SessionSpec& spec) {
  SessionSpec wide = spec;
  wide.intra_op_threads = 0;
  wide.wide_from_seconds = 0;
  return wide;
}

std::pair<std::string, int> SessionDevice(const SessionSpec& spec) {
  for (const auto& [name, values] : spec.providers) {
    if (name != "CUDAExecutionProvider") continue;
    int id = 0;
    for (const auto& [k, v] : values)
      if (k == "device_id") id = std::stoi(v);
    return {"Cuda", id};
  }
  return {"Cpu", 0};
}

}  // namespace lstm_ort::streams
