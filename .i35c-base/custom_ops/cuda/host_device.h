// Shapes and plans shared by host planning code and device kernels: __host__ __device__ under
// nvcc, plain C++ elsewhere (the unit tests build them without a CUDA compiler).
#pragma once

#if defined(__CUDACC__)
#define LSTM_ORT_HOST_DEVICE __host__ __device__
#else
#define LSTM_ORT_HOST_DEVICE
#endif
