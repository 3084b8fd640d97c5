// While one thread captures a CUDA graph in onnxruntime's way (cudaStreamCaptureModeGlobal), CUDA
// forbids the calls that allocate or synchronize in every thread of the process: such a call made
// meanwhile fails (error 900), and so does the capture. The engines' onnxruntime calls (a binding
// with its copies and the run, a session made or dropped) pass this gate together; a run that may
// capture passes it alone, once those inside have left, and holds back those that come after it
// (a capture is rare: a thread's first runs of a graphed session). While a long call is inside (a
// session made: seconds on a GPU) short ones still pass, since the capture waits for it anyway.
// CUDA's rule holds across the process, so all engines share one gate (ProcessCaptureGate); calls
// that other onnxruntime sessions of the process make do not pass it (docs/streams.md).
#pragma once

#include <condition_variable>
#include <mutex>

namespace lstm_ort::streams {

class CaptureGate {
 public:
  enum class Length { kShort, kLong };
  // Held around one onnxruntime call; never nested on a thread.
  class Together {
   public:
    explicit Together(CaptureGate& gate, Length length = Length::kShort) : gate_(gate), long_(length == Length::kLong) {
      gate_.Enter(long_);
    }
    ~Together() { gate_.Leave(long_); }
    Together(const Together&) = delete;
    Together& operator=(const Together&) = delete;

   private:
    CaptureGate& gate_;
    const bool long_;
  };
  // Held around a run that may capture.
  class Alone {
   public:
    explicit Alone(CaptureGate& gate) : gate_(gate) { gate_.EnterAlone(); }
    ~Alone() { gate_.LeaveAlone(); }
    Alone(const Alone&) = delete;
    Alone& operator=(const Alone&) = delete;

   private:
    CaptureGate& gate_;
  };

 private:
  void Enter(bool is_long) {
    std::unique_lock<std::mutex> lock(mu_);
    ready_.wait(lock, [this] { return !alone_ && (waiting_ == 0 || long_inside_ > 0); });
    ++inside_;
    long_inside_ += is_long;
  }
  void Leave(bool is_long) {
    std::lock_guard<std::mutex> lock(mu_);
    --inside_;
    long_inside_ -= is_long;
    if (inside_ == 0 && waiting_ > 0) ready_.notify_all();
  }
  void EnterAlone() {
    std::unique_lock<std::mutex> lock(mu_);
    ++waiting_;
    ready_.wait(lock, [this] { return !alone_ && inside_ == 0; });
    --waiting_;
    alone_ = true;
  }
  void LeaveAlone() {
    std::lock_guard<std::mutex> lock(mu_);
    alone_ = false;
    ready_.notify_all();
  }

  std::mutex mu_;
  std::condition_variable ready_;
  int inside_ = 0;       // calls passing together
  int long_inside_ = 0;  // of which long
  int waiting_ = 0;      // runs waiting to pass alone
  bool alone_ = false;
};

inline CaptureGate& ProcessCaptureGate() {
  static CaptureGate* gate = new CaptureGate;  // never destroyed: engines may outlive statics at exit
  return *gate;
}

}  // namespace lstm_ort::streams
