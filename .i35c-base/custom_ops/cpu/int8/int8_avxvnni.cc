// int8 hot loops for AVX-VNNI: VEX vpdpbusd on uint8 x int8 quads.
#define LSTM_ORT_INT8_NS avxvnni
#define LSTM_ORT_INT8_NAME "avxvnni"
#define LSTM_ORT_INT8_DOT 2
#include "cpu/int8/int8_impl.inc"
