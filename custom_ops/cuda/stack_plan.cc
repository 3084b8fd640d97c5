#include "cuda/stack_plan.h"

namespace lstm_ort {

std::vector<LayerRange> OneLayerPerRange(int L) {
  std::vector<LayerRange> ranges;
  for (int l = 0; l < L; ++l) ranges.push_back(LayerRange{l, 1, std::nullopt});
  return ranges;
}

}  // namespace lstm_ort
