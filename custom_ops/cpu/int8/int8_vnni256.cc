// int8 hot loops for AVX-512 VNNI: EVEX vpdpbusd on 256-bit vectors of uint8 x int8 quads (for
// CPUs whose 512-bit operations run as two 256-bit halves: int8_dispatch.cc).
#define LSTM_ORT_INT8_NS vnni256
#define LSTM_ORT_INT8_NAME "vnni256"
#define LSTM_ORT_INT8_DOT 3
#include "cpu/int8/int8_impl.inc"
