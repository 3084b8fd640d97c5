// bf16 loops in plain C++ (the same rounding and products, in fp32): for tests on CPUs without
// bf16 units, where precision bf16 is refused for nodes.
#define LSTM_ORT_BF16_NS generic
#define LSTM_ORT_BF16_NAME "generic"
#define LSTM_ORT_BF16_KIND 0
#include "cpu/bf16/bf16_impl.inc"
