#include "ort_runner.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <optional>
#include <stdexcept>

#include "capture_gate.h"
#include "element_types.h"

namespace lstm_ort::streams {

CallOutput OutputOf(const Ort::Value& v) {
  const auto info = v.GetTensorTypeAndShapeInfo();
  const int32_t type = info.GetElementType();
  const size_t size = ElementSize(type);
  if (size == 0) throw std::invalid_argument("an output of element type " + std::to_string(type) +
                                             " (the native step path moves numeric tensors only)");
  return {v.GetTensorRawData(), info.GetShape(), type, size};
}

std::string ShapeText(const std::vector<int64_t>& shape) {
  std::string out = "(";
  for (size_t k = 0; k < shape.size(); ++k) out += (k ? ", " : "") + std::to_string(shape[k]);
  return out + (shape.size() == 1 ? ",)" : ")");
}

std::vector<size_t> CarriedOutputIndexes(const std::vector<std::string>& outputs,
                                         const std::vector<std::pair<std::string, std::string>>& carry) {
  std::vector<size_t> indexes;
  for (const auto& [out, in] : carry) {
    const auto it = std::find(outputs.begin(), outputs.end(), out);
    if (it == outputs.end()) throw std::invalid_argument("the model has no output " + out);
    indexes.push_back(static_cast<size_t>(it - outputs.begin()));
  }
  return indexes;
}

void CheckCarriedShape(const Ort::Value& output, const std::vector<int64_t>& want,
                       const std::pair<std::string, std::string>& carried) {
  const std::vector<int64_t> got = output.GetTensorTypeAndShapeInfo().GetShape();
  if (got != want)
    throw std::invalid_argument("carried output '" + carried.first + "' came back with shape " + ShapeText(got) +
                                ", input '" + carried.second + "' takes " + ShapeText(want));
}

OrtHostRunner::OrtHostRunner(const SessionSpec& spec, std::vector<std::string> step_inputs,
                             std::vector<std::pair<std::string, std::string>> carry, const std::string& single_model)
    : cpu_(Ort::MemoryInfo::CreateCpu(OrtDeviceAllocator, OrtMemTypeDefault)),
      step_inputs_(std::move(step_inputs)),
      carry_(std::move(carry)) {
  for (const std::string& name : step_inputs_) input_names_.push_back(name);
  for (const auto& [out, in] : carry_) input_names_.push_back(in);
  spec_ = spec;
  spec_.model.clear();
  on_cuda_ = SessionDevice(spec_).first == "Cuda";
  if (on_cuda_) spec_.wide_from_seconds = 0;  // the pool's threads feed no device
  session_ = Load(spec.model);
  output_names_ = OutputNames(session_.session);
  carried_output_ = CarriedOutputIndexes(output_names_, carry_);
  for (const std::string& name : output_names_) output_ptrs_.push_back(name.c_str());
  if (!single_model.empty()) {
    single_ = Load(single_model);
  }
}

std::vector<std::string> InputNames(const Ort::Session& session) {
  Ort::AllocatorWithDefaultOptions allocator;
  std::vector<std::string> names;
  for (size_t k = 0; k < session.GetInputCount(); ++k) names.push_back(session.GetInputNameAllocated(k, allocator).get());
  return names;
}

std::vector<std::string> OutputNames(const Ort::Session& session) {
  Ort::AllocatorWithDefaultOptions allocator;
  std::vector<std::string> names;
  for (size_t k = 0; k < session.GetOutputCount(); ++k) names.push_back(session.GetOutputNameAllocated(k, allocator).get());
  return names;
}

OrtHostRunner::Bound OrtHostRunner::Bind(Ort::Session session) const {
  Bound b;
  for (std::string& name : InputNames(session)) {
    const auto it = std::find(input_names_.begin(), input_names_.end(), name);
    if (it == input_names_.end())
      throw std::invalid_argument("the step path's model takes an input it is not given: " + name);
    b.feeds.push_back(static_cast<size_t>(it - input_names_.begin()));
    b.names.push_back(std::move(name));
  }
  for (const std::string& name : b.names) b.name_ptrs.push_back(name.c_str());
  b.session = std::move(session);
  return b;
}

OrtHostRunner::Bound OrtHostRunner::Load(const std::string& model) const {
  Bound b = Bind(MakeSession(spec_, model));
  if (spec_.wide_from_seconds > 0) {
    b.wide = MakeSession(WideSpec(spec_), model);
    b.choice = std::make_shared<WideChoice>(spec_.wide_from_seconds);
  }
  return b;
}

int WideChoice::ClassOf(int64_t streams) {
  int c = 0;
  while (c < 63 && (int64_t{2} << c) <= streams) ++c;
  return c;
}

bool WideChoice::TakesWide(int64_t streams) {
  const int c = ClassOf(streams);
  std::lock_guard<std::mutex> lock(mu_);
  if (narrow_seconds_[c] < from_seconds_) return false;
  if (++since_probe_[c] < kReprobeEvery) return true;
  since_probe_[c] = 0;
  return false;
}

void WideChoice::Narrow(int64_t streams, double seconds) {
  const int c = ClassOf(streams);
  std::lock_guard<std::mutex> lock(mu_);
  narrow_seconds_[c] = seconds;
}

void OrtHostRunner::AddGroupModels(int group, const std::string& batched, const std::string& single) {
  auto sessions = std::make_shared<GroupSessions>();
  if (!batched.empty()) sessions->batched = Load(batched);
  if (!single.empty()) sessions->single = Load(single);
  for (const Bound* b : {&sessions->batched, &sessions->single})
    if (b->session && OutputNames(b->session) != output_names_)
      throw std::invalid_argument("a group's model gives other outputs than the model");
  std::lock_guard<std::mutex> lock(groups_mu_);
  groups_[group] = std::move(sessions);
}

OrtHostRunner::Bound& OrtHostRunner::Choose(int group, int64_t streams,
                                                  std::shared_ptr<GroupSessions>* hold) {
  {
    std::lock_guard<std::mutex> lock(groups_mu_);
    const auto it = groups_.find(group);
    if (it != groups_.end()) *hold = it->second;
  }
  GroupSessions* own = hold->get();
  if (streams == 1) {
    if (own && own->single.session) return own->single;
    if (single_.session) return single_;
  }
  return own && own->batched.session ? own->batched : session_;
}

void OrtHostRunner::SetStateLayouts(const std::vector<TensorLayout>& states) {
  slots_ = std::make_unique<HostSlots>(states);
}

void OrtHostRunner::WriteState(int64_t slot, const std::vector<const void*>& values) {
  for (size_t s = 0; s < values.size() && s < slots_->layouts().size(); ++s)
    if (values[s]) std::memcpy(slots_->Row(s, slot), values[s], slots_->layouts()[s].Bytes());
}

void OrtHostRunner::ReadState(int64_t slot, std::vector<std::vector<char>>* values) {
  values->clear();
  for (size_t s = 0; s < slots_->layouts().size(); ++s) {
    const char* row = slots_->Row(s, slot);
    values->emplace_back(row, row + slots_->layouts()[s].Bytes());
  }
}

namespace {
struct CallHold {
  std::vector<Ort::Value> outputs;
};
}  // namespace

std::shared_ptr<void> OrtHostRunner::Run(const CallInputs& in, std::vector<CallOutput>* outputs) {
  const std::vector<int64_t>& slots = *in.slots;
  const int64_t n = static_cast<int64_t>(slots.size());
  const std::vector<TensorLayout>& states = slots_->layouts();
  // Every input of the engine (step inputs, then the carried ones) as a tensor: its data, shape
  // and type; the chosen session takes those it names.
  std::vector<TensorLayout> all(in.data.size() + states.size());
  std::vector<const void*> data(all.size());
  for (size_t k = 0; k < in.data.size(); ++k) {
    all[k] = TensorLayout{in.types[k], ElementSize(in.types[k]), in.shapes[k]};
    data[k] = in.data[k];
  }
  // The carried inputs: the streams' rows, stacked on each one's batch axis (one stream: its row).
  std::vector<TensorLayout> stacked(states.size());
  std::vector<std::unique_ptr<char[]>> staging;
  std::vector<const void*> rows(n);
  std::vector<void*> dst(n);
  for (size_t s = 0; s < states.size(); ++s) {
    stacked[s] = states[s];
    stacked[s].batch_axis = (*in.state_axes)[s];
    const void* row = slots_->Row(s, slots[0]);
    if (n > 1) {
      for (int64_t i = 0; i < n; ++i) rows[i] = slots_->Row(s, slots[i]);
      staging.emplace_back(new char[states[s].Bytes() * n]);
      Stack(stacked[s], rows.data(), n, staging.back().get());
      row = staging.back().get();
    }
    all[in.data.size() + s] = TensorLayout{states[s].type, states[s].elem_size, stacked[s].Stacked(n)};
    data[in.data.size() + s] = row;
  }
  std::shared_ptr<GroupSessions> group_hold;
  Bound& chosen = Choose(in.group, n, &group_hold);
  std::vector<Ort::Value> values;
  values.reserve(chosen.feeds.size());
  for (const size_t k : chosen.feeds) {
    const TensorLayout& t = all[k];
    // onnxruntime reads inputs and never writes them; its API takes them as void*.
    values.push_back(Ort::Value::CreateTensor(cpu_, const_cast<void*>(data[k]), t.Bytes(), t.shape.data(),
                                              t.shape.size(), static_cast<ONNXTensorElementDataType>(t.type)));
  }
  auto hold = std::make_shared<CallHold>();
  std::optional<CaptureGate::Together> pass;  // its inputs are copied to the device in it
  if (on_cuda_) pass.emplace(ProcessCaptureGate());
  const bool wide = chosen.choice && (in.alone || chosen.choice->TakesWide(n));
  if (wide) wide_calls_.fetch_add(1, std::memory_order_relaxed);
  Ort::Session& session = wide ? chosen.wide : chosen.session;
  const auto began = std::chrono::steady_clock::now();
  hold->outputs = session.Run(Ort::RunOptions{nullptr}, chosen.name_ptrs.data(), values.data(), values.size(),
                              output_ptrs_.data(), output_ptrs_.size());
  if (chosen.choice && !wide)
    chosen.choice->Narrow(n, std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count());
  // Every carried output must fit its input's rows before any is written back.
  for (size_t s = 0; s < states.size(); ++s)
    CheckCarriedShape(hold->outputs[carried_output_[s]], stacked[s].Stacked(n), carry_[s]);
  for (size_t s = 0; s < states.size(); ++s) {
    const void* src = hold->outputs[carried_output_[s]].GetTensorRawData();
    if (n == 1) {
      std::memcpy(slots_->Row(s, slots[0]), src, states[s].Bytes());
      continue;
    }
    for (int64_t i = 0; i < n; ++i) dst[i] = slots_->Row(s, slots[i]);
    Unstack(stacked[s], src, n, dst.data());
  }
  outputs->clear();
  for (const Ort::Value& v : hold->outputs) outputs->push_back(OutputOf(v));
  return hold;
}

}  // namespace lstm_ort::streams
