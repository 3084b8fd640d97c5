#include "cost_model.h"

#include <algorithm>
#include <cmath>

namespace lstm_ort::streams {

namespace {
constexpr double kCallDecay = 1.0 - 1.0 / 64;
constexpr double kGapDecay = 1.0 / 32;
}  // namespace

void CallCost::Record(int n, double seconds) {
  if (calls_ >= kTrustedCalls) seconds = std::min(seconds, kMaxOverPrediction * Predict(n));
  s0_ = s0_ * kCallDecay + 1;
  s1_ = s1_ * kCallDecay + n;
  s2_ = s2_ * kCallDecay + static_cast<double>(n) * n;
  t0_ = t0_ * kCallDecay + seconds;
  t1_ = t1_ * kCallDecay + n * seconds;
  ++calls_;
  fitted_ = false;
}

void CallCost::Fit() const {
  if (fitted_) return;
  fitted_ = true;
  if (s0_ <= 0) {
    fixed_ = per_step_ = 0;
    return;
  }
  const double mean_n = s1_ / s0_, mean_t = t0_ / s0_;
  const double var_n = s2_ / s0_ - mean_n * mean_n;
  if (var_n < 0.25) {
    // One batch size seen (so far): no slope to read. Assume half of a call is fixed cost, the
    // half a batch shares; the first calls of other sizes correct it.
    fixed_ = mean_t / 2;
    per_step_ = mean_t / (2 * std::max(mean_n, 1.0));
    return;
  }
  const double cov = t1_ / s0_ - mean_n * mean_t;
  per_step_ = std::max(0.0, cov / var_n);
  fixed_ = std::max(0.0, mean_t - per_step_ * mean_n);
}

double CallCost::Fixed() const {
  Fit();
  return fixed_;
}

double CallCost::PerStep() const {
  Fit();
  return per_step_;
}

void ArrivalRate::Record(double now) {
  if (seen_++ > 0) {
    const double gap = std::max(0.0, now - last_);
    gap_ = seen_ == 2 ? gap : gap_ + kGapDecay * (gap - gap_);
  }
  last_ = std::max(last_, now);
}

double ArrivalRate::PerSecond(double now) const {
  if (seen_ < 2) return 0;
  const double gap = std::max(gap_, now - last_);
  return gap > 0 ? 1.0 / gap : 1e12;
}

double CompanyWait(const CallCost& cost, double arrivals_per_s, int ready, int limit, int slots, double cap_left) {
  if (cost.calls() == 0 || cap_left <= 0 || ready >= limit || arrivals_per_s <= 0 || slots < 1) return 0;
  const double a = cost.Fixed(), b = cost.PerStep();
  const double lambda = arrivals_per_s;
  // Calls of `ready` steps keep up: slots * ready / t(ready) >= lambda.
  if (slots * ready >= lambda * cost.Predict(ready)) return 0;
  // The batch size whose calls keep up: n (slots - b lambda) >= a lambda; none: as many as allowed.
  double target = limit;
  if (slots - b * lambda > 0) target = std::min<double>(limit, std::ceil(a * lambda / (slots - b * lambda)));
  const double wait = (target - ready) / lambda;
  return wait > 0 ? std::min(wait, cap_left) : 0;
}

bool SubmitterRunsAlone(const CallCost& cost, double arrivals_per_s, double since_own_last, bool beside) {
  if (cost.calls() == 0) return false;
  const double call = cost.Predict(1);
  if (since_own_last >= 0 && since_own_last < kBurstCalls * call) return false;
  return arrivals_per_s * call < (beside ? kBesideCompany : kLoneCompany);
}

}  // namespace lstm_ort::streams
