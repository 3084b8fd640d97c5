#include "graphed_call.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>

#include "element_types.h"
#include "session_spec.h"

namespace lstm_ort::streams {

Ort::Session GraphedSession(const SessionSpec& spec, const std::string& model) {
  SessionSpec graphed = spec;
  for (auto& [name, values] : graphed.providers) {
    if (name != "CUDAExecutionProvider") continue;
    const auto asked = [](const auto& kv) { return kv.first == "enable_cuda_graph"; };
    values.erase(std::remove_if(values.begin(), values.end(), asked), values.end());
    values.emplace_back("enable_cuda_graph", "1");
  }
  // onnxruntime logs its refusal as an error; the caller keeps the reason instead
  graphed.log_severity = ORT_LOGGING_LEVEL_FATAL;
  return MakeSession(graphed, model);
}

namespace {
constexpr int kRunsUntilCaptured = 3;
}  // namespace

GraphedCall::GraphedCall(Ort::Session session, int device_id) : session_(std::move(session)) {
  device_ = Ort::MemoryInfo("Cuda", OrtDeviceAllocator, device_id, OrtMemTypeDefault);
  const auto pinned_on = [](int id) {
    return Ort::MemoryInfo("CudaPinned", OrtDeviceAllocator, id, OrtMemTypeCPUOutput);
  };
  try {
    pinned_ = Ort::Allocator(session_, pinned_on(device_id));
  } catch (const Ort::Exception&) {  // onnxruntime versions that register pinned memory under device 0 only
    pinned_ = Ort::Allocator(session_, pinned_on(0));
  }
}

GraphedCall::~GraphedCall() {
  binding_.reset();
  for (void* p : input_buffers_) pinned_.Free(p);
  for (void* p : output_buffers_) pinned_.Free(p);
}

bool GraphedCall::TryTake() {
  bool expected = false;
  return taken_.compare_exchange_strong(expected, true, std::memory_order_acquire);
}

void GraphedCall::Give() { taken_.store(false, std::memory_order_release); }

bool GraphedCall::Fits(const std::vector<BoundTensor>& inputs) const {
  if (inputs.size() != inputs_.size()) return false;
  for (size_t k = 0; k < inputs.size(); ++k)
    if (inputs[k].name != inputs_[k].name || inputs[k].shape != inputs_[k].shape || inputs[k].type != inputs_[k].type)
      return false;
  return true;
}

std::string GraphedCall::Bind(const std::vector<BoundTensor>& inputs, const std::vector<BoundTensor>& outputs) {
  if (bound()) throw std::logic_error("GraphedCall::Bind: already bound");
  size_t total = 0;
  for (const auto* side : {&inputs, &outputs})
    for (const BoundTensor& t : *side) total += t.bytes;
  if (total > kMaxGraphedBytes)
    return "its inputs and outputs hold " + std::to_string(total) + " bytes, past the " +
           std::to_string(kMaxGraphedBytes) + " a graphed call reads and writes in host memory";
  auto binding = std::make_unique<Ort::IoBinding>(session_);
  std::vector<void*> in_buffers, out_buffers;
  auto bind = [&](const BoundTensor& t, std::vector<void*>& buffers, bool input) {
    void* p = pinned_.Alloc(std::max<size_t>(t.bytes, 1));
    buffers.push_back(p);
    std::memset(p, 0, t.bytes);
    // pinned host memory, handed to the graph as the device's: its kernels reach it in place
    Ort::Value v = Ort::Value::CreateTensor(device_, p, t.bytes, t.shape.data(), t.shape.size(),
                                            static_cast<ONNXTensorElementDataType>(t.type));
    if (input) binding->BindInput(t.name.c_str(), v);
    else binding->BindOutput(t.name.c_str(), v);
  };
  try {
    for (const BoundTensor& t : inputs) bind(t, in_buffers, true);
    for (const BoundTensor& t : outputs) bind(t, out_buffers, false);
  } catch (...) {
    binding.reset();
    for (void* p : in_buffers) pinned_.Free(p);
    for (void* p : out_buffers) pinned_.Free(p);
    throw;
  }
  binding_ = std::move(binding);
  input_buffers_ = std::move(in_buffers);
  output_buffers_ = std::move(out_buffers);
  inputs_ = inputs;
  outputs_ = outputs;
  return "";
}

GraphedCall::ThreadRuns* GraphedCall::ThisThread() {
  const std::thread::id me = std::this_thread::get_id();
  std::lock_guard<std::mutex> lock(threads_mu_);
  for (ThreadRuns& t : threads_)
    if (t.thread == me) return &t;
  if (threads_.size() >= kMaxGraphThreads) return nullptr;
  threads_.reserve(kMaxGraphThreads);  // the pointers handed out stay valid
  threads_.push_back({me, 0});
  return &threads_.back();
}

bool GraphedCall::ThisThreadMayRun() { return ThisThread() != nullptr; }

bool GraphedCall::MayCapture() {
  const ThreadRuns* t = ThisThread();
  return t && t->runs < kRunsUntilCaptured;
}

void GraphedCall::Run(const std::vector<const void*>& data) {
  if (data.size() != inputs_.size()) throw std::logic_error("GraphedCall::Run: one pointer per bound input");
  for (size_t k = 0; k < data.size(); ++k) std::memcpy(input_buffers_[k], data[k], inputs_[k].bytes);
  ThreadRuns* t = ThisThread();
  if (!t) throw std::logic_error("GraphedCall::Run on a thread past kMaxGraphThreads");
  t->runs = std::min(t->runs + 1, kRunsUntilCaptured);  // only this thread writes its entry
  session_.Run(Ort::RunOptions{nullptr}, *binding_);
  calls_.fetch_add(1, std::memory_order_relaxed);
}

std::vector<CallOutput> GraphedCall::Outputs() const {
  std::vector<CallOutput> out;
  for (size_t k = 0; k < outputs_.size(); ++k)
    out.push_back({output_buffers_[k], outputs_[k].shape, outputs_[k].type, ElementSize(outputs_[k].type)});
  return out;
}

}  // namespace lstm_ort::streams
