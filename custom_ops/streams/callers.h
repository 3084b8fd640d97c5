// The threads that step through the engine (callers): who stepped lately and when each last
// did, whether waiting for its results or submitting for a future; and of those that wait, who is
// between two steps (has its result, is not back yet) and how long a caller takes from its result
// to its next step. In a closed loop (a pool of client threads, each
// stepping as soon as it has its last result) the callers between steps are the company a call
// can wait for: they come back within their think time. Pure bookkeeping: the engine calls it
// under its lock.
#pragma once

#include <thread>
#include <vector>

namespace lstm_ort::streams {

class Callers {
 public:
  static constexpr double kLately = 0.005;  // seconds: a caller that stepped within this is active
  static constexpr size_t kTracked = 64;

  // Returns when `who` submitted its step before this one (-1: never, or no longer tracked).
  // `waits`: it waits for the step (until Done), rather than submitting it for a future.
  double Submitted(std::thread::id who, double now, bool waits = false);
  void Done(std::thread::id who, double now);
  // Another thread than `me` stepped lately.
  bool OthersLately(std::thread::id me, double now) const;
  // The threads that stepped lately, or wait for a step (a long call's caller).
  int Lately(double now) const;
  // Callers between steps lately, and the latest time one of them got its result.
  int Returning(double now, double* latest_done) const;
  double ThinkTime() const { return think_; }

 private:
  struct Caller {
    std::thread::id id;
    double submitted = -1, done = -1;
    bool waits = false;
  };
  Caller& Find(std::thread::id who);
  std::vector<Caller> callers_;
  double think_ = 0;
  int samples_ = 0;
};

// How long a call of `ready` steps should wait for callers between steps (seconds; 0: run now):
// only where their think time is shorter than the fixed cost of the call it would save, at most
// until twice their think time after the latest of them got its result, and `cap_left`; and only
// where the wait costs less than the calls it saves: wait * ready <= returning * fixed_cost.
double ReturningWait(int returning, double latest_done, double think, double fixed_cost, int ready, int limit,
                     double now, double cap_left);

}  // namespace lstm_ort::streams
