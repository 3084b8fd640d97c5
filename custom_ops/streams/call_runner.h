// What runs a call of the engine: keeps the streams' states (one row a stream per carried input)
// and runs the model on stacked step inputs with those rows. The engine never sees onnxruntime;
// OrtRunner (ort_runner.h) is the real one, tests use fakes.
#pragma once

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "tensor_layout.h"

namespace lstm_ort::streams {

struct CallOutput {
  const void* data = nullptr;
  std::vector<int64_t> shape;
  int32_t type = 0;
  size_t elem_size = 0;
};

struct CallInputs {
  std::vector<const void*> data;             // each step input of the model, stacked (or shared)
  std::vector<std::vector<int64_t>> shapes;  // their shapes
  std::vector<int32_t> types;                // their ONNX element types
  const std::vector<int64_t>* slots = nullptr;  // the streams' state rows, in batch order
  const std::vector<int>* state_axes = nullptr;  // each carried input's batch axis in the model's layout
  int group = -1;                                 // the engine's group of the call's steps
  // Led by its caller with no other caller lately and no call in flight (Engine::CallerLeads): one
  // stream alone, whose call has the machine to itself, as a plain `run` would.
  bool alone = false;
};

class CallRunner {
 public:
  virtual ~CallRunner() = default;
  // One stream's state per carried input (batch axis of size 1 where the model has one), set once
  // before the first slot.
  virtual void SetStateLayouts(const std::vector<TensorLayout>& states) = 0;
  // Slots: called under the engine's lock. A slot's row is read and written only by the call
  // that holds its stream (or under the lock while no call does).
  virtual int64_t AllocateSlot() = 0;
  virtual void FreeSlot(int64_t slot) = 0;
  virtual void WriteState(int64_t slot, const std::vector<const void*>& values) = 0;
  virtual void ReadState(int64_t slot, std::vector<std::vector<char>>* values) = 0;
  // One call: the states of `in.slots` gathered on `in.state_axes`, the model run, the new states
  // written back (only if the whole call succeeds; it throws otherwise, leaving them as they
  // were). Returns what keeps the outputs alive; `outputs` point into it.
  virtual std::shared_ptr<void> Run(const CallInputs& in, std::vector<CallOutput>* outputs) = 0;
  // Whether calls should keep one batch size while the load does (padding rows): where a new input
  // shape costs more than padded rows (onnxruntime's CUDA kernels set up again on each new shape).
  virtual bool PadsBatches() const { return false; }
  // A group's own models (lstm_ort/serving/streams/specialize.py: its shapes fixed, its shared
  // inputs made constants and folded away), which its calls run from then on: `batched` for calls
  // of several streams, `single` for calls of one; an empty one leaves those calls as they were.
  // Their inputs are the model's, less any made constant.
  virtual void AddGroupModels(int group, const std::string& batched, const std::string& single) {
    (void)group, (void)batched, (void)single;
    throw std::logic_error("this runner takes no models of a group's own");
  }
  // Calls run on a wide session so far (SessionSpec::wide_from_seconds; the host runner's alone).
  virtual int64_t WideCalls() const { return 0; }
  // Memory to stack a call's inputs in (a runner that copies them to a device gives pinned memory).
  virtual std::shared_ptr<char> Staging(size_t bytes) { return std::shared_ptr<char>(new char[bytes], std::default_delete<char[]>()); }
};

}  // namespace lstm_ort::streams
