#include "callers.h"

#include <algorithm>

namespace lstm_ort::streams {

namespace {
constexpr double kThinkDecay = 1.0 / 16;
}

Callers::Caller& Callers::Find(std::thread::id who) {
  for (Caller& c : callers_)
    if (c.id == who) return c;
  if (callers_.size() < kTracked) {
    callers_.push_back({who});
    return callers_.back();
  }
  Caller& oldest = *std::min_element(callers_.begin(), callers_.end(), [](const Caller& a, const Caller& b) {
    return std::max(a.submitted, a.done) < std::max(b.submitted, b.done);
  });
  oldest = {who};
  return oldest;
}

double Callers::Submitted(std::thread::id who, double now, bool waits) {
  Caller& c = Find(who);
  c.waits = waits;
  if (c.done > c.submitted && c.done >= 0) {  // back from its last result: a think time
    const double think = now - c.done;
    think_ = samples_++ == 0 ? think : think_ + kThinkDecay * (think - think_);
  }
  const double before = c.submitted;
  c.submitted = now;
  return before;
}

void Callers::Done(std::thread::id who, double now) {
  Caller& c = Find(who);
  c.done = now;
  c.waits = false;
}

bool Callers::OthersLately(std::thread::id me, double now) const {
  for (const Caller& c : callers_)
    if (c.id != me && c.submitted >= now - kLately) return true;
  return false;
}

int Callers::Lately(double now) const {
  int n = 0;
  for (const Caller& c : callers_) n += c.waits || c.submitted >= now - kLately;
  return n;
}

int Callers::Returning(double now, double* latest_done) const {
  int n = 0;
  *latest_done = -1;
  for (const Caller& c : callers_)
    if (c.done > c.submitted && c.done >= now - kLately) {
      ++n;
      *latest_done = std::max(*latest_done, c.done);
    }
  return n;
}

double ReturningWait(int returning, double latest_done, double think, double fixed_cost, int ready, int limit,
                     double now, double cap_left) {
  if (returning <= 0 || ready >= limit || cap_left <= 0 || think <= 0 || think >= fixed_cost) return 0;
  const double wait = std::min(latest_done + 2 * think - now, cap_left);
  // The pipeline's steps per second, (ready + returning) / (wait + t(ready + returning)) against
  // ready / t(ready) with t linear in the batch size, rise only where wait * ready < returning *
  // fixed (g2p-id decoder, 8 client threads, one intra-op thread: 47-48k -> 56-57k steps/s).
  if (wait <= 0 || wait * ready > returning * fixed_cost) return 0;
  return wait;
}

}  // namespace lstm_ort::streams
