#include "cuda/cluster/launch.h"

#include <cuda_fp16.h>

#include "cuda/cluster/kernel.cuh"

namespace lstm_ort {
namespace {

template <typename T, int KPT>
const void* KernelWithRows(int nb) {
  switch (nb) {
    case 1: return reinterpret_cast<const void*>(ClusterLstm<T, KPT, 1>);
    case 2: return reinterpret_cast<const void*>(ClusterLstm<T, KPT, 2>);
    case 4: return reinterpret_cast<const void*>(ClusterLstm<T, KPT, 4>);
    default: return reinterpret_cast<const void*>(ClusterLstm<T, KPT, 8>);
  }
}

template <typename T>
const void* ClusterKernelFor(int kpt, int nb) {
  switch (kpt) {
    case 8: return KernelWithRows<T, 8>(nb);
    case 16: return KernelWithRows<T, 16>(nb);
    default: return KernelWithRows<T, 32>(nb);
  }
}

}  // namespace

int MaxClusterBlocks(int device) {
  int major = 0;
  if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return major >= 9 ? kClusterMaxBlocks : 0;
}

template <typename T>
cudaError_t LaunchCluster(const ClusterArgs<T>& a, cudaStream_t stream) {
  const ClusterPlan& p = a.plan;
  const void* kernel = ClusterKernelFor<T>(p.KPT, p.NB);
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(p.C * a.D);
  config.blockDim = dim3(p.threads);
  config.dynamicSmemBytes = p.smem;
  config.stream = stream;
  cudaLaunchAttribute cluster = {};
  cluster.id = cudaLaunchAttributeClusterDimension;
  cluster.val.clusterDim.x = p.C;
  cluster.val.clusterDim.y = 1;
  cluster.val.clusterDim.z = 1;
  config.attrs = &cluster;
  config.numAttrs = 1;
  if (p.C > 8) {  // beyond the portable size: allowed per kernel, and only where a cluster fits
    cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1);
    if (e != cudaSuccess) return e;
    int clusters = 0;
    e = cudaOccupancyMaxActiveClusters(&clusters, kernel, &config);
    if (e != cudaSuccess) return e;
    if (clusters < 1) return cudaErrorInvalidClusterSize;
  }
  ClusterArgs<T> args = a;  // the launch takes a pointer to each argument
  void* params[] = {&args};
  return cudaLaunchKernelExC(&config, kernel, params);
}

template cudaError_t LaunchCluster<float>(const ClusterArgs<float>& a, cudaStream_t stream);
template cudaError_t LaunchCluster<__half>(const ClusterArgs<__half>& a, cudaStream_t stream);

}  // namespace lstm_ort
