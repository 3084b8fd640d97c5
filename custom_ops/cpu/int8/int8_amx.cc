// int8 hot loops for AMX-INT8: tdpbusd tiles on uint8 x int8 quads (AVX2 around them).
#define LSTM_ORT_INT8_NS amx
#define LSTM_ORT_INT8_NAME "amx"
#define LSTM_ORT_INT8_DOT 4
#include "cpu/int8/int8_impl.inc"
