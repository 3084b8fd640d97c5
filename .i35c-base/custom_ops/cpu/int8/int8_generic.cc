// int8 hot loops for plain C++, int16 pairs (x86-64-v2: any x86-64 this library targets).
#define LSTM_ORT_INT8_NS generic
#define LSTM_ORT_INT8_NAME "generic"
#define LSTM_ORT_INT8_DOT 0
#include "cpu/int8/int8_impl.inc"
