#include "ort_device_runner.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <stdexcept>

#include "element_types.h"
#include "ort_runner.h"

namespace lstm_ort::streams {

namespace {

constexpr const char* kPrefix = "__streams_";
constexpr int64_t kFirstCapacity = 256;

std::string SlotsInput(const std::string& name) { return std::string(kPrefix) + name + "_slots"; }
std::string NewSlotsOutput(const std::string& name) { return std::string(kPrefix) + name + "_new_slots"; }
std::string Updates(const std::string& name) { return std::string(kPrefix) + name + "_updates"; }
std::string Rows(const std::string& name) { return std::string(kPrefix) + name + "_rows"; }
std::string Pads(const std::string& name) { return std::string(kPrefix) + name + "_pads"; }
const std::string kSlots = std::string(kPrefix) + "slots";

struct DeviceCallHold {
  std::vector<Ort::Value> outputs;
};

}  // namespace

OrtDeviceRunner::OrtDeviceRunner(const SessionSpec& spec, std::vector<std::string> step_inputs,
                                 std::vector<std::pair<std::string, std::string>> carry)
    : spec_(spec), step_inputs_(std::move(step_inputs)), carry_(std::move(carry)),
      cpu_(Ort::MemoryInfo::CreateCpu(OrtDeviceAllocator, OrtMemTypeDefault)) {
  const auto [device, id] = SessionDevice(spec_);
  // Pinned host memory for the stacked chunks and the outputs is off unless asked for
  // (LSTM_ORT_STREAMS_PINNED=1): on the H100 every configuration measured slower with it (silero-vad,
  // 1024 streams from 16 clients: 178 against 120 ms p50 per step; a tick of 4096: 8.7 against 5.7 ms).
  const char* pinned = std::getenv("LSTM_ORT_STREAMS_PINNED");
  use_pinned_ = device == "Cuda" && pinned && std::string(pinned) == "1";
  on_cuda_ = device == "Cuda";
  device_id_ = id;
  if (device == "Cuda") {
    device_ = Ort::MemoryInfo("Cuda", OrtDeviceAllocator, id, OrtMemTypeDefault);
    pinned_ = use_pinned_ ? Ort::MemoryInfo("CudaPinned", OrtDeviceAllocator, id, OrtMemTypeCPUOutput)
                          : Ort::MemoryInfo::CreateCpu(OrtDeviceAllocator, OrtMemTypeDefault);
  } else {
    device_ = Ort::MemoryInfo::CreateCpu(OrtDeviceAllocator, OrtMemTypeDefault);
    pinned_ = Ort::MemoryInfo::CreateCpu(OrtDeviceAllocator, OrtMemTypeDefault);
  }
  // The spec's model is the unwrapped one: its outputs, and the session of lone calls.
  alone_ = MakeSession(spec_);
  output_names_ = OutputNames(alone_);
  carried_output_ = CarriedOutputIndexes(output_names_, carry_);
}

OrtDeviceRunner::~OrtDeviceRunner() {
  // the sessions and buffers give their memory back to CUDA, which a capture elsewhere forbids
  CaptureGate::Together pass(gate_, CaptureGate::Length::kLong);
  groups_.clear();
  sessions_.clear();
  arrays_.clear();
  pinned_alloc_.reset();
  for (Ort::Session* s : {&writer_, &reader_, &grow_, &alone_}) *s = Ort::Session{nullptr};
}

void OrtDeviceRunner::SetModels(const DeviceModels& models) {
  writer_ = MakeSession(spec_, models.writer);
  reader_ = MakeSession(spec_, models.reader);
  grow_ = MakeSession(spec_, models.grow);
  if (use_pinned_) pinned_alloc_ = std::make_unique<Ort::Allocator>(writer_, pinned_);
}

void OrtDeviceRunner::AddModel(const std::vector<int>& axes, const std::string& model) {
  {
    std::lock_guard<std::mutex> lock(models_mu_);
    if (sessions_.count(axes)) return;
  }
  auto session = std::make_unique<Ort::Session>(MakeSession(spec_, model));  // seconds on a GPU: outside the lock
  std::lock_guard<std::mutex> lock(models_mu_);
  sessions_.emplace(axes, std::move(session));
}

OrtDeviceRunner::Bound OrtDeviceRunner::Bind(const std::string& model) const {
  Bound b;
  if (model.empty()) return b;
  b.session = std::make_unique<Ort::Session>(MakeSession(spec_, model));
  const std::vector<std::string> names = InputNames(*b.session), outputs = OutputNames(*b.session);
  for (const std::string& input : step_inputs_)
    b.takes.push_back(std::find(names.begin(), names.end(), input) != names.end());
  for (const std::string& output : output_names_)
    if (std::find(outputs.begin(), outputs.end(), output) == outputs.end())
      throw std::invalid_argument("a group's model lacks the model's output " + output);
  return b;
}

void OrtDeviceRunner::AddGroupModels(int group, const std::string& batched, const std::string& single) {
  auto sessions = std::make_shared<GroupSessions>();
  sessions->wrapped = Bind(batched);  // seconds on a GPU: outside the lock
  sessions->alone = Bind(single);
  sessions->graph_note = GraphedSessionsRefusal();
  if (sessions->graph_note.empty()) {
    const bool own = !single.empty();
    sessions->graph_takes = own ? sessions->alone.takes : std::vector<bool>(step_inputs_.size(), true);
    try {
      sessions->graph = std::make_unique<GraphedCall>(GraphedSession(spec_, own ? single : spec_.model), device_id_);
    } catch (const std::exception& e) {
      sessions->graph_note = std::string("onnxruntime does not capture its model: ") + e.what();
    }
  }
  std::lock_guard<std::mutex> lock(models_mu_);
  groups_[group] = std::move(sessions);
}

std::string OrtDeviceRunner::GraphedSessionsRefusal() const {
  if (!on_cuda_) return "CUDA graphs are for calls on CUDA";
  if (!spec_.cuda_graphs) return "turned off (lstm_ort.streams.cuda_graphs=0)";
  return "";
}

std::pair<int64_t, std::string> OrtDeviceRunner::GraphUse(int group) {
  std::lock_guard<std::mutex> lock(models_mu_);
  const auto it = groups_.find(group);
  if (it == groups_.end()) return {-1, ""};
  const GroupSessions& own = *it->second;
  return {own.graph ? own.graph->calls() : 0, own.graph_note};
}

void OrtDeviceRunner::RefuseGraph(GroupSessions& own, const std::string& why) {
  own.graph_refused = true;
  std::lock_guard<std::mutex> lock(models_mu_);
  own.graph_note = why;
}

std::vector<int64_t> OrtDeviceRunner::AloneStateShape(const CallInputs& in, size_t s) const {
  TensorLayout one = states_[s];
  one.batch_axis = (*in.state_axes)[s];
  return one.Stacked(1);
}

std::vector<BoundTensor> OrtDeviceRunner::AloneInputs(const CallInputs& in, const std::vector<bool>& takes,
                                                      const std::vector<std::vector<char>>& held,
                                                      std::vector<const void*>* data) const {
  std::vector<BoundTensor> inputs;
  for (size_t k = 0; k < in.data.size(); ++k) {
    if (!takes[k]) continue;
    const size_t bytes = TensorLayout{in.types[k], ElementSize(in.types[k]), in.shapes[k]}.Bytes();
    inputs.push_back({step_inputs_[k], in.shapes[k], in.types[k], bytes});
    data->push_back(in.data[k]);
  }
  for (size_t s = 0; s < states_.size(); ++s) {
    inputs.push_back({carry_[s].second, AloneStateShape(in, s), states_[s].type, states_[s].Bytes()});
    data->push_back(held[s].data());
  }
  return inputs;
}

std::shared_ptr<void> OrtDeviceRunner::RunGraphed(const std::shared_ptr<GroupSessions>& own, const CallInputs& in,
                                                  const std::vector<std::vector<char>>& held,
                                                  std::vector<CallOutput>* outputs) {
  GraphedCall& graph = *own->graph;
  if (own->graph_refused || !graph.ThisThreadMayRun() || !graph.TryTake()) return nullptr;
  // gives the buffers back once the engine has read the outputs (or at once, where the call does not run here)
  std::shared_ptr<void> hold(own.get(), [own](void*) { own->graph->Give(); });
  std::vector<const void*> data;
  const std::vector<BoundTensor> inputs = AloneInputs(in, own->graph_takes, held, &data);
  if (!graph.bound() || !graph.Fits(inputs)) return nullptr;
  try {
    if (graph.MayCapture()) {
      CaptureGate::Alone pass(gate_);
      graph.Run(data);
    } else {
      CaptureGate::Together pass(gate_);
      graph.Run(data);
    }
  } catch (const std::exception& e) {  // a capture onnxruntime could not make: the call runs plain
    RefuseGraph(*own, std::string("its graph failed: ") + e.what());
    return nullptr;
  }
  *outputs = graph.Outputs();
  std::vector<std::vector<char>> state(states_.size());
  for (size_t s = 0; s < states_.size(); ++s) {
    const char* p = static_cast<const char*>((*outputs)[carried_output_[s]].data);
    state[s].assign(p, p + states_[s].Bytes());
  }
  std::lock_guard<std::mutex> lock(pending_mu_);
  pending_[(*in.slots)[0]] = std::move(state);
  return hold;
}

void OrtDeviceRunner::BindGraphed(GroupSessions& own, const CallInputs& in, const std::vector<std::vector<char>>& held,
                                  const std::vector<CallOutput>& outputs) noexcept {
  GraphedCall& graph = *own.graph;
  if (own.graph_refused || !graph.TryTake()) return;
  std::string why;
  try {
    if (!graph.bound()) {
      std::vector<const void*> data;
      const std::vector<BoundTensor> inputs = AloneInputs(in, own.graph_takes, held, &data);
      std::vector<BoundTensor> outs;
      for (size_t k = 0; k < outputs.size(); ++k) {
        const CallOutput& o = outputs[k];
        outs.push_back({output_names_[k], o.shape, o.type, TensorLayout{o.type, o.elem_size, o.shape}.Bytes()});
      }
      CaptureGate::Together pass(gate_);  // pinned host memory is allocated
      why = graph.Bind(inputs, outs);
    }
  } catch (const std::exception& e) {  // the call itself ran: it stays plain, the kind with it
    why = std::string("binding its buffers failed: ") + e.what();
  } catch (...) {
    why = "binding its buffers failed";
  }
  graph.Give();
  if (!why.empty()) RefuseGraph(own, why);
}

std::shared_ptr<OrtDeviceRunner::GroupSessions> OrtDeviceRunner::GroupOf(int group) {
  std::lock_guard<std::mutex> lock(models_mu_);
  const auto it = groups_.find(group);
  return it == groups_.end() ? nullptr : it->second;
}

void OrtDeviceRunner::SetStateLayouts(const std::vector<TensorLayout>& states) { states_ = states; }

int64_t OrtDeviceRunner::AllocateSlot() {
  if (!free_.empty()) {
    const int64_t slot = free_.back();
    free_.pop_back();
    return slot;
  }
  return allocated_++;
}

void OrtDeviceRunner::FreeSlot(int64_t slot) {
  {
    std::lock_guard<std::mutex> lock(pending_mu_);
    pending_.erase(slot);
  }
  free_.push_back(slot);
}

void OrtDeviceRunner::WriteState(int64_t slot, const std::vector<const void*>& values) {
  std::vector<std::vector<char>> rows;
  for (size_t s = 0; s < states_.size(); ++s) {
    const size_t bytes = states_[s].Bytes();
    if (s < values.size() && values[s]) {
      const char* v = static_cast<const char*>(values[s]);
      rows.emplace_back(v, v + bytes);
    } else {
      rows.emplace_back(bytes, 0);  // a reused slot holds its last stream's state: zeros, written
    }
  }
  std::lock_guard<std::mutex> lock(pending_mu_);
  pending_[slot] = std::move(rows);
}

Ort::Value OrtDeviceRunner::HostTensor(const void* data, const std::vector<int64_t>& shape, int32_t type,
                                       size_t bytes) const {
  // onnxruntime reads inputs and never writes them; its API takes them as void*.
  return Ort::Value::CreateTensor(cpu_, const_cast<void*>(data), bytes, shape.data(), shape.size(),
                                  static_cast<ONNXTensorElementDataType>(type));
}

void OrtDeviceRunner::BindStepInputs(Ort::IoBinding& binding, const CallInputs& in,
                                     const std::vector<bool>* takes) const {
  for (size_t k = 0; k < in.data.size(); ++k) {
    if (takes && !(*takes)[k]) continue;
    const size_t bytes = TensorLayout{in.types[k], ElementSize(in.types[k]), in.shapes[k]}.Bytes();
    binding.BindInput(step_inputs_[k].c_str(), HostTensor(in.data[k], in.shapes[k], in.types[k], bytes));
  }
}

void OrtDeviceRunner::ReadState(int64_t slot, std::vector<std::vector<char>>* values) {
  {
    std::lock_guard<std::mutex> lock(pending_mu_);
    auto it = pending_.find(slot);
    if (it != pending_.end()) {
      *values = it->second;
      return;
    }
  }
  std::shared_lock<std::shared_mutex> arrays(arrays_mu_);
  values->clear();
  int64_t row = slot;
  const std::vector<int64_t> one{1};
  CaptureGate::Together pass(gate_);  // from the binding on: it copies inputs to the device
  Ort::IoBinding binding(reader_);
  binding.BindInput(kSlots.c_str(), HostTensor(&row, one, ONNX_TENSOR_ELEMENT_DATA_TYPE_INT64, sizeof row));
  for (size_t s = 0; s < states_.size(); ++s) {
    binding.BindInput(SlotsInput(carry_[s].second).c_str(), arrays_[s]);
    binding.BindOutput(Rows(carry_[s].second).c_str(), cpu_);
  }
  reader_.Run(Ort::RunOptions{nullptr}, binding);
  std::vector<Ort::Value> out = binding.GetOutputValues();
  for (size_t s = 0; s < states_.size(); ++s) {
    const char* data = static_cast<const char*>(out[s].GetTensorRawData());
    values->emplace_back(data, data + states_[s].Bytes());
  }
}

void OrtDeviceRunner::EnsureCapacity(int64_t needed) {
  std::unique_lock<std::shared_mutex> exclusive(arrays_mu_);
  if (needed <= capacity_) return;
  int64_t grown = std::max(capacity_ * 2, kFirstCapacity);
  while (grown < needed) grown *= 2;
  CaptureGate::Together pass(gate_);
  Ort::IoBinding binding(grow_);
  std::vector<std::vector<char>> zeros;
  std::vector<std::vector<int64_t>> pads(states_.size());
  for (size_t s = 0; s < states_.size(); ++s) {
    const std::string& name = carry_[s].second;
    const size_t rank = states_[s].shape.size() + 1;
    pads[s].assign(2 * rank, 0);
    if (capacity_ == 0) {  // the first arrays: zeros from the host
      std::vector<int64_t> shape{grown};
      shape.insert(shape.end(), states_[s].shape.begin(), states_[s].shape.end());
      zeros.emplace_back(states_[s].Bytes() * grown, 0);
      binding.BindInput(SlotsInput(name).c_str(),
                        HostTensor(zeros.back().data(), shape, states_[s].type, zeros.back().size()));
    } else {
      pads[s][rank] = grown - capacity_;  // rows after the last
      binding.BindInput(SlotsInput(name).c_str(), arrays_[s]);
    }
    const std::vector<int64_t> pads_shape{static_cast<int64_t>(pads[s].size())};
    binding.BindInput(Pads(name).c_str(), HostTensor(pads[s].data(), pads_shape, ONNX_TENSOR_ELEMENT_DATA_TYPE_INT64,
                                                     pads[s].size() * sizeof(int64_t)));
    binding.BindOutput(NewSlotsOutput(name).c_str(), device_);
  }
  grow_.Run(Ort::RunOptions{nullptr}, binding);
  arrays_ = binding.GetOutputValues();
  capacity_ = grown;
}

void OrtDeviceRunner::Flush(const std::vector<int64_t>& slots) {
  std::vector<int64_t> rows;
  std::vector<std::vector<char>> updates(states_.size());
  {
    std::lock_guard<std::mutex> lock(pending_mu_);
    for (int64_t slot : slots) {
      auto it = pending_.find(slot);
      if (it == pending_.end()) continue;
      rows.push_back(slot);
      for (size_t s = 0; s < states_.size(); ++s)
        updates[s].insert(updates[s].end(), it->second[s].begin(), it->second[s].end());
      pending_.erase(it);
    }
  }
  if (rows.empty()) return;
  CaptureGate::Together pass(gate_);
  Ort::IoBinding binding(writer_);
  const std::vector<int64_t> n{static_cast<int64_t>(rows.size())};
  binding.BindInput(kSlots.c_str(), HostTensor(rows.data(), n, ONNX_TENSOR_ELEMENT_DATA_TYPE_INT64,
                                               rows.size() * sizeof(int64_t)));
  for (size_t s = 0; s < states_.size(); ++s) {
    const std::string& name = carry_[s].second;
    std::vector<int64_t> shape{static_cast<int64_t>(rows.size())};
    shape.insert(shape.end(), states_[s].shape.begin(), states_[s].shape.end());
    binding.BindInput(Updates(name).c_str(), HostTensor(updates[s].data(), shape, states_[s].type, updates[s].size()));
    binding.BindInput(SlotsInput(name).c_str(), arrays_[s]);
    binding.BindOutput(NewSlotsOutput(name).c_str(), arrays_[s]);  // in place
  }
  writer_.Run(Ort::RunOptions{nullptr}, binding);
}

std::vector<Ort::Value> OrtDeviceRunner::RunPlainAlone(Ort::Session& session, const std::vector<bool>* takes,
                                                       const CallInputs& in, const std::vector<std::vector<char>>& held,
                                                       const std::vector<std::vector<int64_t>>& shapes) {
  const int64_t slot = (*in.slots)[0];
  CaptureGate::Together pass(gate_);  // from the binding on: it copies inputs to the device
  Ort::IoBinding binding(session);
  BindStepInputs(binding, in, takes);
  for (size_t s = 0; s < states_.size(); ++s) {
    const size_t bytes = states_[s].Bytes();
    if (!held.empty()) {
      binding.BindInput(carry_[s].second.c_str(), HostTensor(held[s].data(), shapes[s], states_[s].type, bytes));
    } else {  // its row of the slot array (one stream's state; a batch axis of 1 moves no bytes)
      char* row = arrays_[s].GetTensorMutableData<char>() + slot * static_cast<int64_t>(bytes);
      binding.BindInput(carry_[s].second.c_str(),
                        Ort::Value::CreateTensor(device_, row, bytes, shapes[s].data(), shapes[s].size(),
                                                 static_cast<ONNXTensorElementDataType>(states_[s].type)));
    }
  }
  for (const std::string& name : output_names_) binding.BindOutput(name.c_str(), pinned_);
  session.Run(Ort::RunOptions{nullptr}, binding);
  return binding.GetOutputValues();
}

std::shared_ptr<void> OrtDeviceRunner::RunAlone(const CallInputs& in, std::vector<CallOutput>* outputs) {
  const int64_t slot = (*in.slots)[0];
  std::vector<std::vector<char>> held;  // the stream's state on the host, where it is there
  {
    std::lock_guard<std::mutex> lock(pending_mu_);
    auto it = pending_.find(slot);
    if (it != pending_.end()) {
      held = std::move(it->second);
      pending_.erase(it);
    }
  }
  try {
    std::shared_lock<std::shared_mutex> arrays(arrays_mu_);
    if (held.empty() && slot >= capacity_)  // a state neither pending nor ever gathered
      throw std::logic_error("stream slot " + std::to_string(slot) + " has no state on the device");
    const std::shared_ptr<GroupSessions> own = GroupOf(in.group);
    const bool graphed = own && own->graph && !held.empty();
    if (graphed)
      if (std::shared_ptr<void> hold = RunGraphed(own, in, held, outputs)) return hold;
    const bool own_alone = own && own->alone.session;
    Ort::Session& session = own_alone ? *own->alone.session : alone_;
    std::vector<std::vector<int64_t>> shapes(states_.size());
    for (size_t s = 0; s < states_.size(); ++s) shapes[s] = AloneStateShape(in, s);
    auto hold = std::make_shared<DeviceCallHold>();
    hold->outputs = RunPlainAlone(session, own_alone ? &own->alone.takes : nullptr, in, held, shapes);
    std::vector<std::vector<char>> state(states_.size());
    for (size_t s = 0; s < states_.size(); ++s) {
      const Ort::Value& v = hold->outputs[carried_output_[s]];
      CheckCarriedShape(v, shapes[s], carry_[s]);
      const char* data = static_cast<const char*>(v.GetTensorRawData());
      state[s].assign(data, data + states_[s].Bytes());
    }
    outputs->clear();
    for (size_t k = 0; k < output_names_.size(); ++k) outputs->push_back(OutputOf(hold->outputs[k]));
    if (graphed) BindGraphed(*own, in, held, *outputs);  // the next such call runs on the graph
    {
      std::lock_guard<std::mutex> lock(pending_mu_);
      pending_[slot] = std::move(state);
    }
    return hold;
  } catch (...) {
    if (!held.empty()) {  // a failed step keeps its stream's state
      std::lock_guard<std::mutex> lock(pending_mu_);
      pending_.emplace(slot, std::move(held));
    }
    throw;
  }
}

std::shared_ptr<void> OrtDeviceRunner::Run(const CallInputs& in, std::vector<CallOutput>* outputs) {
  const std::vector<int64_t>& slots = *in.slots;
  if (slots.size() == 1) return RunAlone(in, outputs);
  const int64_t last = *std::max_element(slots.begin(), slots.end());
  {
    std::shared_lock<std::shared_mutex> shared(arrays_mu_);
    if (last >= capacity_) {
      shared.unlock();
      EnsureCapacity(last + 1);
    }
  }
  std::shared_lock<std::shared_mutex> arrays(arrays_mu_);
  Ort::Session* session = nullptr;
  const std::shared_ptr<GroupSessions> own = GroupOf(in.group);
  const bool own_wrapped = own && own->wrapped.session;
  if (own_wrapped) {
    session = own->wrapped.session.get();
  } else {
    std::lock_guard<std::mutex> lock(models_mu_);
    auto it = sessions_.find(*in.state_axes);
    if (it == sessions_.end()) throw std::logic_error("no wrapped model for these state axes");
    session = it->second.get();
  }
  Flush(slots);
  CaptureGate::Together pass(gate_);
  Ort::IoBinding binding(*session);
  BindStepInputs(binding, in, own_wrapped ? &own->wrapped.takes : nullptr);
  const std::vector<int64_t> n{static_cast<int64_t>(slots.size())};
  binding.BindInput(kSlots.c_str(), HostTensor(slots.data(), n, ONNX_TENSOR_ELEMENT_DATA_TYPE_INT64,
                                               slots.size() * sizeof(int64_t)));
  for (size_t s = 0; s < states_.size(); ++s) binding.BindInput(SlotsInput(carry_[s].second).c_str(), arrays_[s]);
  for (const std::string& name : output_names_) binding.BindOutput(name.c_str(), pinned_);
  for (size_t s = 0; s < states_.size(); ++s) binding.BindOutput(NewSlotsOutput(carry_[s].second).c_str(), arrays_[s]);
  session->Run(Ort::RunOptions{nullptr}, binding);
  auto hold = std::make_shared<DeviceCallHold>();
  hold->outputs = binding.GetOutputValues();
  outputs->clear();
  for (size_t k = 0; k < output_names_.size(); ++k) outputs->push_back(OutputOf(hold->outputs[k]));
  return hold;
}

std::shared_ptr<char> OrtDeviceRunner::Staging(size_t bytes) {
  if (!pinned_alloc_) return CallRunner::Staging(bytes);
  Ort::Allocator* alloc = pinned_alloc_.get();
  CaptureGate::Together pass(gate_);  // cudaHostAlloc
  return std::shared_ptr<char>(static_cast<char*>(alloc->Alloc(bytes)), [alloc](char* p) { alloc->Free(p); });
}

}  // namespace lstm_ort::streams
