// When a call should wait for more steps: the cost of a call against its batch size, measured
// online for each kind of step, and the rate its steps arrive at. Pure: the engine feeds it times.
#pragma once

namespace lstm_ort::streams {

// t(n) = fixed + per_step * n, fitted by least squares over the recent calls (each call's weight
// decays by 1/64 per later call, so the fit follows a machine whose load changes).
class CallCost {
 public:
  void Record(int n, double seconds);
  double Predict(int n) const { return Fixed() + PerStep() * n; }
  double Fixed() const;
  double PerStep() const;
  int calls() const { return calls_; }

 private:
  void Fit() const;
  double s0_ = 0, s1_ = 0, s2_ = 0, t0_ = 0, t1_ = 0;
  int calls_ = 0;
  mutable bool fitted_ = true;
  mutable double fixed_ = 0, per_step_ = 0;
};

// Steps per second arriving: the mean gap between arrivals (decaying by 1/32 per arrival), and no
// more than one per the time since the last one (a stream of steps that stopped has rate ~0).
class ArrivalRate {
 public:
  void Record(double now);
  double PerSecond(double now) const;

 private:
  double last_ = -1, gap_ = 0;
  int seen_ = 0;
};

// How long (seconds from now) the leader of `ready` steps should wait for more before its call.
// Waiting never lowers the mean latency while calls of `ready` steps on `slots` concurrent calls
// keep up with the arrivals (with a free slot, a step that arrives later runs in a call of its
// own at once); it pays only where they cannot: then the leader waits for the expected arrivals
// that bring the batch to the size whose calls do keep up, at most `cap_left` and `limit` steps.
// Returns 0 (run now) before the model has measured a call.
double CompanyWait(const CallCost& cost, double arrivals_per_s, int ready, int limit, int slots, double cap_left);

}  // namespace lstm_ort::streams
