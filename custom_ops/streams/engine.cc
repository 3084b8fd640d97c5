#include "engine.h"

#include <algorithm>
#include <chrono>
#include <cstring>

#include "batch_buckets.h"

namespace lstm_ort::streams {

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

namespace {

std::chrono::steady_clock::time_point Deadline(double t) {
  return std::chrono::steady_clock::time_point(
      std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(t)));
}

std::string ClosedMessage(int64_t id) { return "stream " + std::to_string(id) + " is not open"; }

}  // namespace

Engine::Engine(EngineConfig config, std::unique_ptr<CallRunner> runner, Completion completion)
    : config_(config), runner_(std::move(runner)), completion_(std::move(completion)) {
  config_.max_batch = std::max(config_.max_batch, 1);
  config_.max_calls = std::max(config_.max_calls, 1);
  config_.submitter_calls = std::max(config_.submitter_calls, 0);
  stats_.waits.assign(kWindow, 0);
  stats_.latencies.assign(kWindow, 0);
  for (int k = 0; k < config_.workers; ++k) {
    worker_waiters_.push_back(std::make_unique<Waiter>());
    workers_.emplace_back([this, w = worker_waiters_.back().get()] { WorkerLoop(w); });
  }
}

Engine::~Engine() {
  Shutdown(true);
  for (auto& [id, stream] : streams_) delete stream;
}

int Engine::AddGroup(GroupSpec spec) {
  auto g = std::make_unique<Group>();
  static_cast<GroupSpec&>(*g) = std::move(spec);
  g->feed_offset.resize(g->inputs.size(), 0);
  g->shared.resize(g->inputs.size(), false);
  g->shared_values.resize(g->inputs.size());
  for (size_t k = 0; k < g->inputs.size(); ++k) {
    if (g->shared[k]) continue;
    g->feed_offset[k] = g->feed_bytes;
    g->feed_bytes += g->inputs[k].Bytes();
  }
  std::lock_guard<std::mutex> lock(mu_);
  g->id = static_cast<int>(groups_.size());
  groups_.push_back(std::move(g));
  return groups_.back()->id;
}

Group* Engine::group(int id) {
  std::lock_guard<std::mutex> lock(mu_);
  return id >= 0 && id < static_cast<int>(groups_.size()) ? groups_[id].get() : nullptr;
}

void Engine::SetStateLayouts(const std::vector<TensorLayout>& states) {
  std::lock_guard<std::mutex> lock(mu_);
  if (has_states_) return;
  runner_->SetStateLayouts(states);
  has_states_ = true;
  if (runner_->PadsBatches()) {  // the padded rows' state: a slot of its own, never read back
    padding_slot_ = runner_->AllocateSlot();
    runner_->WriteState(padding_slot_, {});
  }
}

int Engine::PaddedSize(Group& g, int n, int limit) {
  if (!runner_->PadsBatches() || g.limit <= 1) return n;
  g.recent_buckets[g.recent_next++ % g.recent_buckets.size()] = BatchBucket(n, config_.pad_below);
  return PaddedRows(n, HeldBucket(g), config_.pad_below, limit);
}

int Engine::HeldBucket(const Group& g) {
  return *std::max_element(g.recent_buckets.begin(), g.recent_buckets.end());
}

int64_t Engine::Open(const std::vector<const void*>& initial) {
  std::lock_guard<std::mutex> lock(mu_);
  if (stopping_) throw EngineError(Failure::kShutDown, "the batcher is shut down");
  auto* stream = new Stream();
  stream->slot = runner_->AllocateSlot();
  runner_->WriteState(stream->slot, initial);
  stream->id = next_id_++;
  streams_[stream->id] = stream;
  return stream->id;
}

void Engine::Close(int64_t id) {
  std::vector<Step*> handed_back;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = streams_.find(id);
    if (it == streams_.end()) throw EngineError(Failure::kClosed, ClosedMessage(id));
    Stream* stream = it->second;
    streams_.erase(it);
    stream->closed = true;
    std::deque<Step*> dropped;
    dropped.swap(stream->pending);
    const std::string why = "stream " + std::to_string(id) + " was closed before this step ran";
    for (Step* step : dropped) Fail(step, Failure::kClosed, why, &handed_back);
    if (!stream->active) runner_->FreeSlot(stream->slot);
    if (stream->refs == 0) delete stream;
  }
  if (!handed_back.empty()) completion_(handed_back);
}

void Engine::ReadState(int64_t id, std::vector<std::vector<char>>* values) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = streams_.find(id);
  if (it == streams_.end()) throw EngineError(Failure::kClosed, ClosedMessage(id));
  runner_->ReadState(it->second->slot, values);
}

size_t Engine::open_streams() {
  std::lock_guard<std::mutex> lock(mu_);
  return streams_.size();
}

bool Engine::is_open(int64_t id) {
  std::lock_guard<std::mutex> lock(mu_);
  return streams_.count(id) != 0;
}

bool Engine::stopping() {
  std::lock_guard<std::mutex> lock(mu_);
  return stopping_;
}

bool Engine::Enqueue(const std::vector<Step*>& steps, bool may_lead) {
  std::unique_lock<std::mutex> lock(mu_);
  if (stopping_) throw EngineError(Failure::kShutDown, "the batcher is shut down");
  for (Step* step : steps) {
    auto it = streams_.find(step->stream_id);
    if (it == streams_.end()) throw EngineError(Failure::kClosed, ClosedMessage(step->stream_id));
  }
  if (steps.empty()) return false;
  unfinished_ += static_cast<int64_t>(steps.size());
  const std::thread::id me = std::this_thread::get_id();
  const bool waits = std::all_of(steps.begin(), steps.end(), [](const Step* s) { return s->waiter != nullptr; });
  const double now = steps[0]->submitted, own_last = callers_.Submitted(me, now, waits);
  if (steps[0]->waiter) steps[0]->waiter->thread = me;
  bool all_ready = true;  // none queued behind its stream's step in flight
  for (Step* step : steps) {
    Stream* stream = streams_[step->stream_id];
    step->stream = stream;
    ++stream->refs;
    step->group->arrivals.Record(step->submitted);
    if (stream->active) {
      stream->pending.push_back(step);
      all_ready = false;
    } else {
      stream->active = true;
      step->group->ready.push_back(step);
    }
  }
  // A caller alone with an idle engine leads its own call, and so does a submitter whose step
  // expects no company; otherwise a worker takes the steps.
  const bool submitted = std::any_of(steps.begin(), steps.end(), [](const Step* s) { return s->waiter == nullptr; });
  if (submitted) {
    const Group& g = *steps[0]->group;
    // Where submitters have call slots of their own, a thread's burst runs as its plain `run`
    // calls would, one after another on its thread: handed to a worker instead, the second step
    // of a burst of two waited for the worker's wake-up on a contended core (g2p-id open loop,
    // 256 streams every 32 ms, 2 clients on 2 cores: client p99 3.7-4.7 ms against stock's 1.0-1.3).
    const double since_own_last = config_.submitter_calls > 0 || own_last < 0 ? -1 : now - own_last;
    if (may_lead && steps.size() == 1 && all_ready && SubmitterMayLead() &&
        SubmitterRunsAlone(g.cost, g.arrivals.PerSecond(now), since_own_last, /*beside=*/running_ > 0))
      return true;
    WakeLeader();
  } else if (CallerLeads() == Leading::kNo) {
    WakeLeader();
  }
  return false;
}

int Engine::SubmitterCallLimit() const {
  return config_.submitter_calls > 0 ? config_.max_calls + config_.submitter_calls : 1;
}

bool Engine::SubmitterMayLead() const {
  // A worker called and not yet running does not hold the submitter back: the submitter's call takes
  // what it was called for (g2p-id open loop, 256 streams, 2 clients: a third of the steps waited
  // for that worker's wake-up on a contended core, client p99 4.5 ms against stock's 1.2).
  return waiting_callers_ == 0 && running_ < SubmitterCallLimit();
}

void Engine::Lead() {
  std::unique_lock<std::mutex> lock(mu_);
  Batch batch;
  double wake_at = 0;
  const bool took = SubmitterMayLead() && TakeBatch(&batch, &wake_at, SubmitterCallLimit());
  if (!took) WakeLeader();  // another thread got there first, or the steps wait for company: the workers'
  HandBack(lock);
  if (!took) return;
  lock.unlock();
  RunBatch(batch);
}

bool Engine::AnyReady() const {
  for (const auto& g : groups_)
    if (!g->ready.empty()) return true;
  return false;
}

void Engine::WakeLeader() {
  if (leader_called_ || running_ >= config_.max_calls || idle_workers_.empty() || !AnyReady()) return;
  Waiter* w = idle_workers_.back();
  idle_workers_.pop_back();
  w->asked_to_lead = true;
  leader_called_ = true;
  w->cv.notify_one();
}

bool Engine::TakeBatch(Batch* batch, double* wake_at, int calls_allowed, bool may_wait) {
  *wake_at = 0;
  // Steps of streams closed while they waited leave the queue here; a kind left with none of its
  // own is passed over for the next, never parking a worker while other steps wait.
  for (;;) {
    if (running_ >= calls_allowed) return false;
    Group* g = nullptr;
    for (const auto& candidate : groups_)
      if (!candidate->ready.empty() && (!g || candidate->ready.front()->submitted < g->ready.front()->submitted))
        g = candidate.get();
    if (!g) return false;
    const int ready = static_cast<int>(g->ready.size());
    const int limit = runner_->PadsBatches() ? CallLimit(std::min(config_.max_batch, g->limit), HeldBucket(*g),
                                                         config_.pad_below, ready)
                                             : std::min(config_.max_batch, g->limit);
    const int free_slots = std::max(config_.max_calls - running_, 1);
    // Free slots share what is queued, so calls overlap instead of one taking everything.
    const int take = std::min(limit, (ready + free_slots - 1) / free_slots);
    if (may_wait && take == ready && take < limit && !stopping_) {
      const double now = Now();
      const double cap_left = g->ready.front()->submitted + config_.max_wait - now;
      double latest_done = 0;
      const int returning = callers_.Returning(now, &latest_done);
      const double wait =
          std::max(CompanyWait(g->cost, g->arrivals.PerSecond(now), ready, limit, config_.max_calls, cap_left),
                   ReturningWait(returning, latest_done, callers_.ThinkTime(), g->cost.Fixed(), ready, limit, now,
                                 cap_left));
      if (wait > 0) {
        *wake_at = now + wait;
        return false;
      }
    }
    batch->group = g;
    batch->steps.clear();
    while (!g->ready.empty() && static_cast<int>(batch->steps.size()) < take) {
      Step* step = g->ready.front();
      g->ready.pop_front();
      if (step->stream->closed) {  // closed while it waited: its slot is free once nothing runs on it
        Stream* stream = step->stream;
        Fail(step, Failure::kClosed, "stream " + std::to_string(stream->id) + " was closed before this step ran",
             &handed_back_);
        stream->active = false;
        runner_->FreeSlot(stream->slot);
        Unref(stream);
        continue;
      }
      batch->steps.push_back(step);
    }
    if (batch->steps.empty()) continue;
    batch->padded = PaddedSize(*g, static_cast<int>(batch->steps.size()), limit);
    ++running_;
    if (!g->ready.empty()) WakeLeader();  // the rest of the queue for another free slot
    return true;
  }
}

bool Engine::RunCall(Group& g, const std::vector<Step*>& steps, int64_t padded, std::string* error, bool alone) {
  const int64_t real = static_cast<int64_t>(steps.size());
  // Rows past the real steps (a call padded to its batch-size bucket) read zeros and the padding
  // slot's state, and their outputs are dropped.
  const int64_t n = std::max(real, padded);
  CallInputs in;
  std::vector<std::shared_ptr<char>> staging;
  std::vector<const void*> rows(n);
  std::vector<char> zeros(n > real ? g.feed_bytes + 1 : 0, 0);
  for (size_t k = 0; k < g.inputs.size(); ++k) {
    const TensorLayout& layout = g.inputs[k];
    in.types.push_back(layout.type);
    if (g.shared[k]) {
      in.data.push_back(g.shared_values[k].data());
      in.shapes.push_back(layout.shape);
      continue;
    }
    for (int64_t i = 0; i < n; ++i) rows[i] = i < real ? steps[i]->feeds.get() + g.feed_offset[k] : zeros.data();
    if (n == 1) {
      in.data.push_back(rows[0]);
    } else {
      staging.push_back(runner_->Staging(layout.Bytes() * n));
      Stack(layout, rows.data(), n, staging.back().get());
      in.data.push_back(staging.back().get());
    }
    in.shapes.push_back(layout.Stacked(n));
  }
  std::vector<int64_t> slots(n, padding_slot_);
  for (int64_t i = 0; i < real; ++i) slots[i] = steps[i]->stream->slot;
  in.slots = &slots;
  in.state_axes = &g.state_axes;
  in.group = g.id;
  in.alone = alone;
  try {
    std::vector<CallOutput> outs;
    std::shared_ptr<void> keep = runner_->Run(in, &outs);
    // Each step's share of every output, in one block a step.
    std::vector<TensorLayout> layouts;
    size_t step_bytes = 0;
    for (size_t j = 0; j < outs.size(); ++j) {
      const int axis = j < g.output_axes.size() && g.limit > 1 ? g.output_axes[j] : -1;
      const int64_t step_rows = j < g.output_rows.size() ? g.output_rows[j] : 1;
      layouts.push_back(OutputLayout(outs[j].shape, outs[j].type, outs[j].elem_size, axis, step_rows, n));
      step_bytes += layouts.back().Bytes();
    }
    std::vector<void*> dst(n);
    std::vector<char> dropped(n > real ? step_bytes + 1 : 0);
    for (int64_t i = 0; i < real; ++i) {
      StepOutputs& r = steps[i]->result;
      r.block.reset(new char[std::max<size_t>(step_bytes, 1)]);
      r.outputs.clear();
      size_t offset = 0;
      for (const TensorLayout& layout : layouts) {
        r.outputs.push_back({offset, layout.shape, layout.type, layout.elem_size});
        offset += layout.Bytes();
      }
    }
    for (size_t j = 0; j < outs.size(); ++j) {
      const TensorLayout& layout = layouts[j];
      for (int64_t i = 0; i < n; ++i)
        dst[i] = i < real ? steps[i]->result.block.get() + steps[i]->result.outputs[j].offset : dropped.data();
      if (layout.batched()) {
        Unstack(layout, outs[j].data, n, dst.data());
      } else {
        for (int64_t i = 0; i < real; ++i) std::memcpy(dst[i], outs[j].data, layout.Bytes());
      }
    }
    return true;
  } catch (const std::exception& e) {
    *error = e.what();
    return false;
  }
}

void Engine::RunBatch(Batch& batch) {
  Group& g = *batch.group;
  const double started = Now();
  std::string error;
  if (RunCall(g, batch.steps, batch.padded, &error, batch.alone)) {
    g.cost.Record(static_cast<int>(batch.steps.size()), Now() - started);
  } else if (batch.steps.size() == 1) {
    batch.steps[0]->failure = Failure::kStep;
    batch.steps[0]->message = error;
  } else {
    // A failed call: each step alone, so only the bad ones fail (and keep their states).
    for (Step* step : batch.steps) {
      std::string own;
      if (!RunCall(g, {step}, 1, &own)) {
        step->failure = Failure::kStep;
        step->message = own;
      }
    }
  }
  const double finished = Now();
  std::vector<Step*> handed_back;
  {
    std::lock_guard<std::mutex> lock(mu_);
    handed_back = Finish(batch, started, finished);
  }
  if (!handed_back.empty()) completion_(handed_back);
}

std::vector<Step*> Engine::Finish(Batch& batch, double started, double finished) {
  std::vector<Step*> handed_back;
  std::vector<double> submitted;
  int failed = 0;
  --running_;
  for (Step* step : batch.steps) {
    submitted.push_back(step->submitted);
    failed += step->failure != Failure::kNone;
    Stream* stream = step->stream;
    Complete(step, &handed_back);
    Release(stream);
  }
  Record(submitted, started, finished, failed);
  // One caller left to wake (a call of two): the finisher wakes it too, as a hop through the first
  // cost more than the wake-up (g2p-id decoder, 2 client threads: 35.9k -> 41.9k steps/s).
  if (done_callers_.size() == 1) WakeNextCaller();
  WakeLeader();
  return handed_back;
}

void Engine::Complete(Step* step, std::vector<Step*>* handed_back) {
  if (--unfinished_ == 0 && stopping_)
    for (auto& w : worker_waiters_) w->cv.notify_one();  // shut down: the workers may leave
  if (step->waiter) {
    Waiter* w = step->waiter;
    if (--w->remaining == 0) {
      callers_.Done(w->thread, Now());
      if (!config_.callers_wake_in_turn) {
        w->cv.notify_one();
        return;
      }
      done_callers_.push_back(w);
      if (waking_ == 0) WakeNextCaller();
    }
  } else {
    handed_back->push_back(step);
  }
}

void Engine::Fail(Step* step, Failure failure, const std::string& message, std::vector<Step*>* handed_back) {
  step->failure = failure;
  step->message = message;
  Complete(step, handed_back);
}

void Engine::Release(Stream* stream) {
  if (stream->closed) {
    stream->active = false;
    runner_->FreeSlot(stream->slot);
  } else if (!stream->pending.empty()) {
    Step* next = stream->pending.front();
    stream->pending.pop_front();
    next->group->ready.push_back(next);
  } else {
    stream->active = false;
  }
  Unref(stream);
}

void Engine::Unref(Stream* stream) {
  if (--stream->refs == 0 && stream->closed) delete stream;
}

Engine::Leading Engine::CallerLeads() const {
  const double now = Now();
  // Another thread stepping lately means steps will keep coming while a call runs: the workers,
  // who chain calls, serve them better than a caller that leads one call and hands over...
  if (running_ == 0 && !leader_called_ && waiting_callers_ == 0 &&
      !callers_.OthersLately(std::this_thread::get_id(), now))
    return Leading::kAlone;
  // ... unless the callers lately are few (an engine whose submitters have call slots: the CPU's):
  // each then leads a call of its own, as its plain `run` would (kOwnCallsBeyondSlots).
  const int callers = callers_.Lately(now);
  if (config_.submitter_calls > 0 && callers <= SubmitterCallLimit() + kOwnCallsBeyondSlots && running_ < callers)
    return Leading::kOwnSlot;
  return Leading::kNo;
}

void Engine::Wait(Waiter& waiter) {
  std::unique_lock<std::mutex> lock(mu_);
  while (waiter.remaining > 0) {
    // The caller leads an idle engine that no other caller waits on (one stream alone runs on its
    // own thread, as a plain `run`), or a call in a slot of its own (CallerLeads); a busy engine is
    // otherwise the workers', who chain calls without handing over.
    double wake_at = 0;
    if (const Leading lead = CallerLeads(); lead != Leading::kNo) {
      Batch batch;
      const bool alone = lead == Leading::kAlone;
      const bool took = TakeBatch(&batch, &wake_at, alone ? config_.max_calls : running_ + 1, alone);
      batch.alone = alone;
      HandBack(lock);
      if (took) {
        lock.unlock();
        RunBatch(batch);
        lock.lock();
        continue;
      }
    }
    if (waiter.remaining == 0) break;
    // Waiting for company ends at its deadline; any other wait ends when the step is done (or a
    // call ends and the engine falls idle). The cap is a safety net that is never needed: a wait
    // it ends is counted (stats: rescued), and the tests hold that count at zero.
    const double deadline = wake_at > 0 ? wake_at : Now() + kRescueSeconds;
    ++waiting_callers_;
    waiter.sleeping = true;
    const std::cv_status status = waiter.cv.wait_until(lock, Deadline(deadline));
    waiter.sleeping = false;
    --waiting_callers_;
    if (status == std::cv_status::timeout && wake_at <= 0) {
      if (waiter.remaining == 0) {
        ++stats_.rescued;  // its steps were done and its wake-up lost
      } else if (running_ == 0 && AnyReady()) {
        ++stats_.rescued;
        WakeLeader();
      }
    }
  }
  const auto queued = std::find(done_callers_.begin(), done_callers_.end(), &waiter);
  if (queued != done_callers_.end()) done_callers_.erase(queued);  // it saw its steps done unwoken
  if (waiter.waking) {
    waiter.waking = false;
    --waking_;
    WakeNextCaller();
  }
}

// Wakes the first done caller still asleep; one awake sees its steps done without a wake-up. Woken
// by the worker, a call's callers cost it ~19% of its time (the wake-ups' IPIs under KVM), and it
// ran in the slow of the two modes of docs/streams.md in about half the processes: g2p-id decoder,
// 96 streams x 8 client threads, 2 cores, 8 processes each, 30-55k steps/s (median 36k) against
// 51-66k (median 60k) woken one by one.
bool Engine::WakeNextCaller() {
  while (!done_callers_.empty()) {
    Waiter* w = done_callers_.front();
    done_callers_.pop_front();
    if (!w->sleeping) continue;
    w->waking = true;
    ++waking_;
    w->cv.notify_one();
    return true;
  }
  return false;
}

void Engine::WorkerLoop(Waiter* self) {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    Batch batch;
    double wake_at = 0;
    const bool took = TakeBatch(&batch, &wake_at, config_.max_calls);
    HandBack(lock);
    if (self->asked_to_lead) {  // it has looked: another worker may be called now
      self->asked_to_lead = false;
      leader_called_ = false;
    }
    if (took) {
      lock.unlock();
      RunBatch(batch);
      lock.lock();
      continue;
    }
    if (stopping_ && unfinished_ == 0) break;
    idle_workers_.push_back(self);
    if (wake_at > 0) {
      self->cv.wait_until(lock, Deadline(wake_at));
    } else {
      self->cv.wait(lock);
    }
    auto it = std::find(idle_workers_.begin(), idle_workers_.end(), self);
    if (it != idle_workers_.end()) idle_workers_.erase(it);
  }
  WakeLeader();
}

std::shared_ptr<void> Engine::RunStacked(const std::vector<int64_t>& ids, int group_id, CallInputs inputs,
                                         std::vector<CallOutput>* outputs) {
  std::vector<Stream*> streams;
  std::vector<int64_t> slots;
  Group* g = nullptr;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) throw EngineError(Failure::kShutDown, "the batcher is shut down");
    g = groups_.at(group_id).get();
    for (int64_t id : ids) {
      auto it = streams_.find(id);
      if (it == streams_.end()) throw EngineError(Failure::kClosed, ClosedMessage(id));
      if (it->second->active)
        throw EngineError(Failure::kStep,
                          "stream " + std::to_string(id) + " has a step in flight: step_batch takes idle streams");
      streams.push_back(it->second);
    }
    for (Stream* s : streams) {
      s->active = true;
      ++s->refs;
      slots.push_back(s->slot);
    }
  }
  const double started = Now();
  inputs.slots = &slots;
  inputs.state_axes = &g->state_axes;
  inputs.group = group_id;
  std::shared_ptr<void> keep;
  std::string error;
  try {
    keep = runner_->Run(inputs, outputs);
  } catch (const std::exception& e) {
    error = e.what();
  }
  const double finished = Now();
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (Stream* s : streams) Release(s);
    Record(std::vector<double>(streams.size(), started), started, finished, error.empty() ? 0 : static_cast<int>(streams.size()));
    if (error.empty()) g->cost.Record(static_cast<int>(streams.size()), finished - started);
    WakeLeader();
  }
  if (!error.empty()) throw EngineError(Failure::kStep, error);
  return keep;
}

void Engine::HandBack(std::unique_lock<std::mutex>& lock) {
  if (handed_back_.empty()) return;
  std::vector<Step*> steps;
  steps.swap(handed_back_);
  lock.unlock();
  completion_(steps);
  lock.lock();
}

void Engine::Shutdown(bool wait) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
    for (auto& w : worker_waiters_) w->cv.notify_one();
    for (auto& g : groups_)
      if (!g->ready.empty()) WakeLeader();
  }
  if (!wait) return;
  for (std::thread& t : workers_)
    if (t.joinable() && t.get_id() != std::this_thread::get_id()) t.join();
}

void Engine::Record(const std::vector<double>& submitted, double started, double finished, int failed) {
  const int64_t n = static_cast<int64_t>(submitted.size());
  if (stats_.first < 0 && n) stats_.first = *std::min_element(submitted.begin(), submitted.end());
  stats_.last = finished;
  stats_.steps += n - failed;
  stats_.failed += failed;
  stats_.calls += 1;
  for (double t : submitted) {
    stats_.waits[ring_next_ % kWindow] = started - t;
    stats_.latencies[ring_next_ % kWindow] = finished - t;
    ++ring_next_;
  }
}

StatsSnapshot Engine::Stats() {
  std::lock_guard<std::mutex> lock(mu_);
  StatsSnapshot out;
  out.steps = stats_.steps;
  out.calls = stats_.calls;
  out.failed = stats_.failed;
  out.rescued = stats_.rescued;
  out.first = stats_.first;
  out.last = stats_.last;
  const size_t filled = std::min(ring_next_, kWindow);
  out.waits.assign(stats_.waits.begin(), stats_.waits.begin() + filled);
  out.latencies.assign(stats_.latencies.begin(), stats_.latencies.begin() + filled);
  return out;
}

void Engine::ResetStats() {
  std::lock_guard<std::mutex> lock(mu_);
  stats_.steps = stats_.calls = stats_.failed = stats_.rescued = 0;
  stats_.first = -1;
  stats_.last = 0;
  ring_next_ = 0;
}

}  // namespace lstm_ort::streams
