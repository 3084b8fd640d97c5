// The native step path of StreamBatcher (docs/streams.md): the stream table, per-stream queues,
// grouping by kind of step, stacking feeds, the call, splitting outputs and waking the callers,
// with no Python and no GIL.
//
// Who runs a call: the thread that steps runs it itself where the engine is idle (no call in
// flight), no other caller waits and no other thread stepped in the last 5 ms, taking with its own
// step every step of its kind queued then: one client alone runs on its own thread, as a plain
// `run` would, with no hand-over; on the CPU so do a few threads stepping together, each in a call
// of its own (kOwnCallsBeyondSlots). A step submitted for a future runs on the submitting thread
// where the arrivals make company during its call unlikely (SubmitterRunsAlone) and a call slot is
// free: the engine idle, or on the CPU (EngineConfig::submitter_calls) one call beside those in
// flight, as that thread's plain `run` would be: steps spread in time do not pay a hand-over each,
// nor wait behind another stream's call. Other steps that arrive while a call runs queue; the
// engine's worker threads (one per call slot) take them, each call every step of a kind queued by
// then (continuous batching), and chain call after call without sleeping while steps wait, so a
// busy engine never pays a thread hand-over per call. (Callers taking turns to lead a busy engine,
// each waking the next, measured 34k steps/s where one chaining worker made 58k: g2p-id decoder, 8
// client threads, 2 cores.) A worker waits for more steps only where the cost model
// (cost_model.h) says calls of the size at hand cannot keep up with the arrivals, or for callers
// between two steps that come back sooner than the fixed cost of the call their steps would
// otherwise need (callers.h); `max_wait` caps that.
#pragma once

#include <array>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "call_runner.h"
#include "callers.h"
#include "cost_model.h"
#include "tensor_layout.h"

namespace lstm_ort::streams {

double Now();  // seconds, steady clock

enum class Failure : uint8_t { kNone, kStep, kClosed, kShutDown };

// An error of the engine's API (nothing was queued): the binding raises the matching Python error.
struct EngineError : std::runtime_error {
  EngineError(Failure f, const std::string& what) : std::runtime_error(what), failure(f) {}
  Failure failure;
};

// What one kind of step is (shapes, and the values of the inputs without a batch axis): found by
// the Python analysis, registered once.
struct GroupSpec {
  // The model's step inputs, in its order: one stream's layout, batch axis -1 where the input has
  // none. An input shared by the group's steps (no batch axis, in a kind that batches) has its
  // value here; the others come with each step.
  std::vector<TensorLayout> inputs;
  std::vector<bool> shared;
  std::vector<std::vector<char>> shared_values;
  std::vector<int> state_axes;                    // each carried input's batch axis (-1: one stream a call)
  std::vector<int> output_axes;                   // each output's batch axis (-1: the same for every stream)
  std::vector<int64_t> output_rows;               // one stream's extent on it
  int limit = 1;                                  // steps per call at most (1: one stream per call)
};

struct Group : GroupSpec {
  int id = 0;
  size_t feed_bytes = 0;            // a step's own inputs, concatenated
  std::vector<size_t> feed_offset;  // each one's offset in them
  std::deque<struct Step*> ready;
  CallCost cost;
  ArrivalRate arrivals;
  // The batch-size buckets of its last calls (PaddedSize): a shape change costs ~100 padded calls
  // of silero-vad on an H200 (17 ms against 0.15 ms), so the group shrinks its shape only slowly.
  std::array<int, 256> recent_buckets{};
  size_t recent_next = 0;
};

struct Stream {
  int64_t id = 0, slot = 0;
  std::deque<struct Step*> pending;  // queued behind its step in flight
  int refs = 0;                      // steps of it queued or running
  bool active = false, closed = false;
};

// One caller blocked until its steps are done; it may be asked to lead a call meanwhile.
struct Waiter {
  std::condition_variable cv;
  int remaining = 0;
  bool asked_to_lead = false;
  bool sleeping = false;   // blocked on cv (a caller: a notify wakes it)
  bool waking = false;     // woken as a done caller: it wakes the next as it leaves
  std::thread::id thread;  // the caller's
};

// A step's outputs: one block, each output a slice of it.
struct StepOutputs {
  struct Output {
    size_t offset = 0;
    std::vector<int64_t> shape;
    int32_t type = 0;
    size_t elem_size = 0;
  };
  std::unique_ptr<char[]> block;
  std::vector<Output> outputs;
};

struct Step {
  int64_t stream_id = 0;
  Stream* stream = nullptr;
  Group* group = nullptr;
  double submitted = 0;
  std::unique_ptr<char[]> feeds;  // the batched inputs, copied at submit
  Waiter* waiter = nullptr;       // or
  void* token = nullptr;          // the binding's (a Future): completed through Engine::Completion
  Failure failure = Failure::kNone;
  std::string message;
  StepOutputs result;
};

struct EngineConfig {
  int max_batch = 256;
  double max_wait = 0.002;  // seconds: the cap on waiting for company
  int max_calls = 1;        // calls in flight at once, the workers'
  // Calls a submitter may run on its own thread beside max_calls (SubmitterRunsAlone), so a step
  // that arrives while a call runs does not queue behind it for a worker: what one `run` per
  // stream from the same threads does.
  int submitter_calls = 0;
  // A call's callers wake one another in turn (Engine::WakeNextCaller) instead of all by the thread
  // that finished it: where that thread's time is the engine's (the CPU, whose worker computes the
  // calls), not where it waits for a device.
  bool callers_wake_in_turn = false;
  int workers = 1;          // threads that chain calls while steps queue
  int pad_below = 0;        // padding never reaches this batch size from below it (0: no bound)
};

struct StatsSnapshot {
  int64_t steps = 0, calls = 0, failed = 0;
  int64_t rescued = 0;  // waits the safety net ended (a lost wake-up: a bug)
  double first = -1, last = 0;
  std::vector<double> waits, latencies;  // seconds, the last kWindow steps
};

class Engine {
 public:
  static constexpr size_t kWindow = 1 << 16;
  static constexpr double kRescueSeconds = 0.1;
  using Completion = std::function<void(std::vector<Step*>&)>;

  // `completion` receives the finished steps that carry a token, on the thread that finished
  // them, outside the engine's lock; it owns them from then on.
  Engine(EngineConfig config, std::unique_ptr<CallRunner> runner, Completion completion);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  int AddGroup(GroupSpec spec);
  Group* group(int id);
  void SetStateLayouts(const std::vector<TensorLayout>& states);
  bool has_states() const { return has_states_; }

  int64_t Open(const std::vector<const void*>& initial);
  void Close(int64_t id);
  void ReadState(int64_t id, std::vector<std::vector<char>>* values);
  size_t open_streams();
  bool is_open(int64_t id);

  // Queues steps (their stream_id, group, submitted and feeds set), in order per stream: all or
  // none (EngineError: a stream not open, or shut down). Steps with a token are owned by the engine
  // until completion hands them back. True where the caller should run them itself with Lead: one
  // step with a token whose stream is idle, `may_lead`, a call slot free for it (SubmitterMayLead)
  // and no company to expect (SubmitterRunsAlone).
  bool Enqueue(const std::vector<Step*>& steps, bool may_lead = false);
  // Runs a call of what is ready on this thread, if a submitter's call slot is still free (else
  // the workers do).
  void Lead();
  // Returns when every step of `waiter` is done, leading calls meanwhile where it may.
  void Wait(Waiter& waiter);
  // One call of these idle streams on inputs already stacked (step_batch): the outputs as the
  // call gives them. EngineError for a stream that is closed or busy; a failed call: kStep.
  std::shared_ptr<void> RunStacked(const std::vector<int64_t>& ids, int group, CallInputs inputs,
                                   std::vector<CallOutput>* outputs);

  void Shutdown(bool wait);
  bool stopping();
  StatsSnapshot Stats();
  void ResetStats();

 private:
  struct Batch {
    Group* group = nullptr;
    std::vector<Step*> steps;
    int64_t padded = 0;  // rows the call runs (its steps, padded to the group's bucket)
    bool alone = false;  // led by a caller with the engine to itself (CallerLeads): CallInputs::alone
  };
  int PaddedSize(Group& g, int n, int limit);
  static int HeldBucket(const Group& g);  // the largest batch-size bucket of its last calls
  // `may_wait`: the call may wait for company (CompanyWait, ReturningWait; *wake_at then).
  bool TakeBatch(Batch* batch, double* wake_at, int calls_allowed, bool may_wait = true);
  int SubmitterCallLimit() const;  // calls in flight, a submitter's own included, that it may lead beside
  bool SubmitterMayLead() const;
  void RunBatch(Batch& batch);
  bool RunCall(Group& g, const std::vector<Step*>& steps, int64_t padded, std::string* error, bool alone = false);
  std::vector<Step*> Finish(Batch& batch, double started, double finished);
  void Complete(Step* step, std::vector<Step*>* handed_back);
  void Fail(Step* step, Failure failure, const std::string& message, std::vector<Step*>* handed_back);
  void Release(Stream* stream);
  void Unref(Stream* stream);
  void WakeLeader();
  bool WakeNextCaller();
  // Whether a waiting caller runs a call of what is ready on its own thread: where it has the
  // engine to itself, or where the callers lately are few enough for each to lead its own call.
  enum class Leading { kNo, kAlone, kOwnSlot };
  Leading CallerLeads() const;
  // Callers beyond the call slots (SubmitterCallLimit) that still each lead a call of their own.
  // Queued for the workers, or waiting for one another's company, a few callers' steps took turns
  // on one core while the other idled; each in its own call, as one `run` per step from the same
  // threads (2 cores, 96 streams, closed loop, steps/s, queued vs their own calls vs that `run`):
  // 2 clients, g2p-id decoder 17.2-20.6k vs 42.9-56.4k vs 30.4-32.9k; 3 clients, g2p-id 23.4k vs
  // 39.0k vs 25.6-32.9k, torch conv + LSTM 17.0k vs 23.6k vs 19.1-22.4k, silero-vad 14.3k vs 15.4k vs
  // 12.6-13.3k. From 4 clients batching wins (g2p-id 36.9-40.5k vs 39.1k vs 26.4-31.2k).
  static constexpr int kOwnCallsBeyondSlots = 1;
  bool AnyReady() const;
  void Record(const std::vector<double>& submitted, double started, double finished, int failed);
  void WorkerLoop(Waiter* self);
  void HandBack(std::unique_lock<std::mutex>& lock);

  EngineConfig config_;
  std::unique_ptr<CallRunner> runner_;
  Completion completion_;
  std::mutex mu_;
  std::vector<std::unique_ptr<Group>> groups_;
  std::unordered_map<int64_t, Stream*> streams_;
  int64_t next_id_ = 1;
  bool has_states_ = false;
  int running_ = 0;
  bool stopping_ = false;
  bool leader_called_ = false;
  int64_t unfinished_ = 0;  // steps queued and not yet done
  int64_t padding_slot_ = -1;  // the state row padded rows read and write (runners that pad)
  int waiting_callers_ = 0;  // callers blocked in Wait
  Callers callers_;
  std::vector<Step*> handed_back_;  // steps TakeBatch failed, to hand back outside the lock
  // Callers whose steps are done, woken one after another: a call's finish wakes the first and each
  // wakes the next as it leaves Wait, so the worker that chains calls does not pay every wake-up.
  std::deque<Waiter*> done_callers_;
  int waking_ = 0;  // done callers woken and not yet left Wait
  std::vector<Waiter*> idle_workers_;
  std::vector<std::thread> workers_;
  std::vector<std::unique_ptr<Waiter>> worker_waiters_;
  // stats, under mu_
  StatsSnapshot stats_;
  size_t ring_next_ = 0;
};

}  // namespace lstm_ort::streams
