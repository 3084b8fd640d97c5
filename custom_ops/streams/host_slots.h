// The streams' states on the host: per carried input, one row (one stream's state) per slot, in
// chunks that never move, so a call reads and writes its streams' rows while another stream opens.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "tensor_layout.h"

namespace lstm_ort::streams {

class HostSlots {
 public:
  explicit HostSlots(std::vector<TensorLayout> states);
  const std::vector<TensorLayout>& layouts() const { return states_; }
  int64_t Allocate();  // zeroed
  void Free(int64_t slot);
  char* Row(size_t state, int64_t slot) const {
    return chunks_[state][slot / kChunk].get() + (slot % kChunk) * states_[state].Bytes();
  }

 private:
  static constexpr int64_t kChunk = 256;
  static constexpr int64_t kMaxChunks = 1 << 16;  // 16 M streams
  std::vector<TensorLayout> states_;
  std::vector<std::unique_ptr<std::unique_ptr<char[]>[]>> chunks_;  // [state][chunk]
  int64_t capacity_ = 0;
  std::vector<int64_t> free_;
};

}  // namespace lstm_ort::streams
