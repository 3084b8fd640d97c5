#include "cpu/kernel_tuner.h"

#include <algorithm>

namespace lstm_ort {
namespace {

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

}  // namespace

ShapeClass ClassOf(int64_t T, int64_t B) {
  int64_t bucket = 1;
  while (bucket < T) bucket *= 2;
  return {bucket, B};
}

void KernelTuner::Preset(ShapeClass shape, CpuKernel kernel) {
  std::lock_guard<std::mutex> lock(mutex_);
  ClassState& s = classes_[shape];
  s.chosen = kernel;
  s.preset = true;
}

KernelTuner::Pick KernelTuner::Choose(ShapeClass shape, const std::vector<CpuKernel>& candidates) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto [it, added] = classes_.try_emplace(shape);
  ClassState& s = it->second;
  calls_since_new_ = added ? 0 : calls_since_new_ + 1;
  if (added) s.candidates = candidates;
  if (s.chosen != CpuKernel::kAuto) {
    // A preset kernel this call cannot run gives way: stock_threads (a pool counted as one
    // thread) to stock, stock's (on weights it cannot take) to the first candidate.
    auto can = [&](CpuKernel k) { return std::find(candidates.begin(), candidates.end(), k) != candidates.end(); };
    if (can(s.chosen)) return {s.chosen, false};
    if (s.chosen == CpuKernel::kStockThreads && can(CpuKernel::kStock)) return {CpuKernel::kStock, false};
    return {candidates.front(), false};
  }
  if (s.candidates.size() == 1) {
    s.chosen = s.candidates.front();
    return {s.chosen, false};
  }
  const size_t n = s.candidates.size();
  if (s.block_left == 0) {
    const CpuKernel next = s.candidates[s.blocks % n];
    s.block_left = std::max(0, config_.warmup) + std::max(1, config_.block);
    s.untimed[next] += config_.warmup;
    ++s.blocks;
  }
  --s.block_left;
  return {s.candidates[(s.blocks - 1) % n], true};
}

void KernelTuner::Record(ShapeClass shape, CpuKernel kernel, double ms) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = classes_.find(shape);
  if (it == classes_.end() || it->second.chosen != CpuKernel::kAuto) return;
  ClassState& s = it->second;
  if (s.untimed[kernel] > 0) {
    --s.untimed[kernel];
    return;
  }
  s.times[kernel].push_back(ms);
  DecideIfMeasured(s);
}

void KernelTuner::DecideIfMeasured(ClassState& s) const {
  double best = 0, second = 0;
  CpuKernel winner = CpuKernel::kAuto;
  size_t fewest = SIZE_MAX;
  for (CpuKernel k : s.candidates) {
    auto t = s.times.find(k);
    if (t == s.times.end() || static_cast<int>(t->second.size()) < config_.samples) return;
    fewest = std::min(fewest, t->second.size());
    const double m = Median(t->second);
    // Ties go to the earlier candidate (callers list the fused kernel first: no session to run).
    if (winner == CpuKernel::kAuto || m < best) {
      second = winner == CpuKernel::kAuto ? m : best;
      best = m, winner = k;
    } else if (m < second || second == best) {
      second = m;
    }
  }
  const bool close = s.candidates.size() > 1 && second < best * (1 + config_.margin);
  if (close && static_cast<int>(fewest) < config_.max_samples) return;  // another round each
  s.chosen = winner;
}

void KernelTuner::DecideOpen(CpuKernel kernel) {
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto& [shape, s] : classes_)
    if (s.chosen == CpuKernel::kAuto) s.chosen = kernel;
}

bool KernelTuner::Settled() const {
  std::lock_guard<std::mutex> lock(mutex_);
  if (calls_since_new_ < config_.settle_calls) return false;
  for (const auto& [shape, s] : classes_)
    if (s.chosen == CpuKernel::kAuto) return false;
  return true;
}

bool KernelTuner::Uses(CpuKernel kernel) const {
  std::lock_guard<std::mutex> lock(mutex_);
  for (const auto& [shape, s] : classes_) {
    if (s.chosen == kernel) return true;
    if (s.chosen == CpuKernel::kAuto && std::find(s.candidates.begin(), s.candidates.end(), kernel) != s.candidates.end())
      return true;
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
    for (const auto& [k, t] : s.times)
      if (!t.empty()) r.median_ms[k] = Median(t);
    out.push_back(r);
  }
  return out;
}

}  // namespace lstm_ort
