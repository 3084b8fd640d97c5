// int8 hot loops for AVX2 vpmaddwd on int16 pairs (x86-64-v3).
#define LSTM_ORT_INT8_NS avx2
#define LSTM_ORT_INT8_NAME "avx2"
#define LSTM_ORT_INT8_DOT 1
#include "cpu/int8/int8_impl.inc"
