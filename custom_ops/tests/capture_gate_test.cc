// The capture gate (streams/capture_gate.h): calls pass together, a capture alone.
#include <atomic>
#include <chrono>
#include <thread>

#include "check.h"
#include "streams/capture_gate.h"

using lstm_ort::streams::CaptureGate;
using namespace std::chrono_literals;

TEST(CaptureGateLetsCallsPassTogether) {
  CaptureGate gate;
  std::atomic<int> inside{0}, most{0};
  auto call = [&] {
    CaptureGate::Together pass(gate);
    const int now = ++inside;
    for (int seen = most.load(); now > seen && !most.compare_exchange_weak(seen, now);) {
    }
    std::this_thread::sleep_for(30ms);
    --inside;
  };
  std::thread a(call), b(call), c(call);
  a.join(), b.join(), c.join();
  CHECK(most.load() >= 2);  // three calls of 30 ms started together overlap
}

TEST(CaptureGateRunsACaptureAloneAndHoldsBackLaterCalls) {
  CaptureGate gate;
  std::atomic<int> inside{0};
  std::atomic<bool> capture_saw_company{false}, late_call_after_capture{false}, captured{false};
  std::thread early([&] {
    CaptureGate::Together pass(gate);
    ++inside;
    std::this_thread::sleep_for(60ms);
    --inside;
  });
  std::this_thread::sleep_for(10ms);
  std::thread capture([&] {
    CaptureGate::Alone pass(gate);
    capture_saw_company = inside.load() != 0;
    std::this_thread::sleep_for(40ms);
    captured = true;
  });
  std::this_thread::sleep_for(20ms);  // the capture waits for the early call; a call now waits too
  std::thread late([&] {
    CaptureGate::Together pass(gate);
    late_call_after_capture = captured.load();
  });
  early.join(), capture.join(), late.join();
  CHECK(!capture_saw_company.load());
  CHECK(late_call_after_capture.load());
}

TEST(CaptureGateLetsShortCallsPassWhileALongOneHoldsACaptureBack) {
  CaptureGate gate;
  std::atomic<bool> captured{false}, short_passed_before_capture{false};
  std::thread session([&] {
    CaptureGate::Together pass(gate, CaptureGate::Length::kLong);
    std::this_thread::sleep_for(80ms);
  });
  std::this_thread::sleep_for(10ms);
  std::thread capture([&] {
    CaptureGate::Alone pass(gate);
    captured = true;
  });
  std::this_thread::sleep_for(20ms);
  std::thread call([&] {
    CaptureGate::Together pass(gate);
    short_passed_before_capture = !captured.load();
  });
  call.join();  // passes while the session is being made, though a capture waits
  CHECK(short_passed_before_capture.load());
  session.join(), capture.join();
  CHECK(captured.load());
}
