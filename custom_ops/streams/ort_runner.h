// The engine's calls through onnxruntime, the states on the host: each call gathers its streams'
// rows into the carried inputs, runs the session, checks and scatters the carried outputs back.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "call_runner.h"
#include "host_slots.h"
#include "session_spec.h"

namespace lstm_ort::streams {

// Which calls of a model take its wide session (SessionSpec::wide_from_seconds): those whose size
// class (the power of two at or below their streams) last took that long or more on the one-thread
// session. A class taken wide runs one call in kReprobeEvery on the one-thread session again, so
// that a class timed on a loaded stretch is timed anew.
class WideChoice {
 public:
  static constexpr uint32_t kReprobeEvery = 64;
  explicit WideChoice(double from_seconds) : from_seconds_(from_seconds) {}
  bool TakesWide(int64_t streams);
  void Narrow(int64_t streams, double seconds);  // a call on the one-thread session took `seconds`

 private:
  static int ClassOf(int64_t streams);
  const double from_seconds_;
  std::mutex mu_;
  double narrow_seconds_[64] = {};  // per class; 0: not timed yet
  uint32_t since_probe_[64] = {};
};

class OrtHostRunner : public CallRunner {
 public:
  // `step_inputs`: the model inputs a step feeds, in the engine's order; `carry`: each carried
  // (output, input) pair, in the order of the state layouts.
  // `single_model`: where given, the model calls of one stream run instead (the batched model's
  // rewrites, such as convolutions over the batch, cost a lone stream more than they save).
  OrtHostRunner(const SessionSpec& spec, std::vector<std::string> step_inputs,
                std::vector<std::pair<std::string, std::string>> carry, const std::string& single_model = "");

  void SetStateLayouts(const std::vector<TensorLayout>& states) override;
  int64_t AllocateSlot() override { return slots_->Allocate(); }
  void FreeSlot(int64_t slot) override { slots_->Free(slot); }
  void WriteState(int64_t slot, const std::vector<const void*>& values) override;
  void ReadState(int64_t slot, std::vector<std::vector<char>>* values) override;
  std::shared_ptr<void> Run(const CallInputs& in, std::vector<CallOutput>* outputs) override;

  // Calls of one stream run the group's `batched` model where it has no `single` and the runner no
  // model of its own for them.
  void AddGroupModels(int group, const std::string& batched, const std::string& single) override;
  int64_t WideCalls() const override { return wide_calls_.load(std::memory_order_relaxed); }

 private:
  bool on_cuda_ = false;  // its calls pass the capture gate (capture_gate.h)
  // A session and which of the engine's inputs (step inputs, then carried inputs) it takes; `wide`:
  // the same model's wide session and which calls take it, where the runner makes them.
  struct Bound {
    Ort::Session session{nullptr};
    Ort::Session wide{nullptr};
    std::shared_ptr<WideChoice> choice;
    std::vector<size_t> feeds;
    std::vector<std::string> names;
    std::vector<const char*> name_ptrs;
  };
  struct GroupSessions {
    Bound batched, single;
  };
  Bound Bind(Ort::Session session) const;
  // `model`'s session, bound, and its wide session where the spec asks for one.
  Bound Load(const std::string& model) const;
  Bound& Choose(int group, int64_t streams, std::shared_ptr<GroupSessions>* hold);

  SessionSpec spec_;  // without its model: how the groups' sessions are made
  Bound session_;
  Bound single_;  // for calls of one stream, where given
  std::mutex groups_mu_;
  std::unordered_map<int, std::shared_ptr<GroupSessions>> groups_;
  Ort::MemoryInfo cpu_{nullptr};
  std::vector<std::string> step_inputs_, output_names_;
  std::vector<std::pair<std::string, std::string>> carry_;
  std::vector<size_t> carried_output_;  // each carried pair's output index
  std::vector<std::string> input_names_;  // step inputs then carried inputs
  std::vector<const char*> output_ptrs_;
  std::unique_ptr<HostSlots> slots_;
  std::atomic<int64_t> wide_calls_{0};
};

// A call's output as the engine reads it (its bytes, shape and element type); std::invalid_argument
// for a type the native step path does not move.
CallOutput OutputOf(const Ort::Value& value);

// The names of a session's inputs, and of its outputs, in its order.
std::vector<std::string> InputNames(const Ort::Session& session);
std::vector<std::string> OutputNames(const Ort::Session& session);

// "(1, 2, 3)", as numpy writes a shape
std::string ShapeText(const std::vector<int64_t>& shape);

// Each carried (output, input) pair's index in `outputs` (the model's output names);
// std::invalid_argument for an output the model lacks.
std::vector<size_t> CarriedOutputIndexes(const std::vector<std::string>& outputs,
                                         const std::vector<std::pair<std::string, std::string>>& carry);

// std::invalid_argument where a carried output's shape is not its input's (`want`): checked before
// any state is written back.
void CheckCarriedShape(const Ort::Value& output, const std::vector<int64_t>& want,
                       const std::pair<std::string, std::string>& carried);

}  // namespace lstm_ort::streams
