// The engine's calls with the streams' states on the session's device (CUDA; on the CPU provider
// the same path runs on host memory, which is how the CPU tests check it). A step moves only its
// chunk in and its outputs out: the model runs wrapped (lstm_ort/serving/streams/device.py) in a
// Gather of the call's rows from each state's slot array and a ScatterND of the new states back
// into the same array, bound as both input and output so onnxruntime writes in place (its
// ScatterND copies only when the two differ): a call touches its own rows only, so calls on
// disjoint streams may run at once. Small models of the same kind write a new stream's first
// state, read a state back, and grow the arrays. Chunks and outputs move through pageable host
// memory (pinned measured slower: ort_device_runner.cc).
//
// A call of one stream runs the model as it came instead (RunAlone): the wrapper's Gather,
// Transposes and ScatterND cost more launches than a lone stream's copies. Its state comes from
// the host where the stream's last call was alone too (or its first state is still to be
// written), else from a view of its row of the slot arrays, and goes back to the host as the
// stream's pending state, which the next call that gathers the stream writes first (Flush). Where
// the group's own model of one stream lets onnxruntime capture it, such a call whose state is on the
// host replays it as a CUDA graph instead (graphed_call.h).
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "call_runner.h"
#include "capture_gate.h"
#include "graphed_call.h"
#include "session_spec.h"

namespace lstm_ort::streams {

struct DeviceModels {
  std::string writer;  // (slots, rows, updates) -> slots: rows written
  std::string reader;  // (slots, rows) -> the rows
  std::string grow;    // (slots, pads) -> slots padded with zeros
};

class OrtDeviceRunner : public CallRunner {
 public:
  OrtDeviceRunner(const SessionSpec& spec, std::vector<std::string> step_inputs,
                  std::vector<std::pair<std::string, std::string>> carry);
  // The writer, reader and grow models, once the states' shapes are known (before any slot).
  void SetModels(const DeviceModels& models);
  ~OrtDeviceRunner() override;

  // The wrapped model for calls whose carried inputs have the batch on these axes.
  void AddModel(const std::vector<int>& axes, const std::string& model);
  // `batched`: the group's model wrapped as AddModel's are; `single`: its model as it came.
  void AddGroupModels(int group, const std::string& batched, const std::string& single) override;

  void SetStateLayouts(const std::vector<TensorLayout>& states) override;
  int64_t AllocateSlot() override;
  void FreeSlot(int64_t slot) override;
  void WriteState(int64_t slot, const std::vector<const void*>& values) override;
  void ReadState(int64_t slot, std::vector<std::vector<char>>* values) override;
  std::shared_ptr<void> Run(const CallInputs& in, std::vector<CallOutput>* outputs) override;
  std::shared_ptr<char> Staging(size_t bytes) override;
  bool PadsBatches() const override { return on_cuda_; }
  // Why AddGroupModels makes a group no graphed session ("" where it tries to): the one place that
  // decides, read by StreamBatcher's budget for its models.
  std::string GraphedSessionsRefusal() const;
  // The group's calls of one stream run on its CUDA graph's buffers so far, and why they replay no
  // graph ("" where they do, or will once bound); -1 for a group the runner has no models of.
  std::pair<int64_t, std::string> GraphUse(int group);

 private:
  // A session and which step inputs it takes (a group's own models lack those made constants).
  struct Bound {
    std::unique_ptr<Ort::Session> session;
    std::vector<bool> takes;
  };
  struct GroupSessions {
    Bound wrapped, alone;
    std::unique_ptr<GraphedCall> graph;  // `alone`'s model (or the model as it came) captured; null where not
    std::vector<bool> graph_takes;       // the step inputs the graph's model takes
    std::atomic<bool> graph_refused{false};
    std::string graph_note;  // why not: under models_mu_
  };
  Bound Bind(const std::string& model) const;
  std::shared_ptr<GroupSessions> GroupOf(int group);
  std::shared_ptr<void> RunAlone(const CallInputs& in, std::vector<CallOutput>* outputs);
  // One stream's call on `session` the plain way, its state from the host (`held`) or else from
  // its row of the slot arrays: the model's outputs.
  std::vector<Ort::Value> RunPlainAlone(Ort::Session& session, const std::vector<bool>* takes, const CallInputs& in,
                                        const std::vector<std::vector<char>>& held,
                                        const std::vector<std::vector<int64_t>>& shapes);
  // One stream's call on the group's graph: null where it cannot run there (buffers taken, not yet
  // bound, other shapes, or the graph failed: then refused for good), and the caller runs it plain.
  std::shared_ptr<void> RunGraphed(const std::shared_ptr<GroupSessions>& own, const CallInputs& in,
                                   const std::vector<std::vector<char>>& held, std::vector<CallOutput>* outputs);
  // After a plain call on the group's own model: binds the graph's buffers to its shapes, once.
  void BindGraphed(GroupSessions& own, const CallInputs& in, const std::vector<std::vector<char>>& held,
                   const std::vector<CallOutput>& outputs) noexcept;
  void RefuseGraph(GroupSessions& own, const std::string& why);
  // The graphed call's inputs (those `takes` names, then the states) and their data.
  std::vector<BoundTensor> AloneInputs(const CallInputs& in, const std::vector<bool>& takes,
                                       const std::vector<std::vector<char>>& held,
                                       std::vector<const void*>* data) const;
  std::vector<int64_t> AloneStateShape(const CallInputs& in, size_t s) const;
  void EnsureCapacity(int64_t slots);
  void Flush(const std::vector<int64_t>& slots);
  Ort::Value HostTensor(const void* data, const std::vector<int64_t>& shape, int32_t type, size_t bytes) const;
  // the chunks, from the host (those `takes` names, where given)
  void BindStepInputs(Ort::IoBinding& binding, const CallInputs& in, const std::vector<bool>* takes) const;

  SessionSpec spec_;  // its model unused: each session is made from its own
  std::vector<std::string> step_inputs_;
  std::vector<std::pair<std::string, std::string>> carry_;
  std::vector<std::string> output_names_;  // the model's
  std::vector<size_t> carried_output_;     // each carried input's output, in output_names_
  Ort::Session alone_{nullptr};            // the model as it came: calls of one stream
  std::vector<TensorLayout> states_;
  Ort::Session writer_{nullptr}, reader_{nullptr}, grow_{nullptr};
  Ort::MemoryInfo cpu_{nullptr}, device_{nullptr}, pinned_{nullptr};
  std::unique_ptr<Ort::Allocator> pinned_alloc_;
  bool use_pinned_ = false;
  bool on_cuda_ = false;
  int device_id_ = 0;
  CaptureGate& gate_ = ProcessCaptureGate();  // every onnxruntime call of this runner passes it
  std::mutex models_mu_;
  std::map<std::vector<int>, std::unique_ptr<Ort::Session>> sessions_;
  std::unordered_map<int, std::shared_ptr<GroupSessions>> groups_;  // under models_mu_
  std::shared_mutex arrays_mu_;    // calls share the slot arrays; growing them is exclusive
  std::vector<Ort::Value> arrays_;  // each carried input's [capacity, *one stream's state]
  int64_t capacity_ = 0;
  // Slots, under the engine's lock.
  int64_t allocated_ = 0;
  std::vector<int64_t> free_;
  std::mutex pending_mu_;  // a stream's first state, written before its first call
  std::unordered_map<int64_t, std::vector<std::vector<char>>> pending_;
};

}  // namespace lstm_ort::streams
