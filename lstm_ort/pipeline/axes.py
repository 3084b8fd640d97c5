"""Where the time and batch axes of a tensor are, through the per-time-step ops a pipeline keeps
around its FusedLSTM stack (an embedding before, a classifier after).

A pipeline cuts every input into micro-batches (the batch axis) and time chunks (the time axis) and
glues the outputs back, so each op around the stack must act on each (time step, batch entry) on
its own. The ops below do, when their other operands are constants that do not broadcast along
time or batch: elementwise ops, MatMul by a constant matrix, Gather from a constant table (an
embedding), softmax-like ops and layer norm over a feature axis, and Transpose, Squeeze,
Unsqueeze, Reshape that keep the time and batch axes. Anything else is refused with a reason.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx

UNARY = {
    "Identity", "Cast", "Relu", "Tanh", "Sigmoid", "Dropout", "Erf", "Exp", "Log", "Neg", "Abs", "Sqrt",
    "LeakyRelu", "Elu", "Selu", "HardSigmoid", "HardSwish", "Softplus", "Softsign", "Gelu", "Clip", "Sin",
    "Cos", "Floor", "Ceil", "Round", "Reciprocal", "Not", "Sign", "ThresholdedRelu", "Mish",
}
BINARY = {"Add", "Sub", "Mul", "Div", "Pow", "Max", "Min", "PRelu", "And", "Or", "Equal", "Less", "Greater"}
FEATURE_AXIS = {"Softmax", "LogSoftmax", "Hardmax", "LayerNormalization", "RMSNormalization"}
SHAPE_OPS = {"Transpose", "Squeeze", "Unsqueeze", "Reshape"}
SUPPORTED = UNARY | BINARY | FEATURE_AXIS | SHAPE_OPS | {"MatMul", "Gather"}


class Unsupported(ValueError):
    """The model is not one a pipeline can split; the message says why."""


@dataclass(frozen=True)
class Axes:
    """A tensor's rank and where its time and batch axes are (None: it has none)."""

    rank: int
    time: int | None
    batch: int | None

    def touches(self, axis: int) -> bool:
        return axis in (self.time, self.batch)


def attr(node: onnx.NodeProto, name: str, default=None):
    for a in node.attribute:
        if a.name == name:
            return onnx.helper.get_attribute_value(a)
    return default


def _axes_list(node: onnx.NodeProto, consts: dict, opset: int) -> list[int] | None:
    """Squeeze/Unsqueeze axes: an attribute before opset 13, the second input since."""
    if opset < 13:
        value = attr(node, "axes")
        return None if value is None else [int(a) for a in value]
    if len(node.input) < 2 or not node.input[1]:
        return None
    if node.input[1] not in consts:
        raise Unsupported(f"{node.op_type} node {node.name!r}: its axes are not a constant")
    return [int(a) for a in np.asarray(consts[node.input[1]]).ravel()]


def _check_const_operand(node: onnx.NodeProto, const: np.ndarray, out: Axes) -> None:
    """A constant operand of an elementwise op must not vary along time or batch."""
    shape = np.shape(const)
    if len(shape) > out.rank:
        raise Unsupported(f"{node.op_type} node {node.name!r}: a constant operand of rank {len(shape)} broadcasts the "
                          f"rank-{out.rank} tensor up")
    for axis in (out.time, out.batch):
        if axis is None:
            continue
        k = axis - (out.rank - len(shape))  # right-aligned broadcasting
        if k >= 0 and shape[k] != 1:
            raise Unsupported(f"{node.op_type} node {node.name!r}: a constant operand varies along the "
                              f"{'time' if axis == out.time else 'batch'} axis")


def _feature_axis(node: onnx.NodeProto, rank: int, opset: int) -> list[int]:
    """The axes a softmax-like op or a norm mixes."""
    if node.op_type in ("LayerNormalization", "RMSNormalization"):
        axis = attr(node, "axis", -1)
        axis = axis + rank if axis < 0 else axis
        return list(range(axis, rank))
    if opset < 13:  # coerced to 2-D: every axis from `axis` on is mixed
        axis = attr(node, "axis", 1)
        axis = axis + rank if axis < 0 else axis
        return list(range(axis, rank))
    axis = attr(node, "axis", -1)
    return [axis + rank if axis < 0 else axis]


def forward(node: onnx.NodeProto, inputs: dict[str, Axes], consts: dict, opset: int) -> Axes:
    """The axes of ``node``'s first output, given the axes of its non-constant inputs (``inputs``).
    Raises Unsupported when the op could mix time steps or batch entries."""
    op = node.op_type
    var = [n for n in node.input if n and n not in consts]
    if op not in SUPPORTED:
        raise Unsupported(f"op {op} (node {node.name!r}) is not one the pipeline can cut by time or batch "
                          f"(supported: per-time-step ops, see docs/pipeline.md)")
    if not var:
        raise Unsupported(f"node {node.name!r} has only constant inputs")
    first = inputs[var[0]]
    for name in var[1:]:
        if inputs[name] != first:
            raise Unsupported(f"{op} node {node.name!r}: its inputs have different time/batch axes")
    if op in UNARY:
        return first
    if op in BINARY:
        for name in node.input:
            if name in consts:
                _check_const_operand(node, consts[name], first)
        return first
    if op in FEATURE_AXIS:
        mixed = _feature_axis(node, first.rank, opset)
        if any(first.touches(a) for a in mixed):
            raise Unsupported(f"{op} node {node.name!r} mixes the time or batch axis")
        for name in node.input[1:]:
            if name and name not in consts:
                raise Unsupported(f"{op} node {node.name!r}: its scale/bias is not a constant")
        return first
    if op == "MatMul":
        if node.input[0] in consts or node.input[1] not in consts or np.ndim(consts[node.input[1]]) != 2:
            raise Unsupported(f"MatMul node {node.name!r}: only x @ (constant matrix) is supported")
        if first.rank < 2 or first.touches(first.rank - 1):
            raise Unsupported(f"MatMul node {node.name!r} contracts the time or batch axis")
        return first
    if op == "Gather":
        if node.input[0] not in consts or node.input[1] in consts or attr(node, "axis", 0) != 0:
            raise Unsupported(f"Gather node {node.name!r}: only a lookup in a constant table along axis 0 "
                              f"(an embedding) is supported")
        return Axes(first.rank + np.ndim(consts[node.input[0]]) - 1, first.time, first.batch)
    if op == "Transpose":
        perm = attr(node, "perm") or list(range(first.rank))[::-1]
        where = {old: new for new, old in enumerate(perm)}
        return Axes(first.rank, where.get(first.time) if first.time is not None else None,
                    where.get(first.batch) if first.batch is not None else None)
    if op in ("Squeeze", "Unsqueeze"):
        axes = _axes_list(node, consts, opset)
        if axes is None:
            raise Unsupported(f"{op} node {node.name!r}: its axes are not given")
        if op == "Squeeze":
            axes = sorted(a + first.rank if a < 0 else a for a in axes)
            if any(first.touches(a) for a in axes):
                raise Unsupported(f"Squeeze node {node.name!r} removes the time or batch axis")
            shift = lambda a: None if a is None else a - sum(1 for s in axes if s < a)
            return Axes(first.rank - len(axes), shift(first.time), shift(first.batch))
        rank = first.rank + len(axes)
        axes = sorted(a + rank if a < 0 else a for a in axes)
        kept = [k for k in range(rank) if k not in axes]  # old axis i -> kept[i]
        return Axes(rank, None if first.time is None else kept[first.time],
                    None if first.batch is None else kept[first.batch])
    if op == "Reshape":
        if node.input[1] not in consts:
            raise Unsupported(f"Reshape node {node.name!r}: its shape is not a constant")
        if attr(node, "allowzero", 0):
            raise Unsupported(f"Reshape node {node.name!r}: allowzero=1")
        shape = [int(s) for s in np.asarray(consts[node.input[1]]).ravel()]
        lead = max(a for a in (first.time, first.batch) if a is not None) if (first.time, first.batch) != (None, None) else -1
        if len(shape) <= lead or any(shape[k] != 0 for k in range(lead + 1)):
            raise Unsupported(f"Reshape node {node.name!r}: only shapes that keep the leading time and batch axes "
                              f"(0 in the shape) are supported, got {shape}")
        return Axes(len(shape), first.time, first.batch)
    raise AssertionError(op)


def backward(node: onnx.NodeProto, out: Axes, consts: dict, opset: int) -> dict[str, Axes]:
    """The axes of ``node``'s non-constant inputs, given its output's; checks with ``forward``."""
    op = node.op_type
    var = [n for n in node.input if n and n not in consts]
    if op == "Gather" and node.input[0] in consts:
        rank = out.rank - np.ndim(consts[node.input[0]]) + 1
        if any(a is not None and a >= rank for a in (out.time, out.batch)):
            raise Unsupported(f"Gather node {node.name!r}: the time/batch axes are not the indices' axes")
        guess = Axes(rank, out.time, out.batch)
    elif op == "Transpose":
        perm = attr(node, "perm") or list(range(out.rank))[::-1]
        guess = Axes(out.rank, None if out.time is None else perm[out.time],
                     None if out.batch is None else perm[out.batch])
    elif op in ("Squeeze", "Unsqueeze"):
        axes = _axes_list(node, consts, opset)
        if axes is None:
            raise Unsupported(f"{op} node {node.name!r}: its axes are not given")
        if op == "Unsqueeze":
            axes = sorted(a + out.rank if a < 0 else a for a in axes)
            if any(out.touches(a) for a in axes):
                raise Unsupported(f"Unsqueeze node {node.name!r} creates the time or batch axis")
            shift = lambda a: None if a is None else a - sum(1 for s in axes if s < a)
            guess = Axes(out.rank - len(axes), shift(out.time), shift(out.batch))
        else:
            rank = out.rank + len(axes)
            axes = sorted(a + rank if a < 0 else a for a in axes)
            kept = [k for k in range(rank) if k not in axes]
            guess = Axes(rank, None if out.time is None else kept[out.time],
                         None if out.batch is None else kept[out.batch])
    elif op == "Reshape":
        raise Unsupported(f"Reshape node {node.name!r} before the LSTM: its input's time/batch axes are unknown")
    else:
        guess = out
    got = forward(node, {n: guess for n in var}, consts, opset)
    if got != out:
        raise Unsupported(f"{op} node {node.name!r}: cannot tell where its input's time and batch axes are")
    return {n: guess for n in var}
