// bf16 loops for AVX512-BF16: vdpbf16ps on 512-bit vectors.
#define LSTM_ORT_BF16_NS avx512bf16
#define LSTM_ORT_BF16_NAME "avx512bf16"
#define LSTM_ORT_BF16_KIND 1
#include "cpu/bf16/bf16_impl.inc"
