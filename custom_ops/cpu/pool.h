// What the CPU kernel (cpu/lstm_cpu.cc) and its weight formats (cpu/stack_run.h) share about
// running on the session's intra-op pool: how many threads to plan for, running tasks on it, the
// counters tasks meet at after every step, and the scratch they work in.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <new>
#include <thread>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif
#include <sched.h>

#include "ort_api.h"
#include "overrides.h"

namespace lstm_ort {

// Threads to plan for: the cores, or LSTM_ORT_CPU_THREADS. The pool runs as many of the tasks at
// once as it has threads (with intra_op_num_threads=1 it has none and runs them in turn on the
// caller); every split the kernels make is correct, and nearly as fast, when fewer run at once.
// (A probe of the pool's size proved unreliable on a loaded machine, a sleeping worker taking
// milliseconds to start: too unreliable to size the fused kernel's plan by, whose split must not
// change with the load; PoolThreads below sizes only stock_threads, where a low count costs speed,
// never results.) Once per process: glibc's hardware_concurrency reads /sys on every call.
inline int PlanThreads() {
  static const int threads = [] {
    const int64_t forced = CpuOverridesFromEnvironment().threads;
    if (forced > 0) return static_cast<int>(forced);
    return static_cast<int>(std::min(64u, std::max(1u, std::thread::hardware_concurrency())));
  }();
  return threads;
}

// Runs fn(0..n-1) on the session's intra-op pool (inline when n == 1). fn must not throw.
template <typename Fn>
void Parallel(OrtKernelContext* ctx, int64_t n, Fn& fn) {
  if (n <= 1) {
    if (n == 1) fn(0);
    return;
  }
  void (*tramp)(void*, size_t) = [](void* u, size_t i) { (*static_cast<Fn*>(u))(static_cast<int64_t>(i)); };
  Ort::ThrowOnError(Ort::GetApi().KernelContext_ParallelFor(ctx, tramp, static_cast<size_t>(n), 0, &fn));
}

inline void SpinPause(int& n);

// How many threads the session's intra-op pool runs tasks on at once (OrtApi tells a kernel
// neither its session's options nor its pool's size): PlanThreads() tasks each wait, until a
// deadline, for all to arrive, and the most found waiting together is the count. A worker that
// wakes after the deadline is not counted, so the count may come out low, never high: a kernel
// sized by it never runs more threads than the session has. Where the pool has fewer threads than
// PlanThreads() (intra_op_num_threads=1: no pool at all, the tasks run in turn on the caller) the
// first tasks wait out the deadline: 10 ms, once.
inline int PoolThreads(OrtKernelContext* ctx, std::chrono::microseconds deadline = std::chrono::milliseconds(10)) {
  const int n = PlanThreads();
  if (n <= 1) return 1;
  std::atomic<int> inside{0}, arrived{0}, peak{1};
  const auto until = std::chrono::steady_clock::now() + deadline;
  auto task = [&](int64_t) {
    int seen = inside.fetch_add(1) + 1;
    arrived.fetch_add(1);
    for (int spins = 0; arrived.load() < n && std::chrono::steady_clock::now() < until;) {
      SpinPause(spins);
      seen = std::max(seen, inside.load());
    }
    seen = std::max(seen, inside.load());
    for (int p = peak.load(); seen > p && !peak.compare_exchange_weak(p, seen);) {
    }
    inside.fetch_sub(1);
  };
  Parallel(ctx, n, task);
  return peak.load();
}

inline void SpinPause(int& n) {
#if defined(__x86_64__) || defined(__i386__)
  if (++n < 2000) {
    _mm_pause();
    return;
  }
#else
  ++n;
#endif
  sched_yield();
}

// The tasks of one group claim items in order (`next`) and count those finished (`done`); each
// counter on its own cache line.
struct alignas(64) GroupSync {
  std::atomic<int64_t> next{0};
  char pad[56];
  std::atomic<int64_t> done{0};
};

// The next (step, phase) item of one chunk of a group's rows to be claimed, on its own cache line.
struct alignas(64) ChunkClaims {
  std::atomic<int64_t> next{0};
};

// What either kernel's packed copy of a node's weights was made for and from (each kernel's
// Packed adds its panels): the dims, and the inputs packed, to check that a constant initializer
// is the one given.
struct PackedShape {
  int64_t I = -1;  // X's feature size it was packed for; -1: nothing packed
  int64_t H = 0, Hp = 0, np = 0, L = 0, D = 0;
  const void* w_src = nullptr;
  const void* b_src = nullptr;
  const void* p_src = nullptr;
  bool has_peep = false;

  int64_t LayerInput(int64_t l) const { return l == 0 ? I : D * H; }
  // The dims of `d`, H in panels of `units` hidden units.
  void Set(const Dims& d, int64_t units) {
    I = d.I, H = d.H, L = d.L, D = d.D;
    np = (d.H + units - 1) / units;
    Hp = np * units;
  }
};

// Offsets of regions carved one after another out of one scratch buffer, each on a 64-byte line.
struct Carver {
  size_t total = 0;
  size_t operator()(size_t bytes) {
    const size_t at = total;
    total += (bytes + 63) & ~size_t(63);
    return at;
  }
};

// The region at `offset` of a scratch buffer, as P.
template <typename P>
P* At(char* base, size_t offset) {
  return reinterpret_cast<P*>(base + offset);
}

// A 64-byte aligned buffer of T that only grows.
template <typename T>
class AlignedBuffer {
 public:
  AlignedBuffer() = default;
  AlignedBuffer(const AlignedBuffer&) = delete;
  AlignedBuffer& operator=(const AlignedBuffer&) = delete;
  ~AlignedBuffer() { std::free(data_); }
  T* Reserve(size_t n) {
    if (n > cap_) {
      std::free(data_);
      data_ = nullptr;
      cap_ = 0;
      const size_t bytes = ((n * sizeof(T) + 63) / 64) * 64;
      data_ = static_cast<T*>(std::aligned_alloc(64, bytes));
      if (!data_) throw std::bad_alloc();
      cap_ = n;
    }
    return data_;
  }
  T* data() const { return data_; }

 private:
  T* data_ = nullptr;
  size_t cap_ = 0;
};

}  // namespace lstm_ort
