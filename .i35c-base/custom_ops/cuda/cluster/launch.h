// Launching the cluster kernel (kernel.cuh), for the orchestration (stack_run.cu), which sees
// neither the kernel nor its template arguments.
#pragma once

#include <cuda_runtime_api.h>

namespace lstm_ort {

template <typename T>
struct ClusterArgs;

// Whether `device` runs thread-block clusters (compute capability 9.0 on), and how large: the
// largest cluster the planner may use there (0: none).
int MaxClusterBlocks(int device);

// One launch of a.plan's clusters, one per direction; the launch's own error, unchecked, so the
// caller can fall back where the device refuses the cluster.
template <typename T>
cudaError_t LaunchCluster(const ClusterArgs<T>& a, cudaStream_t stream);

}  // namespace lstm_ort
