// How to make the step path's onnxruntime session: what Python's SessionOptions and providers
// said, as plain values (Python cannot hand its session over), and the session made from them.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "../ort_api.h"

namespace lstm_ort::streams {

using KeyValues = std::vector<std::pair<std::string, std::string>>;

struct SessionSpec {
  std::string model;         // serialized ModelProto
  std::string library_path;  // lstm_ort's op library, registered into the session
  int intra_op_threads = 0;  // 0: onnxruntime's default
  int inter_op_threads = 0;
  int graph_optimization_level = 99;  // GraphOptimizationLevel
  int execution_mode = 0;             // ExecutionMode
  bool cpu_mem_arena = true;
  bool mem_pattern = true;
  int log_severity = 2;
  std::string profile_prefix;  // onnxruntime's profiling, where the caller's options enable it
  // On CUDA, a group's calls of one stream replay a CUDA graph where onnxruntime captures its model
  // (graphed_call.h); the session config entry lstm_ort.streams.cuda_graphs=0 turns it off.
  bool cuda_graphs = true;
  // The host runner keeps a second session of each model it runs, with onnxruntime's default thread
  // count (WideSpec). A call takes it where it has the machine to itself (CallInputs::alone), or
  // where the last call of its size class on the first session took `wide_from_seconds` or more
  // (ort_runner.h, WideChoice); 0: no second session. Such calls gain more from the pool than it
  // costs, where the short calls of busy callers on a one-thread session leave the other cores to
  // them (docs/streams.md, "Threads").
  double wide_from_seconds = 0;
  KeyValues config;                                         // session config entries
  std::vector<std::pair<std::string, KeyValues>> providers;  // in order, with their options
};

// Initialises this library's use of the onnxruntime C API (once; the api_base of the onnxruntime
// the process's Python module runs, as lstm_ort's op library received it).
void InitOrtApi(const OrtApiBase* api_base);
// Made through the process's capture gate (capture_gate.h). The second form: spec's options and
// providers, another model (a group's own).
Ort::Session MakeSession(const SessionSpec& spec);
Ort::Session MakeSession(const SessionSpec& spec, const std::string& model);
// `spec` for the wide session of a host runner (SessionSpec::wide_from_seconds): the thread count
// left to onnxruntime (its pool spins as the caller's options say).
SessionSpec WideSpec(const SessionSpec& spec);
// The device the session's execution provider puts tensors on ("Cpu" or "Cuda") and its id.
std::pair<std::string, int> SessionDevice(const SessionSpec& spec);

}  // namespace lstm_ort::streams
