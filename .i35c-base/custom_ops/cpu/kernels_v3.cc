// AVX2 + FMA build of the hot loops (x86-64-v3), used where the CPU reports both.
#define LSTM_ORT_ISA_NS v3
#define LSTM_ORT_ISA_NAME "x86-64-v3"
#include "cpu/kernels_impl.inc"
