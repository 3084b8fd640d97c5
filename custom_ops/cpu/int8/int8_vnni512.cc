// int8 hot loops for AVX-512 VNNI: EVEX vpdpbusd on 512-bit vectors of uint8 x int8 quads.
#define LSTM_ORT_INT8_NS vnni512
#define LSTM_ORT_INT8_NAME "vnni512"
#define LSTM_ORT_INT8_DOT 3
#define LSTM_ORT_INT8_ZMM 1
#include "cpu/int8/int8_impl.inc"
