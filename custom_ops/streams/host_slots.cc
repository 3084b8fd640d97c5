#include "host_slots.h"

#include <cstring>
#include <stdexcept>

namespace lstm_ort::streams {

HostSlots::HostSlots(std::vector<TensorLayout> states) : states_(std::move(states)) {
  for (size_t s = 0; s < states_.size(); ++s) chunks_.emplace_back(new std::unique_ptr<char[]>[kMaxChunks]);
}

int64_t HostSlots::Allocate() {
  if (free_.empty()) {
    if (capacity_ / kChunk >= kMaxChunks) throw std::runtime_error("too many open streams");
    const int64_t chunk = capacity_ / kChunk;
    for (size_t s = 0; s < states_.size(); ++s) chunks_[s][chunk].reset(new char[kChunk * states_[s].Bytes()]);
    for (int64_t k = kChunk - 1; k >= 0; --k) free_.push_back(capacity_ + k);
    capacity_ += kChunk;
  }
  const int64_t slot = free_.back();
  free_.pop_back();
  for (size_t s = 0; s < states_.size(); ++s) std::memset(Row(s, slot), 0, states_[s].Bytes());
  return slot;
}

void HostSlots::Free(int64_t slot) { free_.push_back(slot); }

}  // namespace lstm_ort::streams
