"""Where a value's time and batch axes are, through the ops of a graph: the one axis analysis.

``AxisWalk`` follows every value computed from some starting values (a model input, or a
FusedLSTM stack's Y) with the axes that carry its time steps and batch entries, one handler per op
(``HANDLERS``), and flags every op that could mix time steps or batch entries: ops that pick,
reduce, normalize, slice, convolve or reshape along those axes, ops not known to act per time
step, reads of the shape, constants that vary along those axes. Its readers decide what a flag
means:

- ragged exactness (graph/ragged.py): every flag is a reason padding could change results;
- the batch axes of many streams (graph/batch_axes.py): only the batch axis is followed, with a
  trace of one stream's values for what the graph computes from shapes;
- the pipeline's partitioner (lstm_ort.pipeline.partition): a flag refuses the model, except
  picking constant time steps (``PICKS_TIME``: a classifier on the last step), which leaves a
  value with no time axis that a pipeline takes with whole sequences per item.

How Transpose, Squeeze and Unsqueeze move axes (``transposed``, ``squeezed``, ``unsqueezed``) is
written here once, for any per-axis list: ``Axes.roles()``, the pipeline's glue check
(pipeline/stack.py) and the feeds' batch axes (verify/feeds.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
import onnx
from onnx import helper, numpy_helper

from lstm_ort.ops.identity import is_fused
from lstm_ort.ops.spec import attribute

TIME, BATCH = "time", "batch"
DEFAULT_DOMAINS = ("", "ai.onnx")
PICKS_TIME = "picks time"  # the kind of flag a pipeline accepts (the others refuse)
WHOLE = 2**31 - 1  # a Slice end at or beyond this keeps the rest of the axis
# Recurrent ops of the default domain -> the index of their sequence_lens input.
RECURRENT = {"LSTM": 4, "GRU": 4, "RNN": 4}


@dataclass(frozen=True)
class Axes:
    """A value's rank and where its time and batch axes are (None: it has none; rank None: unknown)."""

    rank: int | None
    time: int | None
    batch: int | None

    @property
    def known(self) -> bool:
        return self.rank is not None

    @property
    def tracked(self) -> set[int]:
        return {a for a in (self.time, self.batch) if a is not None}

    def touches(self, axis: int) -> bool:
        return axis in self.tracked

    def roles(self) -> list[str | None]:
        """TIME, BATCH or None per axis."""
        out: list[str | None] = [None] * self.rank
        for role, axis in ((TIME, self.time), (BATCH, self.batch)):
            if axis is not None:
                out[axis] = role
        return out

    @classmethod
    def of_roles(cls, roles: list[str | None]) -> Axes:
        where = {r: k for k, r in enumerate(roles) if r}
        return cls(len(roles), where.get(TIME), where.get(BATCH))

    def moved(self, move: Callable[[list], list]) -> Axes:
        """The axes after an op that rearranges axes as ``move`` rearranges a per-axis list."""
        return Axes.of_roles(move(self.roles()))

    def without_time(self) -> Axes:
        return Axes(self.rank, None, self.batch)


UNKNOWN = Axes(None, None, None)


def recurrent_x(layout: int) -> Axes:
    """A recurrent node's X: [T, B, I], or [B, T, I] in layout 1."""
    return Axes(3, 0, 1) if layout == 0 else Axes(3, 1, 0)


def recurrent_outputs(layout: int, count: int = 3) -> list[Axes]:
    """A recurrent node's Y ([T, D, B, H], or [B, T, D, H] in layout 1) and final states ([L*D, B,
    H], or [B, L*D, H]), the first ``count``."""
    y = Axes(4, 0, 2) if layout == 0 else Axes(4, 1, 0)
    state = Axes(3, None, 1) if layout == 0 else Axes(3, None, 0)
    return [y, state, state][:count]


def norm(axis: int, rank: int) -> int:
    axis = int(axis)
    return axis + rank if axis < 0 else axis


def transposed(items: list, perm) -> list:
    """Transpose(perm) of a per-axis list (perm None: reversed)."""
    return [items[p] for p in perm] if perm else items[::-1]


def squeezed(items: list, axes) -> list:
    """Squeeze(axes) of a per-axis list."""
    gone = {norm(a, len(items)) for a in axes}
    return [x for k, x in enumerate(items) if k not in gone]


def unsqueezed(items: list, axes, fill=None) -> list:
    """Unsqueeze(axes) of a per-axis list: ``fill`` at each new axis."""
    rank = len(items) + len(axes)
    added, rest = {norm(a, rank) for a in axes}, iter(items)
    return [fill if k in added else next(rest) for k in range(rank)]


def node_axes(node: onnx.NodeProto, const: Callable[[str], np.ndarray | None], attr_name: str = "axes",
              index: int = 1) -> list[int] | None:
    """A node's axes, from its attribute (older opsets) or its input ``index`` (newer), constants
    read with ``const``; [] when it has neither, None when they are not constant."""
    value = attribute(node, attr_name)
    if value is not None:
        return [int(a) for a in value]
    if len(node.input) > index and node.input[index]:
        c = const(node.input[index])
        return None if c is None else [int(a) for a in np.atleast_1d(c)]
    return []


def slice_parts(node: onnx.NodeProto, const: Callable[[str], np.ndarray | None], opset: int,
                rank: int) -> list[tuple[int, int, int, int]] | None:
    """(axis, start, end, step) for each axis a Slice cuts (attributes before opset 10, constant
    inputs since, read with ``const``); None where they are not constant."""
    if opset >= 10:
        axes = node_axes(node, const, "axes", 3)
        starts, ends = const(node.input[1]), const(node.input[2])
        steps = const(node.input[4]) if len(node.input) > 4 and node.input[4] else None
        if len(node.input) > 4 and node.input[4] and steps is None:
            return None
    else:
        axes, starts, ends, steps = attribute(node, "axes", []), attribute(node, "starts"), attribute(node, "ends"), None
    if axes is None or starts is None or ends is None:
        return None
    starts, ends = [int(v) for v in np.ravel(starts)], [int(v) for v in np.ravel(ends)]
    axes = [norm(a, rank) for a in axes] if len(axes) else list(range(len(starts)))
    steps = [1] * len(axes) if steps is None else [int(v) for v in np.ravel(steps)]
    return list(zip(axes, starts, ends, steps))


def keeps_whole(start: int, end: int, step: int) -> bool:
    """A Slice of an axis that keeps all of it."""
    return start == 0 and end >= WHOLE and step == 1


class Constants:
    """A graph's constant values (initializers and Constant nodes) by name, converted when read."""

    def __init__(self, arrays: dict | None = None, tensors: dict | None = None) -> None:
        self.arrays = arrays if arrays is not None else {}
        self.tensors = tensors or {}

    @classmethod
    def of_graph(cls, graph: onnx.GraphProto) -> Constants:
        tensors, arrays = {i.name: i for i in graph.initializer}, {}
        for node in graph.node:
            if node.op_type == "Constant" and node.domain in DEFAULT_DOMAINS and node.attribute:
                a = node.attribute[0]
                if a.name == "value":
                    tensors[node.output[0]] = a.t
                elif a.name in ("value_float", "value_floats", "value_int", "value_ints"):
                    dtype = np.float32 if a.name.startswith("value_float") else np.int64
                    arrays[node.output[0]] = np.array(helper.get_attribute_value(a), dtype)
        return cls(arrays, tensors)

    def get(self, name: str) -> np.ndarray | None:
        if name in self.arrays:
            return self.arrays[name]
        tensor = self.tensors.get(name)
        if tensor is None:
            return None
        self.arrays[name] = value = numpy_helper.to_array(tensor)
        return value

    def rank(self, name: str) -> int | None:
        if name in self.arrays:
            return np.ndim(self.arrays[name])
        tensor = self.tensors.get(name)
        return None if tensor is None else len(tensor.dims)


class AxisWalk:
    """Follows every value computed from ``starts`` (value -> Axes) through ``graph``; ``reasons``
    collects the flags. Subclasses choose what a flag does (``flag``) and how recurrent nodes are
    read (``recurrent``); ``walk`` runs the graph, ``visit`` one node."""

    def __init__(self, graph: onnx.GraphProto, opset: int, starts: dict[str, Axes],
                 consts: Constants | None = None) -> None:
        self.graph, self.opset = graph, opset
        self.consts = consts if consts is not None else Constants.of_graph(graph)
        self.values: dict[str, Axes] = dict(starts)
        self.reasons: list[str] = []

    # -- what subclasses choose ----------------------------------------------------------------
    def flag(self, node: onnx.NodeProto, why: str, kind: str = "") -> None:
        """``node`` could mix time steps or batch entries (``kind`` PICKS_TIME: it picks constant time steps)."""
        self.reasons.append(f"{node.op_type} node {node.name or node.output[0]!r} {why}")

    def recurrent(self, index: int, node: onnx.NodeProto, seq_lens_index: int) -> list[Axes]:
        """A FusedLSTM or stock LSTM/GRU/RNN node reading a followed value."""
        self.flag(node, "is not known to act per time step")
        return [UNKNOWN] * len(node.output)

    # -- reading the graph ---------------------------------------------------------------------
    def attr(self, node: onnx.NodeProto, name: str, default=None):
        return attribute(node, name, default)

    def const(self, name: str) -> np.ndarray | None:
        return self.consts.get(name) if name and name not in self.values else None

    def const_rank(self, name: str) -> int | None:
        return self.consts.rank(name) if name and name not in self.values else None

    def axes_input(self, node: onnx.NodeProto, attr_name: str = "axes", index: int = 1) -> list[int] | None:
        return node_axes(node, self.const, attr_name, index)

    def walk(self, graph: onnx.GraphProto) -> None:
        for index, node in enumerate(graph.node):
            if any(i in self.values for i in node.input if i):
                for name, axes in zip(node.output, self.visit(index, node)):
                    if name:
                        self.values[name] = axes

    def visit(self, index: int, node: onnx.NodeProto) -> list[Axes]:
        """The axes of ``node``'s outputs; flags what could mix time steps or batch entries."""
        n_out = len(node.output)
        if any(not self.values[i].known for i in node.input if i in self.values):
            return [UNKNOWN] * n_out  # already flagged upstream
        op = node.op_type
        if is_fused(node):
            return self.recurrent(index, node, 3)
        if node.domain in DEFAULT_DOMAINS and op in RECURRENT:
            return self.recurrent(index, node, RECURRENT[op])
        handler = HANDLERS.get(op) if node.domain in (*DEFAULT_DOMAINS, "com.microsoft") else None
        if handler is None:
            self.flag(node, "is not known to act per time step")
            return [UNKNOWN] * n_out
        first = next(self.values[i] for i in node.input if i in self.values)
        out = handler(self, node, first)
        return out + [UNKNOWN] * (n_out - len(out))

    def same(self, node: onnx.NodeProto) -> Axes:
        """The axes every followed input of ``node`` shares (flagged where they differ)."""
        seen = {self.values[i] for i in node.input if i in self.values}
        if len(seen) != 1:
            self.flag(node, "combines values whose time or batch axes differ")
            return UNKNOWN
        return seen.pop()

    def check_constant(self, node: onnx.NodeProto, name: str, out: Axes) -> None:
        """A constant operand broadcast onto ``out`` must not vary along its time or batch axis."""
        c = self.const(name)
        if c is None:
            return
        shape = (1,) * (out.rank - np.ndim(c)) + np.shape(c)
        if any(shape[a] != 1 for a in out.tracked):
            self.flag(node, "adds a constant that varies along the time or batch axis")


Handler = Callable[[AxisWalk, onnx.NodeProto, Axes], list[Axes]]
HANDLERS: dict[str, Handler] = {}


def handles(*ops: str):
    def register(handler: Handler) -> Handler:
        for op in ops:
            HANDLERS[op] = handler
        return handler
    return register


# -- ops that act on each element ------------------------------------------------------------

@handles("Abs", "Acos", "Acosh", "Add", "And", "Asin", "Asinh", "Atan", "Atanh", "BitShift", "Cast", "CastLike",
         "Ceil", "Celu", "Clip", "Cos", "Cosh", "Div", "Dropout", "Elu", "Equal", "Erf", "Exp", "Floor", "Gelu",
         "Greater", "GreaterOrEqual", "HardSigmoid", "HardSwish", "Identity", "IsInf", "IsNaN", "LeakyRelu", "Less",
         "LessOrEqual", "Log", "Max", "Mean", "Min", "Mish", "Mod", "Mul", "Neg", "Not", "Or", "Pow", "PRelu",
         "Reciprocal", "Relu", "Round", "Selu", "Sigmoid", "Sign", "Sin", "Sinh", "Softplus", "Softsign", "Sqrt",
         "Sub", "Sum", "Tan", "Tanh", "ThresholdedRelu", "Where", "Xor", "QuickGelu", "FastGelu")
def _elementwise(w: AxisWalk, node, first: Axes) -> list[Axes]:
    """Each element (constants broadcast onto it): the axes stay, right-aligned to the largest rank."""
    ranks = [w.values[i].rank if i in w.values else w.const_rank(i) for i in node.input if i]
    if any(k is None for k in ranks):
        w.flag(node, "broadcasts with a value of unknown rank")
        return [UNKNOWN] * len(node.output)
    rank = max(ranks)
    aligned = {Axes(rank, *(None if a is None else a + rank - v.rank for a in (v.time, v.batch)))
               for i in node.input if (v := w.values.get(i))}
    if len(aligned) != 1:
        w.flag(node, "combines values whose time or batch axes differ")
        return [UNKNOWN] * len(node.output)
    out = aligned.pop()
    for name in node.input:
        w.check_constant(node, name, out)
    return [out] * len(node.output)


# -- ops that mix along some axes ------------------------------------------------------------

@handles("Softmax", "LogSoftmax", "Hardmax", "LayerNormalization", "RMSNormalization")
def _normalization(w: AxisWalk, node, x: Axes) -> list[Axes]:
    if node.op_type in ("LayerNormalization", "RMSNormalization"):
        mixed = range(norm(w.attr(node, "axis", -1), x.rank), x.rank)
    elif w.opset >= 13:
        mixed = [norm(w.attr(node, "axis", -1), x.rank)]
    else:  # coerced to 2-D: every axis from `axis` on is mixed
        mixed = range(norm(w.attr(node, "axis", 1), x.rank), x.rank)
    if x.tracked & set(mixed):
        w.flag(node, "normalizes along the time or batch axis")
    if any(i in w.values for i in node.input[1:] if i):
        w.flag(node, "normalizes with a scale or bias computed from the input")
    return [x]


@handles("ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2", "ReduceLogSum",
         "ReduceLogSumExp", "ReduceSumSquare", "ArgMax", "ArgMin")
def _reduce(w: AxisWalk, node, x: Axes) -> list[Axes]:
    keep = int(w.attr(node, "keepdims", 1))
    if node.op_type in ("ArgMax", "ArgMin"):
        axes = [int(w.attr(node, "axis", 0))]
    else:
        axes = w.axes_input(node)
        if axes is None:
            w.flag(node, "reduces over axes that are not constant")
            return [UNKNOWN]
    axes = sorted({norm(a, x.rank) for a in axes}) if axes else list(range(x.rank))
    if x.tracked & set(axes):
        w.flag(node, "reduces over the time or batch axis (e.g. a mean over time)")
    return [x if keep else x.moved(lambda r: squeezed(r, axes))]


@handles("MatMul", "MatMulInteger")
def _matmul(w: AxisWalk, node, x: Axes) -> list[Axes]:
    if node.input[0] in w.values and w.const_rank(node.input[1]) == 2:
        if x.touches(x.rank - 1):
            w.flag(node, "multiplies along the time or batch axis")
        return [x]
    w.flag(node, "is not a per-step product with a constant matrix")
    return [UNKNOWN]


@handles("Gemm")
def _gemm(w: AxisWalk, node, x: Axes) -> list[Axes]:
    if node.input[0] not in w.values or any(i in w.values for i in node.input[1:]):
        w.flag(node, "is not a per-step product with a constant matrix")
        return [UNKNOWN]
    contracted = 0 if int(w.attr(node, "transA", 0)) else 1
    if x.touches(contracted):
        w.flag(node, "multiplies along the time or batch axis")
    out = Axes(2, 0 if x.time is not None else None, 0 if x.batch is not None else None)
    if len(node.input) > 2:
        w.check_constant(node, node.input[2], out)
    return [out]


@handles("Conv", "ConvTranspose", "ConvInteger", "MaxPool", "AveragePool", "LpPool", "GlobalAveragePool",
         "GlobalMaxPool", "GlobalLpPool", "InstanceNormalization", "BatchNormalization", "LRN")
def _per_sample(w: AxisWalk, node, x: Axes) -> list[Axes]:
    """Each entry of axis 0 on its own, given constant weights: convolutions and pooling mix every
    other axis; BatchNormalization (inference) and LRN act along the channels (axis 1) only."""
    if node.input[0] not in w.values or any(i in w.values for i in node.input[1:] if i):
        w.flag(node, "takes weights computed from the input")
        return [UNKNOWN]
    channels_only = node.op_type in ("BatchNormalization", "LRN")
    if x.batch != 0:
        w.flag(node, f"acts on each entry of axis 0, the batch axis is {x.batch}")
        return [UNKNOWN]
    if channels_only and x.touches(1) or not channels_only and x.time is not None:
        w.flag(node, "convolves or pools along the time axis" if not channels_only else
               "acts along the time axis (its channels)")
    if node.op_type == "BatchNormalization" and int(w.attr(node, "training_mode", 0)):
        w.flag(node, "normalizes over the batch (training mode)")
    return [x if channels_only else Axes(x.rank, None, 0)]


# -- ops that move axes ----------------------------------------------------------------------

@handles("Transpose")
def _transpose(w: AxisWalk, node, x: Axes) -> list[Axes]:
    return [x.moved(lambda r: transposed(r, w.attr(node, "perm")))]


@handles("Squeeze", "Unsqueeze")
def _squeeze(w: AxisWalk, node, x: Axes) -> list[Axes]:
    axes = w.axes_input(node)
    if axes is None:
        w.flag(node, "has axes that are not constant")
        return [UNKNOWN]
    if node.op_type == "Unsqueeze":
        return [x.moved(lambda r: unsqueezed(r, axes))]
    if not axes:
        w.flag(node, "squeezes unnamed axes (the batch or time axis could be 1)")
        return [UNKNOWN]
    axes = [norm(a, x.rank) for a in axes]
    if x.batch in axes:
        w.flag(node, "squeezes the batch axis")
        return [UNKNOWN]
    if x.time in axes:
        w.flag(node, "squeezes the time axis")
    return [x.moved(lambda r: squeezed(r, axes))]


@handles("Reshape")
def _reshape(w: AxisWalk, node, x: Axes) -> list[Axes]:
    """Only a constant shape that keeps the leading axes up to the time and batch axes (0s)."""
    shape = w.const(node.input[1])
    if shape is None or int(w.attr(node, "allowzero", 0)):
        w.flag(node, "reshapes to a shape that is not a constant")
        return [UNKNOWN]
    shape = [int(s) for s in np.ravel(shape)]
    keep = max(x.tracked, default=-1)
    if len(shape) > keep and all(shape[j] == 0 for j in range(keep + 1)):
        return [Axes(len(shape), x.time, x.batch)]
    w.flag(node, "reshapes the time or batch axis")
    return [UNKNOWN]


@handles("Gather")
def _gather(w: AxisWalk, node, x: Axes) -> list[Axes]:
    data, idx = node.input[0], node.input[1]
    axis = int(w.attr(node, "axis", 0))
    if data not in w.values:  # an embedding: the table is constant, the ids carry the axes
        rank = w.const_rank(data)
        if rank is None:
            w.flag(node, "gathers from a table that is not constant")
            return [UNKNOWN]
        axis = norm(axis, rank)
        ids = w.values[idx]
        return [Axes(rank - 1 + ids.rank, None if ids.time is None else ids.time + axis,
                     None if ids.batch is None else ids.batch + axis)]
    axis = norm(axis, x.rank)
    ids = w.const(idx)
    if idx in w.values or ids is None:
        w.flag(node, "gathers with indices computed from the input")
        return [UNKNOWN]
    if axis == x.batch:
        w.flag(node, "picks batch entries")
    elif axis == x.time:
        w.flag(node, "picks time steps (e.g. Y[:, -1], the last padded step)", PICKS_TIME)
        x = x.without_time()
    grow = np.ndim(ids)  # the indices' axes replace ``axis``
    return [x.moved(lambda r: r[:axis] + [None] * grow + r[axis + 1:])]


@handles("Slice")
def _slice(w: AxisWalk, node, x: Axes) -> list[Axes]:
    parts = slice_parts(node, w.const, w.opset, x.rank)
    if parts is None:
        w.flag(node, "slices with bounds that are not constant")
        return [UNKNOWN]
    out = x
    for a, s, e, st in parts:
        if keeps_whole(s, e, st):
            continue
        if a == x.batch:
            w.flag(node, "slices the batch axis")
        elif a == x.time:
            w.flag(node, "slices the time axis (e.g. Y[:, -1], the last padded step)", PICKS_TIME)
            out = out.without_time()
    return [out]


@handles("Concat")
def _concat(w: AxisWalk, node, x: Axes) -> list[Axes]:
    if x.touches(norm(w.attr(node, "axis", 0), x.rank)):
        w.flag(node, "concatenates along the time or batch axis")
    if any(i not in w.values for i in node.input if i):
        w.flag(node, "concatenates a value without the time or batch axis (of a fixed size) to one with it")
    return [w.same(node)]


@handles("Split")
def _split(w: AxisWalk, node, x: Axes) -> list[Axes]:
    if x.touches(norm(w.attr(node, "axis", 0), x.rank)):
        w.flag(node, "splits along the time or batch axis")
    return [x] * len(node.output)


@handles("Pad")
def _pad(w: AxisWalk, node, x: Axes) -> list[Axes]:
    if any(i in w.values for i in node.input[1:] if i):
        w.flag(node, "pads by amounts computed from the input")
        return [UNKNOWN]
    pads = w.attr(node, "pads") if w.opset < 11 else w.const(node.input[1])
    if pads is None:
        w.flag(node, "pads by amounts that are not constant")
        return [UNKNOWN]
    pads = [int(p) for p in np.ravel(pads)]
    axes = w.axes_input(node, "axes", 3) if w.opset >= 18 else []
    if axes is None:
        w.flag(node, "pads axes that are not constant")
        return [UNKNOWN]
    axes = [norm(a, x.rank) for a in axes] if axes else list(range(x.rank))
    if any(x.touches(a) and (pads[k] or pads[k + len(axes)]) for k, a in enumerate(axes)):
        w.flag(node, "pads the time or batch axis")
    return [x]


@handles("Expand")
def _expand(w: AxisWalk, node, x: Axes) -> list[Axes]:
    shape = w.const(node.input[1])
    if node.input[0] not in w.values or shape is None:
        w.flag(node, "expands to a shape that is not a constant")
        return [UNKNOWN]
    shape = [int(s) for s in np.ravel(shape)]
    rank = max(x.rank, len(shape))
    out = x.moved(lambda r: [None] * (rank - x.rank) + r)
    if any(a >= rank - len(shape) and shape[a - (rank - len(shape))] != 1 for a in out.tracked):
        w.flag(node, "expands the time or batch axis to a fixed size")
        return [UNKNOWN]
    return [out]


@handles("Shape", "Size")
def _shape(w: AxisWalk, node, x: Axes) -> list[Axes]:
    w.flag(node, "reads the padded shape")
    return [UNKNOWN]  # flagged already; no further noise downstream


@handles("Loop", "Scan", "If")
def _subgraph(w: AxisWalk, node, x: Axes) -> list[Axes]:
    w.flag(node, "runs a subgraph (not analysed)")
    return [UNKNOWN] * len(node.output)


# -- backwards: the pipeline's ops before its stack --------------------------------------------

def input_axes(w: AxisWalk, node: onnx.NodeProto, out: Axes) -> dict[str, Axes] | str:
    """The axes of ``node``'s non-constant inputs under which its first output has ``out`` (each
    input the same), proved by the forward handler; else why they cannot be told."""
    op, where = node.op_type, f"{node.op_type} node {node.name!r}"
    var = [n for n in node.input if n and w.consts.get(n) is None]
    if not var:
        return f"{where} has only constant inputs"
    if op == "Gather" and w.consts.get(node.input[0]) is not None:  # an embedding: the ids carry the axes
        rank = w.consts.rank(node.input[0])
        axis, ids_rank = norm(w.attr(node, "axis", 0), rank), out.rank - rank + 1
        if any(not axis <= a < axis + ids_rank for a in out.tracked):
            return f"{where}: the time/batch axes are not the indices' axes"
        guess = out.moved(lambda r: r[axis:axis + ids_rank])
    elif op == "Transpose":
        perm = w.attr(node, "perm") or list(range(out.rank))[::-1]
        guess = out.moved(lambda r: [r[perm.index(k)] for k in range(len(r))])
    elif op in ("Squeeze", "Unsqueeze"):
        axes = w.axes_input(node)
        if not axes:
            return f"{where}: its axes are not given"
        if op == "Squeeze":
            guess = out.moved(lambda r: unsqueezed(r, axes))
        elif any(out.touches(norm(a, out.rank)) for a in axes):
            return f"Unsqueeze node {node.name!r} creates the time or batch axis"
        else:
            guess = out.moved(lambda r: squeezed(r, axes))
    elif op == "Reshape":
        return f"Reshape node {node.name!r} before the LSTM: its input's time/batch axes are unknown"
    else:
        guess = out
    w.values.update({n: guess for n in var})
    if w.visit(0, node)[0] != out:
        return f"{where}: cannot tell where its input's time and batch axes are"
    return {n: guess for n in var}
