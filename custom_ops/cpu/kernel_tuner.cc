#include "cpu/kernel_tuner.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace lstm_ort {
namespace {

double Median(std::vector<double> v) {
  v.erase(std::remove_if(v.begin(), v.end(), [](double x) { return std::isnan(x); }), v.end());
  if (v.empty()) return std::numeric_limits<double>::quiet_NaN();
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// The paired log ratios log(a_r / b_r) over the rounds where both have a sample.
std::vector<double> LogRatios(const std::vector<double>& a, const std::vector<double>& b) {
  std::vector<double> x;
  for (size_t r = 0; r < std::min(a.size(), b.size()); ++r)
    if (!std::isnan(a[r]) && !std::isnan(b[r]) && a[r] > 0 && b[r] > 0) x.push_back(std::log(a[r] / b[r]));
  return x;
}

// How surely `x` (paired log ratios, a's over b's) says a is faster than b by at least `gain`:
// its mean below -log(1 + gain) and its one-sided t statistic at least `confidence`.
bool SurelyFaster(const std::vector<double>& x, double gain, double confidence) {
  if (x.empty()) return false;
  double mean = 0;
  for (double v : x) mean += v;
  mean /= x.size();
  if (-mean < std::log1p(gain)) return false;
  if (x.size() < 2) return false;
  double var = 0;
  for (double v : x) var += (v - mean) * (v - mean);
  const double sd = std::sqrt(var / (x.size() - 1));
  return sd == 0 || -mean / (sd / std::sqrt(static_cast<double>(x.size()))) >= confidence;
}

double MeanLog(const std::vector<double>& v) {
  double sum = 0;
  int n = 0;
  for (double x : v)
    if (!std::isnan(x) && x > 0) sum += std::log(x), ++n;
  return n ? sum / n : std::numeric_limits<double>::infinity();
}

bool Has(const std::vector<CpuKernel>& v, CpuKernel k) { return std::find(v.begin(), v.end(), k) != v.end(); }

}  // namespace

ShapeClass ClassOf(int64_t T, int64_t B) {
  int64_t bucket = 1;
  while (bucket < T) bucket *= 2;
  return {bucket, B};
}

CpuKernel FloorOf(const std::vector<CpuKernel>& candidates) {
  if (Has(candidates, CpuKernel::kStockThreads)) return CpuKernel::kStockThreads;
  if (Has(candidates, CpuKernel::kStock)) return CpuKernel::kStock;
  return candidates.empty() ? CpuKernel::kFused : candidates.front();
}

void KernelTuner::Preset(ShapeClass shape, CpuKernel kernel) {
  std::lock_guard<std::mutex> lock(mutex_);
  ClassState& s = classes_[shape];
  s.chosen = kernel;
  s.preset = true;
}

void KernelTuner::StartRound(ClassState& s, const std::vector<CpuKernel>& kernels) const {
  const size_t n = kernels.size();
  s.round.clear();
  for (size_t i = 0; i < n; ++i) s.round.push_back(kernels[(i + s.rounds + s.cold) % n]);  // rotating who goes first
  s.position = 0;
  s.block_left = std::max(0, config_.warmup) + std::max(1, config_.block);
  s.untimed = std::max(0, config_.warmup);
  s.block_times.clear();
  s.round_samples.clear();
}

bool KernelTuner::RecheckDue(const ClassState& s) const {
  return !s.preset && s.chosen != CpuKernel::kAuto && s.chosen != s.floor && Has(s.candidates, s.floor) &&
         s.rechecks_done < config_.recheck_after.size() &&
         s.calls_decided >= config_.recheck_after[s.rechecks_done];
}

KernelTuner::Pick KernelTuner::Choose(ShapeClass shape, const std::vector<CpuKernel>& candidates) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto [it, added] = classes_.try_emplace(shape);
  ClassState& s = it->second;
  calls_since_new_ = added ? 0 : calls_since_new_ + 1;
  if (s.candidates.empty()) {
    s.candidates = candidates;
    s.floor = FloorOf(candidates);
  }
  if (s.chosen != CpuKernel::kAuto && !Measuring(s)) {
    ++s.calls_decided;
    if (!RecheckDue(s)) {
      if (Has(candidates, s.chosen)) return {s.chosen, false};
      // A preset kernel this call cannot run gives way (the call plan does the same for tuned entries).
      return {s.chosen == CpuKernel::kStockThreads && Has(candidates, CpuKernel::kStock) ? CpuKernel::kStock
                                                                                         : candidates.front(),
              false};
    }
    StartRound(s, {s.chosen, s.floor});
  }
  if (s.candidates.size() == 1) {
    s.chosen = s.candidates.front();
    return {s.chosen, false};
  }
  if (!Measuring(s)) StartRound(s, s.candidates);
  if (s.block_left > 0) --s.block_left;
  return {s.round[s.position], true};
}

void KernelTuner::Record(ShapeClass shape, CpuKernel kernel, double ms) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = classes_.find(shape);
  if (it == classes_.end() || !Measuring(it->second)) return;
  ClassState& s = it->second;
  if (kernel != s.round[s.position]) return;  // a call that overlapped the switch of blocks
  if (s.untimed > 0) {
    --s.untimed;
    return;
  }
  s.block_times.push_back(ms);
  if (static_cast<int>(s.block_times.size()) < std::max(1, config_.block)) return;
  // The block's fastest call: a call preempted or slowed by a passing load is slow, never fast, so
  // one such call does not sink the block (a mean let one decide a class for good).
  s.round_samples[kernel] = *std::min_element(s.block_times.begin(), s.block_times.end());
  if (++s.position < s.round.size()) {
    s.block_left = std::max(0, config_.warmup) + std::max(1, config_.block);
    s.untimed = std::max(0, config_.warmup);
    s.block_times.clear();
    return;
  }
  EndRound(s);
}

void KernelTuner::EndRound(ClassState& s) const {
  if (s.chosen == CpuKernel::kAuto && s.cold < config_.cold_rounds) {
    ++s.cold;
    s.round.clear();
    return;
  }
  for (CpuKernel k : s.candidates) {
    auto got = s.round_samples.find(k);
    s.samples[k].push_back(got == s.round_samples.end() ? std::numeric_limits<double>::quiet_NaN() : got->second);
  }
  ++s.rounds;
  const bool recheck = s.chosen != CpuKernel::kAuto;
  s.round.clear();
  if (!recheck) {
    Decide(s);
    return;
  }
  // A recheck: the floor takes the class back where every paired round so far says it is surely
  // faster than the choice.
  ++s.rechecks_done;
  if (SurelyFaster(LogRatios(s.samples[s.floor], s.samples[s.chosen]), config_.min_gain, config_.confidence))
    s.chosen = s.floor;
}

void KernelTuner::Decide(ClassState& s) const {
  if (s.rounds < config_.min_rounds) return;
  // The floor: the fastest of stock's kernels (by the mean of their log samples; ties to the
  // earlier candidate). No one of them is the original model's run: stock_threads is a session
  // within a session (H40 B16 T50, two threads: 0.21 ms against the original's 0.18), stock_split
  // cuts the batch as the original's LSTM does on its threads.
  CpuKernel floor = CpuKernel::kAuto, best = CpuKernel::kAuto;
  double floor_log = std::numeric_limits<double>::infinity(), best_log = floor_log;
  for (CpuKernel k : s.candidates) {
    const double m = MeanLog(s.samples[k]);
    if (k != CpuKernel::kFused && m < floor_log) floor = k, floor_log = m;
    if (m < best_log) best = k, best_log = m;
  }
  if (floor == CpuKernel::kAuto) floor = s.floor;
  s.floor = floor;
  if (best == floor || best == CpuKernel::kAuto) {
    const bool sure = !Has(s.candidates, CpuKernel::kFused) ||
                      SurelyFaster(LogRatios(s.samples[floor], s.samples[CpuKernel::kFused]), 0, config_.confidence);
    if (sure || s.rounds >= config_.max_rounds) s.chosen = floor;
    return;
  }
  if (SurelyFaster(LogRatios(s.samples[best], s.samples[floor]), config_.min_gain, config_.confidence)) {
    s.chosen = best;
    return;
  }
  if (s.rounds >= config_.max_rounds) s.chosen = floor;  // in doubt: the floor
}

void KernelTuner::DecideOpen(CpuKernel kernel) {
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto& [shape, s] : classes_) {
    if (s.chosen == CpuKernel::kAuto) s.chosen = kernel;
    s.round.clear();
    s.rechecks_done = config_.recheck_after.size();  // the floor cannot run: nothing to recheck with
  }
}

bool KernelTuner::Settled() const {
  std::lock_guard<std::mutex> lock(mutex_);
  if (calls_since_new_ < config_.settle_calls) return false;
  for (const auto& [shape, s] : classes_) {
    if (s.chosen == CpuKernel::kAuto || Measuring(s)) return false;
    if (!s.preset && s.chosen != s.floor && Has(s.candidates, s.floor) &&
        s.rechecks_done < config_.recheck_after.size())
      return false;
  }
  return true;
}

bool KernelTuner::Uses(CpuKernel kernel) const {
  std::lock_guard<std::mutex> lock(mutex_);
  for (const auto& [shape, s] : classes_) {
    if (s.chosen == kernel) return true;
    if (s.chosen == CpuKernel::kAuto && Has(s.candidates, kernel)) return true;
    if (Measuring(s) && Has(s.round, kernel)) return true;
    if (kernel == s.floor && !s.preset && s.chosen != CpuKernel::kAuto && s.chosen != s.floor &&
        s.rechecks_done < config_.recheck_after.size())
      return true;  // a recheck to come
  }
  return false;
}

std::vector<ClassReport> KernelTuner::Report() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<ClassReport> out;
  for (const auto& [shape, s] : classes_) {
    ClassReport r;
    r.shape = shape;
    r.chosen = s.chosen;
    r.preset = s.preset;
    r.rounds = s.rounds;
    for (const auto& [k, t] : s.samples) {
      const double m = Median(t);
      if (!std::isnan(m)) r.median_ms[k] = m;
    }
    out.push_back(r);
  }
  return out;
}

}  // namespace lstm_ort
