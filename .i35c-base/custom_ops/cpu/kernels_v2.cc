// Baseline build of the hot loops: x86-64-v2 (SSE4.2), runs on any x86-64 this library targets.
#define LSTM_ORT_ISA_NS v2
#define LSTM_ORT_ISA_NAME "x86-64-v2"
#include "cpu/kernels_impl.inc"
