"""The names that make up FusedLSTM's contract (docs/ops.md)."""

from __future__ import annotations

from onnx import TensorProto

DOMAIN = "lstm_ort"
OP_TYPE = "FusedLSTM"
OPSET_VERSION = 1

INPUTS = ("X", "W", "B", "sequence_lens", "initial_h", "initial_c", "P", "factors", "W_scale")
OUTPUTS = ("Y", "Y_h", "Y_c")

# Values of the `strategy` attribute, in the order of the C++ enum lstm_ort::Strategy.
STRATEGIES = ("auto", "tiled", "splitk", "persistent", "wavefront", "cluster")
# What `lstm-ort tune` measures: every strategy but the heuristic.
TUNABLE_STRATEGIES = STRATEGIES[1:]

# Values of the `cpu_kernel` attribute, in the order of the C++ enum lstm_ort::CpuKernel: which
# kernel runs a call on the CPU (docs/cpu.md, "The floor"). auto measures per shape class.
CPU_KERNELS = ("auto", "fused", "stock", "stock_split")
# The device of a CPU entry of the `tuned` attribute: this prefix and the CPU's name.
TUNED_CPU_PREFIX = "cpu:"

# Values of the `precision` attribute, in the order of the C++ enum lstm_ort::Precision
# (docs/ops.md, "Precision modes"). Absent means DEFAULT_PRECISION.
PRECISIONS = ("fp32", "tf32", "fp16", "bf16", "auto")
# Keys of the `debug` attribute (custom_ops/overrides.cc, in its table's order): developer
# overrides of the CUDA kernel's own choices, set per session as config entries lstm_ort.debug.<key>
# (docs/architecture.md, "Overrides"). strict=1 makes every fallback an error that names it.
DEBUG_KEYS = ("strict", "strategy", "mma", "gemm_step", "half_step_weights", "cluster_size", "cluster_slices",
              "persistent_tile", "persistent_chunks", "low_rank_stepwise")
DEFAULT_PRECISION = "fp32"
# What `lstm-ort optimize` (and lstm_ort.optimize) writes on the nodes it makes unless told
# otherwise: FP32 accuracy where it costs nothing, stock's own default class (TF32) at the large
# shapes where FP32 would lose to stock's TF32 default (docs/ops.md, "The default").
OPTIMIZE_PRECISION = "auto"


def require_choice(what: str, value, choices: tuple[str, ...]) -> str:
    """``value`` if it is one of ``choices``; else a ValueError that names ``what`` and every choice,
    so a bad option fails in Python with the allowed values rather than deep in a session."""
    if value not in choices:
        raise ValueError(f"{what} must be one of {', '.join(choices)}, got {value!r}")
    return value


# The element types the kernels are registered for: ONNX type -> the name reports use.
ELEMENT_TYPES = {TensorProto.FLOAT: "float32", TensorProto.FLOAT16: "float16"}

# int8 weights (docs/ops.md, "int8 weights"): W of this type, with W_scale, runs onnxruntime's
# DynamicQuantizeLSTM semantics on float32 X; what reports show as such a node's precision.
INT8_WEIGHT_TYPE = TensorProto.INT8
INT8 = "int8"
