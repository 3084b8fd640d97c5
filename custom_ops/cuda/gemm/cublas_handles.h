// The cuBLAS handles a call uses. onnxruntime lends each of its CUDA streams a cuBLAS handle; a
// call takes that one where it is lent (CublasLease), since every handle brings its own default
// workspace pool: one more handle cost 64 MiB of device memory on an H200 (cublasCreate alone).
// Where none is lent, one handle per (device, host thread), created on first use and kept, and
// pointed at the caller's stream on each call. Handles are not safe to share between threads;
// keying ours by stream as well would leak one per session (each has its own stream).
#pragma once

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <cstdint>

namespace lstm_ort {

// This thread's own handle on the current device, pointed at `stream`.
cublasHandle_t CublasHandleFor(cudaStream_t stream);

// How many handles of its own (CublasHandleFor's) this process has made so far.
uint64_t OwnCublasHandlesMade();

// Points `handle` at `stream`; throws if cuBLAS refuses.
void PointCublasAt(cublasHandle_t handle, cudaStream_t stream);

// The same for cublasLt, whose calls take the stream themselves and the workspace from the
// caller (none is created with the handle).
cublasLtHandle_t CublasLtHandle();

// A call's cuBLAS handles for as long as the call enqueues. On the stream onnxruntime's handle
// serves: that handle (`lent`; null where none is lent), in FP32 math, given back in the math mode
// it came with (onnxruntime's kernels set theirs around each of their calls). On any other stream
// (one a graph is captured on): this thread's own, made on first use. A lent handle is never
// pointed elsewhere: with a user compute stream, onnxruntime lends every concurrent call of the
// session the same handle, and another thread's GEMMs would follow it.
class CublasLease {
 public:
  CublasLease(cublasHandle_t lent, cudaStream_t stream);
  ~CublasLease();
  CublasLease(const CublasLease&) = delete;
  CublasLease& operator=(const CublasLease&) = delete;

  // The handle for launches on `on`.
  cublasHandle_t On(cudaStream_t on);
  // The handle for launches on the call's stream.
  cublasHandle_t handle() { return On(stream_); }

 private:
  cudaStream_t stream_;
  cublasHandle_t lent_;  // onnxruntime's, or null
  cudaStream_t lent_on_ = nullptr;  // the stream lent_ serves
  cublasMath_t lent_math_ = CUBLAS_DEFAULT_MATH;
  cublasHandle_t own_ = nullptr;  // this thread's, once needed
  cudaStream_t own_on_ = nullptr;  // the stream own_ points at
};

}  // namespace lstm_ort
