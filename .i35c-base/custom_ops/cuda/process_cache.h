// One value per key for the life of the process, made on first use: the CUDA host code's caches
// of per-device limits, per-(device, thread) library handles and per-shape GEMM algorithms.
#pragma once

#include <map>
#include <mutex>
#include <type_traits>

namespace lstm_ort {

// The value for `key`, made by `make()` the first time it is asked for (under the lock, so it is
// made once). Each `make` type has a cache of its own: every lambda is a type of its own, and one
// in a function template is one per instantiation. Map nodes stay put, so the reference outlives
// the lock.
template <typename Key, typename Make>
const std::decay_t<std::invoke_result_t<Make&>>& ProcessCached(const Key& key, Make make) {
  static std::mutex mutex;
  static std::map<Key, std::decay_t<std::invoke_result_t<Make&>>> cache;
  std::lock_guard<std::mutex> lock(mutex);
  auto it = cache.find(key);
  if (it == cache.end()) it = cache.emplace(key, make()).first;
  return it->second;
}

}  // namespace lstm_ort
