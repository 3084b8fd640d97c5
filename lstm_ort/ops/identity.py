"""The names that make up FusedLSTM's contract (docs/ops.md)."""

from __future__ import annotations

from onnx import TensorProto

DOMAIN = "lstm_ort"
OP_TYPE = "FusedLSTM"
OPSET_VERSION = 1

INPUTS = ("X", "W", "B", "sequence_lens", "initial_h", "initial_c", "P", "factors")
OUTPUTS = ("Y", "Y_h", "Y_c")

# Values of the `strategy` attribute, in the order of the C++ enum lstm_ort::Strategy.
STRATEGIES = ("auto", "tiled", "splitk", "persistent", "wavefront")
# What `lstm-ort tune` measures: every strategy but the heuristic.
TUNABLE_STRATEGIES = STRATEGIES[1:]

# The element types the kernels are registered for: ONNX type -> the name reports use.
ELEMENT_TYPES = {TensorProto.FLOAT: "float32", TensorProto.FLOAT16: "float16"}
