// The StreamBatcher's native step path without onnxruntime (custom_ops/streams): stacking and
// splitting rows, the cost model and the callers' think time, and the engine over a fake model
// (y = x + state, state += x) from many threads: each stream's results as if alone, in order,
// a failing step failing alone, close and shutdown semantics, and no wait ever rescued.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstring>
#include <map>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <vector>

#include "check.h"
#include "streams/callers.h"
#include "streams/cost_model.h"
#include "streams/batch_buckets.h"
#include "streams/engine.h"
#include "streams/host_slots.h"
#include "streams/tensor_layout.h"

using namespace lstm_ort::streams;

namespace {

TensorLayout FloatLayout(std::vector<int64_t> shape, int axis) {
  TensorLayout t;
  t.type = 1;
  t.elem_size = 4;
  t.shape = std::move(shape);
  t.batch_axis = axis;
  return t;
}

// The fake model: one step input x [1, W] (batch axis 0), one carried state [1, W]; outputs
// y = x + state and the new state. A step whose x[0] is NaN makes the whole call fail.
constexpr int kWidth = 3;

class FakeRunner : public CallRunner {
 public:
  explicit FakeRunner(bool pads = false) : pads_(pads) {}
  bool PadsBatches() const override { return pads_; }
  void SetStateLayouts(const std::vector<TensorLayout>& states) override { slots_ = std::make_unique<HostSlots>(states); }
  int64_t AllocateSlot() override { return slots_->Allocate(); }
  void FreeSlot(int64_t slot) override { slots_->Free(slot); }
  void WriteState(int64_t slot, const std::vector<const void*>& values) override {
    if (!values.empty() && values[0]) std::memcpy(slots_->Row(0, slot), values[0], kWidth * sizeof(float));
  }
  void ReadState(int64_t slot, std::vector<std::vector<char>>* values) override {
    const char* row = slots_->Row(0, slot);
    values->assign(1, std::vector<char>(row, row + kWidth * sizeof(float)));
  }
  std::shared_ptr<void> Run(const CallInputs& in, std::vector<CallOutput>* outputs) override {
    const int64_t n = static_cast<int64_t>(in.slots->size());
    const float* x = static_cast<const float*>(in.data[0]);
    {
      std::unique_lock<std::mutex> lock(mu_);
      threads_.push_back(std::this_thread::get_id());
      alone_.push_back(in.alone);
      batches_.push_back(n);
      if (x[1] == kHeld) {  // a call held in flight until Release
        ++held_;
        cv_.notify_all();
        cv_.wait(lock, [this] { return released_; });
      }
    }
    for (int64_t i = 0; i < n; ++i)
      if (std::isnan(x[i * kWidth])) throw std::runtime_error("a NaN step");
    auto out = std::make_shared<std::vector<float>>(2 * n * kWidth);
    for (int64_t i = 0; i < n; ++i) {
      float* state = reinterpret_cast<float*>(slots_->Row(0, (*in.slots)[i]));
      for (int k = 0; k < kWidth; ++k) {
        (*out)[i * kWidth + k] = x[i * kWidth + k] + state[k];
        state[k] += x[i * kWidth + k];
        (*out)[n * kWidth + i * kWidth + k] = state[k];
      }
    }
    outputs->assign({{out->data(), {n, kWidth}, 1, 4}, {out->data() + n * kWidth, {n, kWidth}, 1, 4}});
    return out;
  }
  // Calls whose first step has x[1] == kHeld stay in flight until Release.
  static constexpr float kHeld = 99;
  void WaitUntilHeld() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [this] { return held_ > 0; });
  }
  void Release() {
    std::lock_guard<std::mutex> lock(mu_);
    released_ = true;
    cv_.notify_all();
  }
  std::vector<std::thread::id> threads() {
    std::lock_guard<std::mutex> lock(mu_);
    return threads_;
  }
  std::vector<int64_t> batches() {
    std::lock_guard<std::mutex> lock(mu_);
    return batches_;
  }
  int held() {
    std::lock_guard<std::mutex> lock(mu_);
    return held_;
  }
  std::vector<bool> alone() {
    std::lock_guard<std::mutex> lock(mu_);
    return alone_;
  }

 private:
  bool pads_ = false;
  std::unique_ptr<HostSlots> slots_;
  std::mutex mu_;
  std::condition_variable cv_;
  int held_ = 0;
  bool released_ = false;
  std::vector<std::thread::id> threads_;
  std::vector<bool> alone_;
  std::vector<int64_t> batches_;
};

struct Fixture {
  explicit Fixture(EngineConfig config = {}, bool pads = false) {
    auto runner = std::make_unique<FakeRunner>(pads);
    fake = runner.get();
    engine = std::make_unique<Engine>(config, std::move(runner), [this](std::vector<Step*>& steps) {
      std::lock_guard<std::mutex> lock(mu);
      for (Step* s : steps) handed_back.emplace_back(s);
    });
    engine->SetStateLayouts({FloatLayout({1, kWidth}, -1)});
    GroupSpec spec;
    spec.inputs = {FloatLayout({1, kWidth}, 0)};
    spec.state_axes = {0};
    spec.output_axes = {0, 0};
    spec.output_rows = {1, 1};
    spec.limit = 64;
    group = engine->AddGroup(spec);
  }
  std::unique_ptr<Step> MakeStep(int64_t stream, const float* x) {
    auto step = std::make_unique<Step>();
    step->stream_id = stream;
    step->group = engine->group(group);
    step->submitted = Now();
    step->feeds.reset(new char[kWidth * sizeof(float)]);
    std::memcpy(step->feeds.get(), x, kWidth * sizeof(float));
    return step;
  }
  // One step, waited for: its y.
  std::vector<float> StepOne(int64_t stream, const float* x, Failure* failure = nullptr) {
    auto step = MakeStep(stream, x);
    Waiter w;
    w.remaining = 1;
    step->waiter = &w;
    engine->Enqueue({step.get()});
    engine->Wait(w);
    if (failure) *failure = step->failure;
    if (step->failure != Failure::kNone) return {};
    const float* y = reinterpret_cast<const float*>(step->result.block.get());
    return std::vector<float>(y, y + kWidth);
  }
  FakeRunner* fake = nullptr;
  std::unique_ptr<Engine> engine;
  int group = 0;
  std::mutex mu;
  std::vector<std::unique_ptr<Step>> handed_back;
};

}  // namespace

TEST(streams_stack_and_unstack_round_trip_on_a_middle_axis) {
  TensorLayout t = FloatLayout({2, 1, 3}, 1);  // [D, B, H]: the batch in the middle
  std::vector<std::vector<float>> rows(4, std::vector<float>(6));
  for (int i = 0; i < 4; ++i)
    for (int k = 0; k < 6; ++k) rows[i][k] = static_cast<float>(10 * i + k);
  std::vector<const void*> src;
  for (auto& r : rows) src.push_back(r.data());
  std::vector<float> stacked(24);
  Stack(t, src.data(), 4, stacked.data());
  CHECK(t.Stacked(4) == (std::vector<int64_t>{2, 4, 3}));
  CHECK_EQ(stacked[(1 * 4 + 2) * 3 + 1], rows[2][1 * 3 + 1]);  // [d=1, b=2, h=1]
  std::vector<std::vector<float>> back(4, std::vector<float>(6, -1));
  std::vector<void*> dst;
  for (auto& r : back) dst.push_back(r.data());
  Unstack(t, stacked.data(), 4, dst.data());
  CHECK(back == rows);
}

TEST(streams_output_layout_refuses_a_batch_that_does_not_fit) {
  CHECK(OutputLayout({5, 6, 7}, 1, 4, 1, 2, 3).shape == (std::vector<int64_t>{5, 2, 7}));
  CHECK_THROWS_MESSAGE(OutputLayout({5, 7, 7}, 1, 4, 1, 2, 3), "an output has 7 on its batch axis for 3 streams of 2 rows");
}

TEST(streams_call_cost_fits_fixed_and_per_step_costs) {
  CallCost cost;
  for (int r = 0; r < 20; ++r)
    for (int n : {1, 2, 4, 8}) cost.Record(n, 20e-6 + 5e-6 * n);
  CHECK(std::abs(cost.Fixed() - 20e-6) < 1e-7);
  CHECK(std::abs(cost.PerStep() - 5e-6) < 1e-8);
  CallCost one_size;
  one_size.Record(1, 30e-6);
  CHECK(std::abs(one_size.Predict(1) - 30e-6) < 1e-9);  // the prior splits the one size seen
}

TEST(streams_call_cost_counts_a_held_up_call_at_most_twice_its_prediction) {
  CallCost cost;
  for (int r = 0; r < 20; ++r) cost.Record(1, 50e-6);
  for (int r = 0; r < 5; ++r) cost.Record(1, 5e-3);  // preempted: 100x the usual call
  CHECK(cost.Predict(1) < 70e-6);                     // unclipped, the fit would read ~1.2 ms
  for (int r = 0; r < 400; ++r) cost.Record(1, 200e-6);  // a lasting change: the fit follows
  CHECK(cost.Predict(1) > 190e-6 && cost.Predict(1) < 201e-6);
}

TEST(streams_company_wait_only_where_calls_cannot_keep_up) {
  CallCost cost;
  for (int r = 0; r < 20; ++r)
    for (int n : {1, 2, 4, 8}) cost.Record(n, 20e-6 + 5e-6 * n);
  // 10k steps/s against calls of 1 step at 25 us: they keep up, run now.
  CHECK_EQ(CompanyWait(cost, 1e4, 1, 64, 1, 1e-3), 0.0);
  // 100k steps/s: calls of 1 serve 40k/s; size n keeps up where n (1 - 0.5) >= 2: n = 4, 3 more
  // arrivals away (30 us).
  const double w = CompanyWait(cost, 1e5, 1, 64, 1, 1e-3);
  CHECK(w > 30e-6 - 1e-9 && w < 40e-6 + 1e-9);  // 4 steps (5 where the fit rounds up)
  CHECK_EQ(CompanyWait(cost, 1e5, 1, 64, 1, 10e-6), 10e-6);  // the cap
  CHECK_EQ(CompanyWait(CallCost(), 1e9, 1, 64, 1, 1e-3), 0.0);  // nothing measured yet: run now
}

TEST(streams_a_submitter_runs_alone_only_without_company) {
  CallCost cost;
  cost.Record(1, 40e-6);  // a call of one step: 40 us
  CHECK(SubmitterRunsAlone(cost, 20000, -1));            // 20k steps/s: 0.8 expected in a call
  CHECK(SubmitterRunsAlone(cost, 8000, 500e-6));         // its own last step 0.5 ms ago
  CHECK(!SubmitterRunsAlone(cost, 30000, -1));           // 1.2 expected: the workers batch them
  CHECK(!SubmitterRunsAlone(cost, 100, 50e-6));          // its thread is bursting (last step 50 us ago)
  CHECK(!SubmitterRunsAlone(CallCost(), 0, -1));         // nothing measured yet
  CHECK(SubmitterRunsAlone(cost, 15000, -1, true));      // beside a call in flight: 0.6 expected
  CHECK(!SubmitterRunsAlone(cost, 20000, -1, true));     // 0.8: the steps queue behind that call
}

TEST(streams_returning_callers_are_waited_for_only_while_cheaper_than_a_call) {
  // think 10 us, call fixed cost 20 us: wait until 2 x think after the latest result
  CHECK(std::abs(ReturningWait(3, 1.0, 10e-6, 20e-6, 2, 64, 1.0 + 5e-6, 1e-3) - 15e-6) < 1e-12);
  CHECK_EQ(ReturningWait(3, 1.0, 30e-6, 20e-6, 2, 64, 1.0, 1e-3), 0.0);  // slower than a call
  CHECK_EQ(ReturningWait(0, 1.0, 10e-6, 20e-6, 2, 64, 1.0, 1e-3), 0.0);  // nobody to wait for
  CHECK_EQ(ReturningWait(3, 1.0, 10e-6, 20e-6, 64, 64, 1.0, 1e-3), 0.0);  // full already
  // Worth its wait: 4 ready wait 38 us for 4 returning, saving a call of 40 us fixed cost; not 48 us.
  CHECK(std::abs(ReturningWait(4, 1.0, 19e-6, 40e-6, 4, 64, 1.0, 1e-3) - 38e-6) < 1e-12);
  CHECK_EQ(ReturningWait(4, 1.0, 24e-6, 40e-6, 4, 64, 1.0, 1e-3), 0.0);
  CHECK(ReturningWait(8, 1.0, 24e-6, 40e-6, 4, 64, 1.0, 1e-3) > 0);  // more company repays it
  Callers callers;
  const std::thread::id a = std::this_thread::get_id(), b{};
  callers.Submitted(a, 1.0);
  callers.Done(a, 1.0001);
  callers.Submitted(a, 1.00012, /*waits=*/true);  // back 20 us after its result
  CHECK(std::abs(callers.ThinkTime() - 20e-6) < 1e-9);
  CHECK(!callers.OthersLately(a, 1.0002));
  callers.Submitted(b, 1.0002);
  CHECK(callers.OthersLately(a, 1.0003));
  CHECK(!callers.OthersLately(a, 1.1));  // long ago
  callers.Done(b, 1.0004);
  double latest = 0;
  CHECK_EQ(callers.Returning(1.0005, &latest), 1);
  CHECK_EQ(latest, 1.0004);
  CHECK_EQ(callers.Lately(1.0005), 2);
  CHECK_EQ(callers.Lately(1.1), 1);  // a waits for its step from 1.00012 (a long call); b is done
  callers.Done(a, 1.1);
  CHECK_EQ(callers.Lately(1.2), 0);
}

TEST(streams_a_lone_caller_runs_its_own_steps) {
  Fixture f;
  const int64_t s = f.engine->Open({});
  const float x[kWidth] = {1, 2, 3};
  for (int r = 1; r <= 5; ++r) {
    const std::vector<float> y = f.StepOne(s, x);
    CHECK_EQ(y[2], 3.0f * r);  // x + the state so far (r - 1) x
  }
  // All but perhaps the first: a worker just started looks at the queue once before it sleeps.
  const std::vector<std::thread::id> threads = f.fake->threads();
  for (size_t k = 1; k < threads.size(); ++k) CHECK(threads[k] == std::this_thread::get_id());
}

TEST(streams_submits_spread_in_time_run_on_the_submitting_thread) {
  Fixture f;
  const int64_t s = f.engine->Open({});
  const float x[kWidth] = {1, 0, 0};
  f.StepOne(s, x);  // a measured call
  int led = 0;
  for (int r = 0; r < 10; ++r) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    auto step = f.MakeStep(s, x);
    Step* raw = step.release();
    if (f.engine->Enqueue({raw}, true)) {
      f.engine->Lead();
      ++led;
      std::lock_guard<std::mutex> lock(f.mu);  // done when Lead returns, on this thread
      CHECK(!f.handed_back.empty() && f.handed_back.back().get() == raw);
      CHECK(f.fake->threads().back() == std::this_thread::get_id());
    }
  }
  CHECK_EQ(led, 10);
  f.engine->Shutdown(true);
  std::lock_guard<std::mutex> lock(f.mu);
  CHECK_EQ(f.handed_back.size(), static_cast<size_t>(10));
  const float* y = reinterpret_cast<const float*>(f.handed_back.back()->result.block.get());
  CHECK_EQ(y[0], 11.0f);  // x + the state of the 10 steps before it
}

// A submitter with a call slot of its own (the CPU's) runs its step on its thread while another
// call is in flight, as a plain `run` from that thread would, instead of queueing behind it; an
// engine without one queues it for the workers, and so does any engine for a step whose stream
// has a step in flight.
static void SubmitBesideACallInFlight(int submitter_calls) {
  EngineConfig config;
  config.submitter_calls = submitter_calls;
  Fixture f(config);
  const int64_t busy = f.engine->Open({}), other = f.engine->Open({});
  const float x[kWidth] = {1, 0, 0}, held[kWidth] = {1, FakeRunner::kHeld, 0};
  f.StepOne(other, x);  // a measured call
  std::this_thread::sleep_for(std::chrono::milliseconds(2));
  f.engine->Enqueue({f.MakeStep(busy, held).release()});  // the worker's call, held in flight
  f.fake->WaitUntilHeld();
  std::this_thread::sleep_for(std::chrono::milliseconds(2));
  CHECK(!f.engine->Enqueue({f.MakeStep(busy, x).release()}, true));  // its stream is busy: queued
  Step* mine = f.MakeStep(other, x).release();
  const bool leads = f.engine->Enqueue({mine}, true);
  CHECK_EQ(leads, submitter_calls > 0);
  if (leads) {
    f.engine->Lead();
    std::lock_guard<std::mutex> lock(f.mu);  // done when Lead returns, on this thread, beside the held call
    CHECK(!f.handed_back.empty() && f.handed_back.back().get() == mine);
    CHECK(f.fake->threads().back() == std::this_thread::get_id());
  }
  f.fake->Release();
  f.engine->Shutdown(true);
  std::lock_guard<std::mutex> lock(f.mu);
  CHECK_EQ(f.handed_back.size(), static_cast<size_t>(3));
  for (const auto& step : f.handed_back) CHECK(step->failure == Failure::kNone);
}

TEST(streams_a_submitter_with_a_slot_runs_beside_a_call_in_flight) { SubmitBesideACallInFlight(1); }
TEST(streams_a_submitter_without_a_slot_queues_behind_a_call_in_flight) { SubmitBesideACallInFlight(0); }

// Two threads stepping, on an engine whose submitters have a call slot of their own (the CPU's):
// the second leads its own call on its thread while the first's is in flight, as its plain `run`
// would, instead of queueing behind it for a worker; that call is not the engine's alone (it runs
// on the one-thread session). Without the slot it waits for the call in flight.
static void TwoCallersEachLeadTheirOwnCall(int submitter_calls) {
  EngineConfig config;
  config.submitter_calls = submitter_calls;
  Fixture f(config);
  const int64_t first = f.engine->Open({}), second = f.engine->Open({});
  const float x[kWidth] = {1, 0, 0}, held[kWidth] = {1, FakeRunner::kHeld, 0};
  std::thread holder([&] { f.StepOne(first, held); });
  f.fake->WaitUntilHeld();  // the first caller's call, in flight on its thread
  std::atomic<bool> done{false};
  std::thread::id stepper;
  std::thread other([&] {
    stepper = std::this_thread::get_id();
    f.StepOne(second, x);
    done = true;
  });
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(50);  // within kRescueSeconds
  while (!done && std::chrono::steady_clock::now() < until) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  CHECK_EQ(done.load(), submitter_calls > 0);  // done beside the held call, or still queued behind it
  if (submitter_calls > 0) {
    CHECK(f.fake->threads().back() == stepper);
    CHECK(!f.fake->alone().back());
  }
  f.fake->Release();
  holder.join();
  other.join();
  CHECK_EQ(f.engine->Stats().rescued, 0);
}

// Three callers (one beyond the CPU's two call slots) each lead a call of their own: all three in
// flight at once. Without a submitter slot one call runs at a time.
static void ThreeCallersInFlight(int submitter_calls) {
  EngineConfig config;
  config.submitter_calls = submitter_calls;
  Fixture f(config);
  const float held[kWidth] = {1, FakeRunner::kHeld, 0};
  std::vector<int64_t> ids;
  for (int c = 0; c < 3; ++c) ids.push_back(f.engine->Open({}));
  std::vector<std::thread> callers;
  for (int c = 0; c < 3; ++c) callers.emplace_back([&, c] { f.StepOne(ids[c], held); });
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(50);  // within kRescueSeconds
  while (f.fake->held() < 3 && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  CHECK_EQ(f.fake->held(), submitter_calls > 0 ? 3 : 1);
  f.fake->Release();
  for (auto& t : callers) t.join();
  CHECK_EQ(f.engine->Stats().rescued, 0);
}

TEST(streams_three_callers_each_lead_their_own_call_given_a_slot) { ThreeCallersInFlight(1); }
TEST(streams_three_callers_take_turns_without_a_slot) { ThreeCallersInFlight(0); }

TEST(streams_two_callers_each_lead_their_own_call_given_a_slot) { TwoCallersEachLeadTheirOwnCall(1); }
TEST(streams_two_callers_queue_behind_a_call_without_a_slot) { TwoCallersEachLeadTheirOwnCall(0); }

// A call of several callers' steps wakes them one after another (the finisher wakes the first and
// each woken caller the next as it leaves): every caller returns with its own result, and none is
// left to the safety net (a lost wake-up of a done caller counts as rescued).
TEST(streams_every_caller_of_a_call_wakes) {
  EngineConfig config;
  config.callers_wake_in_turn = true;
  Fixture f(config);
  constexpr int kCallers = 6;
  std::vector<int64_t> ids;
  for (int s = 0; s <= kCallers; ++s) ids.push_back(f.engine->Open({}));
  const float held[kWidth] = {1, FakeRunner::kHeld, 0};
  f.engine->Enqueue({f.MakeStep(ids[kCallers], held).release()});  // the worker's call, held in flight
  f.fake->WaitUntilHeld();
  std::atomic<int> wrong{0}, queued{0};
  std::vector<std::thread> callers;
  for (int c = 0; c < kCallers; ++c)
    callers.emplace_back([&, c] {
      const float x[kWidth] = {static_cast<float>(c), 1, 0};
      auto step = f.MakeStep(ids[c], x);
      Waiter w;
      w.remaining = 1;
      step->waiter = &w;
      f.engine->Enqueue({step.get()});
      ++queued;
      f.engine->Wait(w);
      const float* y = reinterpret_cast<const float*>(step->result.block.get());
      if (step->failure != Failure::kNone || y[0] != c || y[1] != 1) ++wrong;
    });
  while (queued.load() < kCallers) std::this_thread::yield();  // all queued behind the held call
  f.fake->Release();
  for (auto& t : callers) t.join();
  CHECK_EQ(wrong.load(), 0);
  const std::vector<int64_t> batches = f.fake->batches();
  CHECK_EQ(batches.size(), static_cast<size_t>(2));  // the held call, then one of all six
  CHECK_EQ(batches.back(), static_cast<int64_t>(kCallers));
  CHECK_EQ(f.engine->Stats().rescued, 0);
}

static void ManyThreadsEachStreamAsAlone(bool pads, bool in_turn = false) {
  EngineConfig config;
  config.max_wait = 0.0005;
  config.callers_wake_in_turn = in_turn;
  Fixture f(config, pads);
  constexpr int kStreams = 24, kThreads = 6, kSteps = 40;
  std::vector<int64_t> ids;
  for (int s = 0; s < kStreams; ++s) ids.push_back(f.engine->Open({}));
  std::atomic<int> wrong{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      for (int r = 0; r < kSteps; ++r)
        for (int s = t; s < kStreams; s += kThreads) {
          const float x[kWidth] = {static_cast<float>(s), 1, static_cast<float>(r)};
          const std::vector<float> y = f.StepOne(ids[s], x);
          // state after r steps: (r s, r, r (r - 1) / 2); y = x + that
          if (y.size() != kWidth || y[0] != s * (r + 1.0f) || y[1] != r + 1.0f || y[2] != r + r * (r - 1) / 2.0f)
            ++wrong;
        }
    });
  for (auto& t : threads) t.join();
  CHECK_EQ(wrong.load(), 0);
  int batched = 0;
  for (int64_t n : f.fake->batches()) {
    batched += n > 1;
    if (pads) CHECK((n & (n - 1)) == 0);  // padded to a power of two
  }
  CHECK(batched > 0);  // several threads' steps shared calls
  CHECK_EQ(f.engine->Stats().rescued, 0);
}

TEST(streams_many_threads_each_stream_as_alone) { ManyThreadsEachStreamAsAlone(false); }
TEST(streams_many_threads_woken_in_turn_each_stream_as_alone) { ManyThreadsEachStreamAsAlone(false, true); }

// Calls padded to their batch-size bucket (a runner on CUDA): the padded rows' results and state
// go nowhere a stream sees.
TEST(streams_padded_calls_each_stream_as_alone) { ManyThreadsEachStreamAsAlone(true); }

TEST(streams_batch_buckets) {
  // powers of two; below a precision bound, the last bucket is the bound minus one
  const int cases[][3] = {{1, 0, 1},     {3, 0, 4},     {129, 0, 256},   {129, 256, 255}, {255, 256, 255},
                          {256, 256, 256}, {300, 256, 512}, {100, 200, 128}, {150, 200, 199}, {2, 3, 2}};
  for (const auto& c : cases) CHECK_EQ(BatchBucket(c[0], c[1]), c[2]);
  CHECK_EQ(PaddedRows(100, 256, 256, 1024), 255);  // a held bucket at or past the bound: just below it
  CHECK_EQ(PaddedRows(100, 128, 0, 1024), 128);    // the held bucket
  CHECK_EQ(PaddedRows(300, 0, 256, 1024), 512);
  CHECK_EQ(PaddedRows(300, 0, 256, 400), 400);     // never past the call's limit
  CHECK_EQ(PaddedRows(7, 0, 0, 5), 7);             // never fewer rows than steps
  // every call size of 1-1024 runs one of few shapes (powers of two and the bound minus one), on
  // its own side of the precision bound
  for (int bound : {0, 200, 256}) {
    std::vector<int> shapes;
    for (int n = 1; n <= 1024; ++n) {
      const int rows = PaddedRows(n, 0, bound, 1024);
      CHECK(rows >= n);
      if (bound) CHECK((n < bound) == (rows < bound));
      if (std::find(shapes.begin(), shapes.end(), rows) == shapes.end()) shapes.push_back(rows);
    }
    CHECK(shapes.size() <= 12);
  }
}

TEST(streams_call_limit_below_the_precision_bound) {
  CHECK_EQ(CallLimit(256, 256, 256, 1000), 255);  // max_batch = the bound: never past it
  CHECK_EQ(CallLimit(300, 0, 256, 1000), 255);    // calls past it would be barely larger
  CHECK_EQ(CallLimit(1024, 128, 256, 300), 255);  // calls stay below the bound...
  CHECK_EQ(CallLimit(1024, 128, 256, 510), 1024); // ...unless a backlog fills two of them
  CHECK_EQ(CallLimit(1024, 512, 256, 10), 1024);  // calls past the bound stay past it
  CHECK_EQ(CallLimit(128, 64, 256, 1000), 128);   // the bound beyond the limit: nothing to keep below
  CHECK_EQ(CallLimit(1024, 0, 0, 1000), 1024);    // no bound
}

TEST(streams_a_failing_step_fails_alone_and_keeps_its_state) {
  Fixture f;
  const int64_t good = f.engine->Open({}), bad = f.engine->Open({});
  const float x[kWidth] = {1, 1, 1}, nan[kWidth] = {NAN, 0, 0};
  auto a = f.MakeStep(good, x), b = f.MakeStep(bad, nan), c = f.MakeStep(good, x);
  Waiter w;
  w.remaining = 3;
  for (Step* s : {a.get(), b.get(), c.get()}) s->waiter = &w;
  f.engine->Enqueue({a.get(), b.get(), c.get()});
  f.engine->Wait(w);
  CHECK(a->failure == Failure::kNone && c->failure == Failure::kNone);
  CHECK(b->failure == Failure::kStep);
  CHECK(b->message.find("NaN") != std::string::npos);
  CHECK_EQ(reinterpret_cast<const float*>(c->result.block.get())[0], 2.0f);  // in order after a
  std::vector<std::vector<char>> state;
  f.engine->ReadState(bad, &state);
  CHECK_EQ(reinterpret_cast<const float*>(state[0].data())[0], 0.0f);  // untouched
  Failure again = Failure::kNone;
  const std::vector<float> y = f.StepOne(bad, x, &again);
  CHECK(again == Failure::kNone);
  CHECK(y.size() == kWidth && y[0] == 1.0f);  // and usable
}

TEST(streams_close_fails_queued_steps_and_frees_the_stream) {
  Fixture f;
  const int64_t s = f.engine->Open({});
  const float x[kWidth] = {1, 1, 1};
  std::vector<std::unique_ptr<Step>> steps;
  std::vector<Step*> raw;
  for (int k = 0; k < 50; ++k) {  // handed back through the completion: none is waited for
    steps.push_back(f.MakeStep(s, x));
    raw.push_back(steps.back().release());
  }
  f.engine->Enqueue(raw);
  f.engine->Close(s);
  CHECK_THROWS_MESSAGE(f.engine->Close(s), "stream 1 is not open");
  f.engine->Shutdown(true);
  std::lock_guard<std::mutex> lock(f.mu);
  CHECK_EQ(f.handed_back.size(), static_cast<size_t>(50));
  bool closed_seen = false, ran_after_closed = false;
  for (const auto& step : f.handed_back) {
    if (step->failure == Failure::kClosed) closed_seen = true;
    else if (closed_seen) ran_after_closed = true;
  }
  CHECK(closed_seen && !ran_after_closed);
  CHECK_EQ(f.engine->open_streams(), static_cast<size_t>(0));
}

TEST(streams_shutdown_runs_what_was_queued_and_refuses_more) {
  Fixture f;
  const int64_t s = f.engine->Open({});
  const float x[kWidth] = {1, 1, 1};
  auto step = f.MakeStep(s, x);
  f.engine->Enqueue({step.release()});
  f.engine->Shutdown(true);
  {
    std::lock_guard<std::mutex> lock(f.mu);
    CHECK_EQ(f.handed_back.size(), static_cast<size_t>(1));
    CHECK(f.handed_back[0]->failure == Failure::kNone);
  }
  auto late = f.MakeStep(s, x);
  CHECK_THROWS_MESSAGE(f.engine->Enqueue({late.get()}), "the batcher is shut down");
  CHECK_THROWS_MESSAGE(f.engine->Open({}), "the batcher is shut down");
}
