"""Where the time and batch axes of a tensor are, through the per-time-step ops a pipeline keeps
around its FusedLSTM stack (an embedding before, a classifier after).

A pipeline cuts every input into micro-batches (the batch axis) and time chunks (the time axis) and
glues the outputs back, so each op around the stack must act on each (time step, batch entry) on
its own. The ops below do, when their other operands are constants that do not broadcast along
time or batch: elementwise ops, MatMul by a constant matrix, Gather from a constant table (an
embedding), Gemm of a [batch, features] value by constants (a Linear), softmax-like ops and
layer norm over a feature axis, Transpose, Squeeze, Unsqueeze, Reshape that keep the time and
batch axes, Concat and Slice along another axis. Gather or Slice of constant time steps (``y[:,
-1]``, a classifier on the last step) acts on each batch entry on its own but leaves a value with
no time axis: a pipeline takes it with whole sequences per item (micro-batches), not time chunks.
Anything else is refused, naming the node and the op.
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
SUPPORTED = UNARY | BINARY | FEATURE_AXIS | SHAPE_OPS | {"MatMul", "Gemm", "Gather", "Slice", "Concat"}


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


def axes_list(node: onnx.NodeProto, consts: dict, opset: int) -> list[int] | None:
    """Squeeze/Unsqueeze axes: an attribute before opset 13, the second input since."""
    if opset < 13:
        value = attr(node, "axes")
        return None if value is None else [int(a) for a in value]
    if len(node.input) < 2 or not node.input[1]:
        return None
    if node.input[1] not in consts:
        raise Unsupported(f"{node.op_type} node {node.name!r}: its axes are not a constant")
    return [int(a) for a in np.asarray(consts[node.input[1]]).ravel()]


def _norm(axis: int, rank: int) -> int:
    return int(axis) + rank if int(axis) < 0 else int(axis)


def _slice_axes(node: onnx.NodeProto, consts: dict, rank: int, opset: int) -> list[tuple[int, bool]]:
    """(axis, whether the slice keeps all of it) for each axis a Slice with constant bounds cuts."""
    if opset < 10:
        starts, ends, axes, steps = attr(node, "starts"), attr(node, "ends"), attr(node, "axes"), None
    else:
        vals = []
        for k in range(1, 5):
            name = node.input[k] if len(node.input) > k else ""
            if name and name not in consts:
                raise Unsupported(f"Slice node {node.name!r}: its bounds are computed")
            vals.append(consts[name] if name else None)
        starts, ends, axes, steps = vals
    starts = [int(v) for v in np.asarray(starts).ravel()]
    ends = [int(v) for v in np.asarray(ends).ravel()]
    axes = list(range(len(starts))) if axes is None else [_norm(a, rank) for a in np.asarray(axes).ravel()]
    steps = [1] * len(starts) if steps is None else [int(v) for v in np.asarray(steps).ravel()]
    return [(a, s == 0 and e >= 2**31 - 1 and st == 1) for a, s, e, st in zip(axes, starts, ends, steps)]


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
    if op == "Gemm":
        if node.input[0] in consts or any(i and i not in consts for i in node.input[1:]) or attr(node, "transA", 0):
            raise Unsupported(f"Gemm node {node.name!r}: only x @ (constant matrix) + (constant) is supported")
        if first.rank != 2 or first.touches(1):
            raise Unsupported(f"Gemm node {node.name!r} contracts the time or batch axis")
        if len(node.input) > 2 and node.input[2]:
            _check_const_operand(node, consts[node.input[2]], first)
        return first
    if op == "Gather":
        if node.input[0] in consts:
            if node.input[1] in consts or attr(node, "axis", 0) != 0:
                raise Unsupported(f"Gather node {node.name!r}: only a lookup in a constant table along axis 0 "
                                  f"(an embedding) is supported")
            return Axes(first.rank + np.ndim(consts[node.input[0]]) - 1, first.time, first.batch)
        if node.input[1] not in consts:
            raise Unsupported(f"Gather node {node.name!r}: its indices are computed")
        axis = _norm(attr(node, "axis", 0), first.rank)
        if axis == first.batch:
            raise Unsupported(f"Gather node {node.name!r} picks batch entries")
        grow = np.ndim(consts[node.input[1]]) - 1  # the indices' axes replace ``axis``

        def moved(a):
            return None if a is None or a == axis else (a if a < axis else a + grow)
        return Axes(first.rank + grow, moved(first.time), moved(first.batch))
    if op == "Slice":
        for a, whole in _slice_axes(node, consts, first.rank, opset):
            if a == first.batch and not whole:
                raise Unsupported(f"Slice node {node.name!r} slices the batch axis")
            if a == first.time and not whole:  # constant steps picked: no longer the call's time axis
                return Axes(first.rank, None, first.batch)
        return first
    if op == "Concat":
        axis = _norm(attr(node, "axis", 0), first.rank)
        if first.touches(axis):
            raise Unsupported(f"Concat node {node.name!r} joins along the time or batch axis")
        for name in node.input:
            if name in consts:
                raise Unsupported(f"Concat node {node.name!r} joins a constant (it has no time/batch axes)")
        return first
    if op == "Transpose":
        perm = attr(node, "perm") or list(range(first.rank))[::-1]
        where = {old: new for new, old in enumerate(perm)}
        return Axes(first.rank, where.get(first.time) if first.time is not None else None,
                    where.get(first.batch) if first.batch is not None else None)
    if op in ("Squeeze", "Unsqueeze"):
        axes = axes_list(node, consts, opset)
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
        axes = axes_list(node, consts, opset)
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
