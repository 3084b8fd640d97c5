// When a call should wait for more steps: the cost of a call against its batch size, measured
// online for each kind of step, and the rate its steps arrive at. Pure: the engine feeds it times.
#pragma once

namespace lstm_ort::streams {

// t(n) = fixed + per_step * n, fitted by least squares over the recent calls (each call's weight
// decays by 1/64 per later call, so the fit follows a machine whose load changes). Once
// kTrustedCalls are in, a call counts at most kMaxOverPrediction times what the fit predicted:
// a call far slower than that was held up (on 2 cores, preempted by its own clients' threads), and
// a few such calls taught a least-squares fit costs the calls do not have (g2p-id decoder, open
// loop, 256 streams: t(1) read 350-530 us for ~50 us calls, t(51) 18.7 ms, and the engine waited
// for company it did not need: client p99 2.2 ms against 0.75 for one run per step). A lasting
// change still comes through, each call counting up to twice what the fit then predicts.
class CallCost {
 public:
  static constexpr int kTrustedCalls = 8;
  static constexpr double kMaxOverPrediction = 2.0;

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

// Whether a step submitted (not waited for) to an idle engine runs at once on the submitting
// thread instead of going to a worker. The hand-over costs two thread wake-ups, the worker's and
// the caller's through its future: 55-80 us on a 30 us call (g2p-id decoder, 2 cores: submit
// 0.10-0.13 ms a step where step() took 0.05 and stock's run 0.06), which only company repays.
// It runs alone where fewer than kLoneCompany steps are expected to arrive during its call (below
// one, calls of one step keep up with the arrivals; at 0.5 the g2p open loop of 256 streams every
// 32 ms still queued most steps for the workers: queue wait p50 0.052 ms and client p50 0.33 ms,
// against 0.002 and 0.26 ms at 1.0), and, on an engine whose submitters have no call slot of their
// own, its own thread is not submitting a burst (its previous step came more than kBurstCalls calls
// ago: an event loop stepping many streams in a row should batch them). `since_own_last` < 0: the
// thread's first step, or no burst rule. False before a call is measured.
// `beside`: another call is in flight (an engine whose submitters have call slots of their own):
// then fewer than kBesideCompany. Beside a call the step takes a second core, and where calls of
// one step come near to filling one, the steps that queue behind the call in flight would batch
// (2 cores; companies expected, p10-p90: g2p-id decoder 0.33-0.58, where running beside took client
// p99 from 2-4 ms to 0.9-1.5 against stock's 1.0-1.4; silero-vad 0.76-0.87, where it took every
// step alone and p99 from 5-9 to 35-110 ms).
constexpr double kLoneCompany = 1.0;
constexpr double kBesideCompany = 0.7;
constexpr double kBurstCalls = 2.0;
bool SubmitterRunsAlone(const CallCost& cost, double arrivals_per_s, double since_own_last, bool beside = false);

}  // namespace lstm_ort::streams
