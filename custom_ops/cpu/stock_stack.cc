#include "cpu/stock_stack.h"

#include <algorithm>
#include <cstring>
#include <vector>

namespace lstm_ort {
namespace {

const OrtMemoryInfo* CpuMemory() {
  static const Ort::MemoryInfo info = Ort::MemoryInfo::CreateCpu(OrtDeviceAllocator, OrtMemTypeDefault);
  return info;
}

// Row (of H floats) of state k = l*D + d, batch entry b, in a call's initial_h / Y_h.
int64_t StateRow(int64_t layout, int64_t k, int64_t b, int64_t B, int64_t LD) { return layout == 0 ? k * B + b : b * LD + k; }

}  // namespace

StockStack::StockStack(const Attributes& attrs, const Dims& dims, const StockSignature& sig,
                       const StackWeights& weights, int threads, int copies)
    : attrs_(attrs), dims_(dims), sig_(sig), threads_(threads), env_(ORT_LOGGING_LEVEL_ERROR, "lstm_ort_stock") {
  const std::string model = StockStackModel(attrs, dims, sig, weights);
  Ort::SessionOptions so;
  // threads = 1 where the FusedLSTM session's pool runs the pieces (StockStack::Run's callers); a
  // pool of this session's own would compete with that one for the same cores. Else the pool's
  // size, run from one of its threads while the others wait.
  so.SetIntraOpNumThreads(threads);
  so.SetInterOpNumThreads(1);
  // Its workers spin inside a run (stock's LSTM meets them at every step) and stop when the run
  // returns: spinning on, they went on taking a core from the FusedLSTM session's next kernels
  // (fused after stock_threads: 22-27 ms for three calls, against 10-11).
  if (threads > 1) so.AddConfigEntry("session.force_spinning_stop", "1");
  so.SetLogSeverityLevel(ORT_LOGGING_LEVEL_ERROR);
  for (int k = 0; k < std::max(1, copies); ++k)
    sessions_.push_back(std::make_unique<Ort::Session>(env_, model.data(), model.size(), so));
}

size_t StockStack::ScratchFloats(const CallIO& io, int64_t rows) const {
  const Dims& c = io.dims;
  if (attrs_.layout == 0 && rows == c.B) return 0;
  const int64_t LD = c.L * c.D, per_state = LD * rows * c.H;
  size_t n = c.T * rows * c.I;
  n += (sig_.initial_h + sig_.initial_c) * per_state;
  if (io.out[kY]) n += c.T * c.D * rows * c.H;
  n += (io.out[kYH] != nullptr) * per_state + (io.out[kYC] != nullptr) * per_state;
  return n;
}

void StockStack::Run(const CallIO& io, int64_t b0, int64_t b1, float* scratch, int copy) const {
  namespace n = stock_names;
  const Dims& c = io.dims;
  const int64_t T = c.T, B = c.B, I = c.I, H = c.H, L = c.L, D = c.D, LD = L * D, rows = b1 - b0;
  const int64_t layout = attrs_.layout;
  if (!io.out[kY] && !io.out[kYH] && !io.out[kYC]) return;
  // One piece in layout 0: the session reads and writes the call's buffers (a layer's states are
  // D consecutive rows of [L*D, B, H]). Else pieces are copied in and out, time-major.
  const bool direct = layout == 0 && rows == B;
  float* next = scratch;
  auto take = [&next](int64_t count) {
    float* at = next;
    next += count;
    return at;
  };

  std::vector<std::string> in_names, out_names;
  std::vector<Ort::Value> in_vals, out_vals;
  auto tensor = [](float* data, std::vector<int64_t> shape) {
    size_t count = 1;
    for (int64_t s : shape) count *= static_cast<size_t>(s);
    return Ort::Value::CreateTensor<float>(CpuMemory(), data, count, shape.data(), shape.size());
  };

  const float* x = static_cast<const float*>(io.in[kX]);
  float* x_in = const_cast<float*>(x);  // onnxruntime does not write its inputs
  if (!direct) {
    x_in = take(T * rows * I);
    for (int64_t t = 0; t < T; ++t)
      for (int64_t r = 0; r < rows; ++r) {
        const int64_t b = b0 + r;
        std::memcpy(x_in + (t * rows + r) * I, x + (layout == 0 ? t * B + b : b * T + t) * I, sizeof(float) * I);
      }
  }
  in_names.push_back(n::kX);
  in_vals.push_back(tensor(x_in, {T, rows, I}));
  if (sig_.seq_lens) {
    int64_t shape = rows;
    in_names.push_back(n::kSeqLens);
    in_vals.push_back(Ort::Value::CreateTensor<int32_t>(CpuMemory(), const_cast<int32_t*>(io.seq_lens) + b0, rows,
                                                        &shape, 1));
  }
  // A layer's [D, rows, H] slice of [L*D, B, H] (layout 0) or [B, L*D, H] (layout 1).
  auto gather_state = [&](const float* src, int64_t l) {
    if (direct) return const_cast<float*>(src) + l * D * B * H;
    float* dst = take(D * rows * H);
    for (int64_t d = 0; d < D; ++d)
      for (int64_t r = 0; r < rows; ++r)
        std::memcpy(dst + (d * rows + r) * H, src + StateRow(layout, l * D + d, b0 + r, B, LD) * H, sizeof(float) * H);
    return dst;
  };
  for (int64_t l = 0; l < L; ++l) {
    if (sig_.initial_h) {
      in_names.push_back(n::InitialH(l));
      in_vals.push_back(tensor(gather_state(static_cast<const float*>(io.in[kInitialH]), l), {D, rows, H}));
    }
    if (sig_.initial_c) {
      in_names.push_back(n::InitialC(l));
      in_vals.push_back(tensor(gather_state(static_cast<const float*>(io.in[kInitialC]), l), {D, rows, H}));
    }
  }

  float* y = static_cast<float*>(io.out[kY]);
  float* y_buf = nullptr;
  if (y) {
    y_buf = direct ? y : take(T * D * rows * H);
    out_names.push_back(n::kY);
    out_vals.push_back(tensor(y_buf, {T, D, rows, H}));
  }
  float* states_out[2] = {static_cast<float*>(io.out[kYH]), static_cast<float*>(io.out[kYC])};
  float* state_bufs[2] = {};
  for (int which = 0; which < 2; ++which) {
    if (!states_out[which]) continue;
    state_bufs[which] = direct ? states_out[which] : take(LD * rows * H);
    for (int64_t l = 0; l < L; ++l) {
      out_names.push_back(which == 0 ? n::YH(l) : n::YC(l));
      out_vals.push_back(tensor(state_bufs[which] + l * D * rows * H, {D, rows, H}));
    }
  }

  std::vector<const char*> in_c, out_c;
  for (const std::string& s : in_names) in_c.push_back(s.c_str());
  for (const std::string& s : out_names) out_c.push_back(s.c_str());
  sessions_[copy % sessions_.size()]->Run(Ort::RunOptions{nullptr}, in_c.data(), in_vals.data(), in_vals.size(),
                                          out_c.data(), out_vals.data(), out_vals.size());
  if (direct) return;

  if (y)
    for (int64_t t = 0; t < T; ++t)
      for (int64_t d = 0; d < D; ++d)
        for (int64_t r = 0; r < rows; ++r) {
          const int64_t b = b0 + r, row = layout == 0 ? (t * D + d) * B + b : (b * T + t) * D + d;
          std::memcpy(y + row * H, y_buf + ((t * D + d) * rows + r) * H, sizeof(float) * H);
        }
  for (int which = 0; which < 2; ++which) {
    if (!states_out[which]) continue;
    for (int64_t k = 0; k < LD; ++k)
      for (int64_t r = 0; r < rows; ++r)
        std::memcpy(states_out[which] + StateRow(layout, k, b0 + r, B, LD) * H, state_bufs[which] + (k * rows + r) * H,
                    sizeof(float) * H);
  }
}

}  // namespace lstm_ort
