// AVX-512 build of the hot loops (x86-64-v4), used where the CPU reports AVX-512 F, VL, DQ and BW:
// the panel products on 16 lanes, with results equal to the x86-64-v3 build's bit for bit.
#define LSTM_ORT_ISA_NS v4
#define LSTM_ORT_ISA_NAME "x86-64-v4"
#include "cpu/kernels_impl.inc"
