"""What `--check` and the tests hold an optimized model's outputs to: by element type, by
precision mode (one table, PRECISION_TOLERANCES), and for int8 weights."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx

from lstm_ort.ops.identity import DEFAULT_PRECISION, Precision
from lstm_ort.runtime.model_io import iter_graphs
from lstm_ort.runtime.native import PrecisionRefused, decide_precision


@dataclass(frozen=True)
class Tolerance:
    """Outputs match where |ours - stock| <= atol + rtol * |stock|, everywhere; with `of_max`, rtol
    applies to the largest |stock| of each output rather than each element's."""

    atol: float
    rtol: float = 0.0
    of_max: bool = False

    def __str__(self) -> str:
        scale = "max|stock|" if self.of_max else "|stock|"
        return f"{self.atol:g}" if not self.rtol else f"{self.atol:g} + {self.rtol:g} x {scale}"

    def excess(self, stock: np.ndarray, diff: np.ndarray) -> float:
        """Largest diff beyond the relative part (the check passes where this is <= atol)."""
        magnitude = np.abs(stock.astype(np.float64))
        if self.of_max:
            magnitude = magnitude.max(initial=0.0)
        return float((diff - self.rtol * magnitude).max())


# float32: 1e-4, and 1e-5 of the outputs' magnitude where they are large (an LSTM with unbounded
# activations can reach thousands, where one float32 step is ~1e-4 and summation order shows).
FLOAT32_TOLERANCE = Tolerance(1e-4, 1e-5)
# float16 holds 11 significant bits: allow 4 of its steps (2^-10 each, relative) at the outputs'
# magnitude; ours computes in float32 and rounds once, stock rounds between layers.
FLOAT16_TOLERANCE = Tolerance(4 * 2.0 ** -10, 4 * 2.0 ** -10)


# The bound of each reduced precision mode (docs/ops.md, "Precision modes"): this one table serves
# `lstm-ort optimize --check` and the tests. atol at unit scale, and the same fraction of the
# outputs' magnitude where they are larger (rounding the operands errs relative to their size, as
# FLOAT16_TOLERANCE allows). "auto" may run tf32, so it is held to tf32's bound; fp32 has no entry:
# it is held to the element type's tolerance (default_tolerance), as before precision modes.
PRECISION_TOLERANCES = {
    "tf32": Tolerance(2e-3, 2e-3),
    "fp16": Tolerance(2e-2, 2e-2),
    "bf16": Tolerance(5e-2, 5e-2),
    "auto": Tolerance(2e-3, 2e-3),
}


# int8 FusedLSTM nodes against stock's DynamicQuantizeLSTM on one thread (docs/ops.md, "int8
# weights"): the levels and integer products are the same, but the float arithmetic around them is
# not, and a value within an ulp of a rounding boundary takes the other level. Such a step moves
# a gate by up to a level x |w|, the recurrence carries it on, and a model's own quantized layers
# after the LSTM step their levels too: a part of each output's magnitude, not of each element's.
INT8_TOLERANCE = Tolerance(2e-2, 5e-2, of_max=True)


def default_tolerance(model: onnx.ModelProto, precision: str = DEFAULT_PRECISION) -> Tolerance:
    """By element type (float16 if any graph input or output is float16), loosened to the bound
    of a reduced ``precision`` mode, and to INT8_TOLERANCE for a model with DynamicQuantizeLSTM."""
    values = [*model.graph.input, *model.graph.output]
    if any(v.type.tensor_type.elem_type == onnx.TensorProto.FLOAT16 for v in values):
        tolerance = precision_tolerance(precision, FLOAT16_TOLERANCE)
    else:
        tolerance = precision_tolerance(precision, FLOAT32_TOLERANCE)
    return looser(tolerance, INT8_TOLERANCE) if has_dynamic_quantize_lstm(model) else tolerance


def has_dynamic_quantize_lstm(model: onnx.ModelProto) -> bool:
    return any(n.op_type == "DynamicQuantizeLSTM" for g in iter_graphs(model) for n in g.node)


def precision_tolerance(precision, by_type: Tolerance = FLOAT32_TOLERANCE) -> Tolerance:
    """What the outputs of a model whose element type allows ``by_type`` are held to, against FP32
    stock onnxruntime, when its FusedLSTM nodes run in ``precision``: the looser of the two."""
    return looser(by_type, PRECISION_TOLERANCES.get(Precision.parse(precision).value, by_type))


@dataclass(frozen=True)
class CheckedPrecision:
    """What a check on the CPU computes for FusedLSTM nodes of ``mode``, and what to say about it."""

    mode: Precision
    runs: Precision  # what the CPU kernel computes for it: the bound the check holds the outputs to
    note: str  # for the check's line: "" where the CPU runs the mode itself
    session_precision: Precision | None = None  # the session option the check runs with (None: the nodes' own)


def checked_precision(mode) -> CheckedPrecision:
    """What `--check` (always on the CPU) computes for nodes of ``mode``: the op library's decision
    for this CPU (decide_precision). Where the CPU cannot run the mode (bf16 without bf16 units),
    the check runs the nodes in fp32 (optimized_session) and says so."""
    mode = Precision.parse(mode)
    try:
        decision = decide_precision("cpu", mode)
    except PrecisionRefused as e:
        return CheckedPrecision(mode, Precision.FP32, f"; this CPU cannot run {mode} ({e}): checked in fp32",
                                Precision.FP32)
    note = "" if decision.runs == mode else f"; on the CPU, {mode} runs {decision.words}"
    return CheckedPrecision(mode, decision.runs, note)


def looser(a: Tolerance, b: Tolerance) -> Tolerance:
    return Tolerance(max(a.atol, b.atol), max(a.rtol, b.rtol), a.of_max or b.of_max)
