#include "ort_runner.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>

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
    : session_(MakeSession(spec)),
      cpu_(Ort::MemoryInfo::CreateCpu(OrtDeviceAllocator, OrtMemTypeDefault)),
      step_inputs_(std::move(step_inputs)),
      carry_(std::move(carry)) {
  Ort::AllocatorWithDefaultOptions allocator;
  for (size_t k = 0; k < session_.GetOutputCount(); ++k)
    output_names_.push_back(session_.GetOutputNameAllocated(k, allocator).get());
  carried_output_ = CarriedOutputIndexes(output_names_, carry_);
  for (const std::string& name : step_inputs_) input_names_.push_back(name.c_str());
  for (const auto& [out, in] : carry_) input_names_.push_back(in.c_str());
  for (const std::string& name : output_names_) output_ptrs_.push_back(name.c_str());
  if (!single_model.empty()) {
    SessionSpec single = spec;
    single.model = single_model;
    single_ = MakeSession(single);
  }
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
  std::vector<Ort::Value> values;
  values.reserve(input_names_.size());
  for (size_t k = 0; k < in.data.size(); ++k) {
    const size_t bytes = TensorLayout{in.types[k], ElementSize(in.types[k]), in.shapes[k]}.Bytes();
    // onnxruntime reads inputs and never writes them; its API takes them as void*.
    values.push_back(Ort::Value::CreateTensor(cpu_, const_cast<void*>(in.data[k]), bytes, in.shapes[k].data(),
                                              in.shapes[k].size(),
                                              static_cast<ONNXTensorElementDataType>(in.types[k])));
  }
  // The carried inputs: the streams' rows, stacked on each one's batch axis (one stream: its row).
  std::vector<TensorLayout> stacked(states.size());
  std::vector<std::unique_ptr<char[]>> staging;
  std::vector<const void*> rows(n);
  std::vector<void*> dst(n);
  for (size_t s = 0; s < states.size(); ++s) {
    stacked[s] = states[s];
    stacked[s].batch_axis = (*in.state_axes)[s];
    void* data = slots_->Row(s, slots[0]);
    if (n > 1) {
      for (int64_t i = 0; i < n; ++i) rows[i] = slots_->Row(s, slots[i]);
      staging.emplace_back(new char[states[s].Bytes() * n]);
      Stack(stacked[s], rows.data(), n, staging.back().get());
      data = staging.back().get();
    }
    const std::vector<int64_t> shape = stacked[s].Stacked(n);
    values.push_back(Ort::Value::CreateTensor(cpu_, data, states[s].Bytes() * n, shape.data(), shape.size(),
                                              static_cast<ONNXTensorElementDataType>(states[s].type)));
  }
  auto hold = std::make_shared<CallHold>();
  Ort::Session& session = n == 1 && single_ ? single_ : session_;
  hold->outputs = session.Run(Ort::RunOptions{nullptr}, input_names_.data(), values.data(), values.size(),
                              output_ptrs_.data(), output_ptrs_.size());
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
