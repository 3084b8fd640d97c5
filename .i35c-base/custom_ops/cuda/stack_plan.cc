#include "cuda/stack_plan.h"

namespace lstm_ort {

std::vector<LayerRange> OneLayerPerRange(int L) {
  std::vector<LayerRange> ranges;
  for (int l = 0; l < L; ++l) ranges.push_back(LayerRange{l, 1, std::nullopt, std::nullopt});
  return ranges;
}

std::vector<LayerRange> ClusterRanges(int L, const ClusterPlan& plan) {
  std::vector<LayerRange> ranges = OneLayerPerRange(L);
  for (LayerRange& r : ranges) r.cluster = plan;
  return ranges;
}

std::string DescribeRanges(const std::vector<LayerRange>& ranges, StepKernel v1_step) {
  const char* step = v1_step == StepKernel::kSplitK ? "splitk" : v1_step == StepKernel::kGemm ? "cuBLAS" : "tiled";
  std::string out;
  for (const LayerRange& r : ranges) {
    if (!out.empty()) out += "; ";
    out += r.count == 1 ? "layer " + std::to_string(r.first) :
                          "layers " + std::to_string(r.first) + "-" + std::to_string(r.first + r.count - 1);
    if (r.cluster) {
      const ClusterPlan& c = *r.cluster;
      out += ": cluster (" + std::to_string(c.C) + " blocks of " + std::to_string(c.threads) +
             " threads per direction, weights in registers)";
      continue;
    }
    if (!r.plan) {
      out += std::string(": v1 ") + step + " (one launch per step)";
      continue;
    }
    const PersistentPlan& p = *r.plan;
    out += std::string(": ") + (r.count > 1 ? "wavefront" : "persistent") + " (" +
           (p.mma ? std::string("tensor cores, ") + MmaOperandName(p.operand) + ", " : std::string()) +
           std::to_string(p.blocks) +
           " blocks of " + std::to_string(p.U) + " units x " + std::to_string(p.Bb) + " rows, " +
           std::to_string(p.smem / 1024) + " KiB shared memory)";
  }
  return out;
}

}  // namespace lstm_ort
