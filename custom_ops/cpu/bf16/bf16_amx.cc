// bf16 loops for AMX-BF16 tiles (and AVX512-BF16 for products of few rows).
#define LSTM_ORT_BF16_NS amx
#define LSTM_ORT_BF16_NAME "amx"
#define LSTM_ORT_BF16_KIND 2
#include "cpu/bf16/bf16_impl.inc"
