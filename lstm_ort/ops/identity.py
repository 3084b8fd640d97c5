"""The names that make up FusedLSTM's contract (docs/ops.md)."""

from __future__ import annotations

from enum import Enum

import numpy as np
from onnx import TensorProto, helper

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
CPU_KERNELS = ("auto", "fused", "stock", "stock_split", "stock_threads")
# Values of the `int8_scales` attribute, in the order of the C++ enum lstm_ort::Int8Scales: how
# the int8 kernel quantizes its activations, one scale per call and step as onnxruntime's
# DynamicQuantizeLSTM on one thread ("call", the default), or one per batch row ("row": batched rows
# never change each other's results), or h per slice of the batch as DynamicQuantizeLSTM cuts it on
# as many threads as the CPU kernel plans for ("slices": stock's result on those threads, the slices
# on threads of their own). docs/ops.md, "int8 weights".
INT8_SCALES = ("call", "row", "slices")
# The device of a CPU entry of the `tuned` attribute: this prefix and the CPU's name.
TUNED_CPU_PREFIX = "cpu:"



class Precision(str, Enum):
    """A value of the `precision` attribute (docs/ops.md, "Precision modes"), in the order of the
    C++ enum lstm_ort::Precision; absent means DEFAULT_PRECISION. A mode is what a node asks for:
    what a call computes in for it is decided per device, in one place, by the op library
    (custom_ops/precision.h, through lstm_ort.runtime.native.decide_precision). Compares equal to
    its name, which is also what str() and formatting give."""

    FP32 = "fp32"
    TF32 = "tf32"
    FP16 = "fp16"
    BF16 = "bf16"
    AUTO = "auto"

    def __str__(self) -> str:
        return self.value

    def __format__(self, spec: str) -> str:
        return format(self.value, spec)

    @classmethod
    def parse(cls, value, what: str = "precision") -> Precision:
        """``value`` (a name, bytes as onnx gives them, or a Precision) as a Precision; a ValueError
        naming ``what`` and every mode otherwise."""
        if isinstance(value, bytes):
            value = value.decode(errors="replace")
        return cls(require_choice(what, value, PRECISIONS))

    @classmethod
    def written(cls, value=None) -> Precision:
        """The mode `optimize` writes on the nodes it makes when asked for ``value``: it, or
        OPTIMIZE_PRECISION where none is given. The one place that default is applied."""
        return OPTIMIZE_PRECISION if value is None else cls.parse(value)


PRECISIONS = tuple(p.value for p in Precision)
# Keys of the `debug` attribute (custom_ops/overrides.cc, in its table's order): developer
# overrides of the CUDA kernel's own choices, set per session as config entries lstm_ort.debug.<key>
# (docs/architecture.md, "Overrides"). strict=1 makes every fallback an error that names it.
DEBUG_KEYS = ("strict", "strategy", "mma", "gemm_step", "half_step_weights", "cluster_size", "cluster_slices",
              "persistent_tile", "persistent_chunks", "low_rank_stepwise", "call_graphs", "mma_step", "mma_step_tile",
              "mma_step_pdl", "mma_step_resident", "mma_step_layers", "refuse_launches")
DEFAULT_PRECISION = Precision.FP32
# What `lstm-ort optimize` (and lstm_ort.optimize) writes on the nodes it makes unless told
# otherwise (Precision.written): FP32 accuracy where it costs nothing, stock's own default class
# (TF32) at the large shapes where FP32 would lose to stock's TF32 default (docs/ops.md, "The
# default").
OPTIMIZE_PRECISION = Precision.AUTO


def require_choice(what: str, value, choices: tuple[str, ...]) -> str:
    """``value`` if it is one of ``choices``; else a ValueError that names ``what`` and every choice,
    so a bad option fails in Python with the allowed values rather than deep in a session."""
    if value not in choices:
        raise ValueError(f"{what} must be one of {', '.join(choices)}, got {value!r}")
    return value


def is_fused(node) -> bool:
    """Whether ``node`` (an onnx.NodeProto or an onnx_ir.Node) is a FusedLSTM node."""
    return node is not None and node.op_type == OP_TYPE and node.domain == DOMAIN


def num_directions(direction) -> int:
    """D of an LSTM's ``direction`` attribute (str or the bytes onnx gives)."""
    return 2 if (direction.decode() if isinstance(direction, bytes) else direction) == "bidirectional" else 1


# The element types the kernels are registered for: ONNX type -> the name reports use.
ELEMENT_TYPES = {TensorProto.FLOAT: "float32", TensorProto.FLOAT16: "float16"}


# Every other element-type question is answered from onnx's own table (TensorProto.DataType):
# these take an ONNX type as TensorProto's int or an onnx_ir.DataType (the same numbers).
def type_name(elem_type) -> str:
    """The name reports use: float32, float16, int8, ... (numpy's)."""
    return np_dtype(elem_type).name


def np_dtype(elem_type) -> np.dtype:
    return np.dtype(helper.tensor_dtype_to_np_dtype(int(elem_type)))


def onnx_type(dtype) -> int:
    """The ONNX type (TensorProto's int) of a numpy dtype."""
    return helper.np_dtype_to_tensor_dtype(np.dtype(dtype))


def ort_type(elem_type) -> str:
    """onnxruntime's name of an ONNX type, as NodeArg.type gives it: tensor(float), tensor(int64), ..."""
    return f"tensor({TensorProto.DataType.Name(int(elem_type)).lower()})"


def np_dtype_of_ort(type_name_: str) -> np.dtype | None:
    """The numpy dtype of an onnxruntime type name (tensor(float) -> float32); None for one numpy
    has no dtype for (strings, maps, sequences)."""
    if not (type_name_.startswith("tensor(") and type_name_.endswith(")")):
        return None
    try:
        dtype = np_dtype(TensorProto.DataType.Value(type_name_[7:-1].upper()))
    except (ValueError, KeyError, TypeError):
        return None
    return None if dtype == np.dtype(object) else dtype

# int8 weights (docs/ops.md, "int8 weights"): W of this type, with W_scale, runs onnxruntime's
# DynamicQuantizeLSTM semantics on float32 X; what reports show as such a node's precision.
INT8_WEIGHT_TYPE = TensorProto.INT8
INT8 = "int8"
