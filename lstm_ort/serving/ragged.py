"""Is a model ragged-exact? Which input carries the sequences, and where are its time and batch axes?

Walks the main graph forward from each candidate input under both hypotheses (time axis 0 and
batch axis 1, or the reverse), following every value that depends on it and where its time and
batch axes sit. The hypothesis under which the input reaches a FusedLSTM's (or LSTM's) X in that
node's layout wins. Along the way, every op that could let padded time steps change the real
ones is flagged: ops that pick, reduce, slice, convolve or reshape along the time (or batch)
axis, ops not known to act per time step, reads of the padded shape, and recurrent nodes without
``sequence_lens`` whose results past-the-end padding would change (reverse directions, final
states). A model is ragged-exact when nothing is flagged and every output's batch axis is known.

Plain onnx + numpy: the batcher (serving) and the rewriter's ``--sequence-lens-input`` share it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import numpy_helper

from lstm_ort.ops.identity import DOMAIN, OP_TYPE

SEQUENCE_LENS = "sequence_lens"  # the input name `optimize(sequence_lens_input=True)` adds

# Ops that act on each element (or broadcast constants onto each element): they keep the axes.
_ELEMENTWISE = {
    "Abs", "Acos", "Acosh", "Add", "And", "Asin", "Asinh", "Atan", "Atanh", "BitShift", "Cast", "CastLike", "Ceil",
    "Celu", "Clip", "Cos", "Cosh", "Div", "Dropout", "Elu", "Equal", "Erf", "Exp", "Floor", "Gelu", "Greater",
    "GreaterOrEqual", "HardSigmoid", "HardSwish", "Identity", "IsInf", "IsNaN", "LeakyRelu", "Less", "LessOrEqual",
    "Log", "Max", "Mean", "Min", "Mish", "Mod", "Mul", "Neg", "Not", "Or", "Pow", "PRelu", "Reciprocal", "Relu",
    "Round", "Selu", "Sigmoid", "Sign", "Sin", "Sinh", "Softplus", "Softsign", "Sqrt", "Sub", "Sum", "Tan", "Tanh",
    "ThresholdedRelu", "Where", "Xor", "QuickGelu", "FastGelu",
}
_SINGLE_AXIS = {"Softmax", "LogSoftmax", "Hardmax"}
_REDUCE = {"ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
           "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare", "ArgMax", "ArgMin"}
_RECURRENT = {"LSTM": 4, "GRU": 4, "RNN": 4}  # op -> index of its sequence_lens input


@dataclass(frozen=True)
class Axes:
    """Where a value's time and batch axes are (None: it has none, or it is unknown)."""

    rank: int | None
    time: int | None
    batch: int | None

    @property
    def known(self) -> bool:
        return self.rank is not None


UNKNOWN = Axes(None, None, None)


@dataclass
class RaggedLayout:
    """What the batcher needs to know about a model, and whether padding can change its results."""

    input: str  # the model input that carries the sequences
    time_axis: int
    batch_axis: int
    sequence_lens: str | None  # the int32 [batch] model input wired into the recurrent nodes, if any
    outputs: dict[str, Axes]  # model output -> its axes (rank None where unknown; absent if it ignores the input)
    recurrent_nodes: list[int] = field(default_factory=list)  # indices in graph.node of the LSTMs X reaches
    reasons: list[str] = field(default_factory=list)  # why padding could change results

    @property
    def exact(self) -> bool:
        return not self.reasons

    def describe(self) -> str:
        head = (f"input {self.input!r} (time axis {self.time_axis}, batch axis {self.batch_axis}), "
                f"sequence_lens: {self.sequence_lens or 'none'}")
        if self.exact:
            return head + "; ragged-exact"
        return head + "; not ragged-exact: " + "; ".join(self.reasons)


class NoSequenceInput(ValueError):
    """No model input reaches a FusedLSTM's X with a consistent time and batch axis."""


def analyze(model: onnx.ModelProto, input_name: str | None = None) -> RaggedLayout:
    graph = model.graph
    inits = {i.name for i in graph.initializer}
    inputs = {i.name: i for i in graph.input if i.name not in inits}
    if input_name is not None:
        if input_name not in inputs:
            raise NoSequenceInput(f"model has no input {input_name!r} (inputs: {', '.join(inputs) or 'none'})")
        candidates = [input_name]
    else:
        candidates = [n for n, vi in inputs.items() if _rank(vi) is None or _rank(vi) >= 2]
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 13)
    found = []
    for name in candidates:
        rank = _rank(inputs[name])
        for time, batch in ((0, 1), (1, 0)):
            walk = _Walk(graph, opset, name, Axes(rank if rank is not None else 3, time, batch))
            if walk.matched and not walk.mismatched:
                found.append(walk)
    if not found:
        hint = f" {input_name!r}" if input_name else ""
        raise NoSequenceInput(f"no model input{hint} reaches a FusedLSTM (or LSTM) input X with its time and batch "
                              "axes where the node's layout expects them")
    if len({w.input for w in found}) > 1:
        raise NoSequenceInput("more than one model input reaches a FusedLSTM: choose one with input_name "
                              f"({', '.join(sorted({w.input for w in found}))})")
    walk = found[0]
    return RaggedLayout(walk.input, walk.start.time, walk.start.batch, walk.sequence_lens,
                        walk.outputs(), walk.matched, walk.reasons)


def _rank(vi: onnx.ValueInfoProto) -> int | None:
    t = vi.type.tensor_type
    return len(t.shape.dim) if t.HasField("shape") else None


def _norm(axis: int, rank: int) -> int:
    return axis + rank if axis < 0 else axis


class _Walk:
    """One hypothesis: `input` has axes `start`; follows every value computed from it."""

    def __init__(self, graph: onnx.GraphProto, opset: int, input_name: str, start: Axes):
        self.input, self.start = input_name, start
        self._setup(graph, opset, {input_name: start})
        self._walk_graph(graph)

    def _setup(self, graph: onnx.GraphProto, opset: int, starts: dict[str, Axes]) -> None:
        self.graph, self.opset = graph, opset
        self.consts, self.const_ranks = self._graph_consts(graph)
        int32_inputs = {i.name for i in graph.input
                        if i.type.tensor_type.elem_type == onnx.TensorProto.INT32 and _rank(i) == 1}
        self.seq_len_inputs = int32_inputs
        self.sequence_lens: str | None = None
        self.values: dict[str, Axes] = dict(starts)
        self.matched: list[int] = []
        self.mismatched = False
        self.reasons: list[str] = []
        self._consumers = self._count_consumers()

    @staticmethod
    def _graph_consts(graph: onnx.GraphProto) -> tuple[dict[str, np.ndarray], dict[str, int]]:
        return ({i.name: numpy_helper.to_array(i) for i in graph.initializer},
                {i.name: len(i.dims) for i in graph.initializer})

    def _walk_graph(self, graph: onnx.GraphProto) -> None:
        for index, node in enumerate(graph.node):
            if node.op_type == "Constant" and not node.domain:
                for a in node.attribute:
                    if a.name == "value":
                        self.consts[node.output[0]] = numpy_helper.to_array(a.t)
                        self.const_ranks[node.output[0]] = len(a.t.dims)
                continue
            if any(i in self.values for i in node.input if i):
                outs = self._visit(index, node)
                for name, axes in zip(node.output, outs):
                    if name:
                        self.values[name] = axes

    def _count_consumers(self) -> set[str]:
        used = {i for n in self.graph.node for i in n.input if i}
        return used | {o.name for o in self.graph.output}

    def outputs(self) -> dict[str, Axes]:
        outs = {o.name: self.values[o.name] for o in self.graph.output if o.name in self.values}
        for name, axes in outs.items():
            if axes.batch is None and not any(name in r for r in self.reasons):
                self.reasons.append(f"output {name!r}: no batch axis found, so it cannot be split per sequence")
        return outs

    # -- helpers -------------------------------------------------------------------------------
    def flag(self, node: onnx.NodeProto, why: str) -> None:
        self.reasons.append(f"{node.op_type} node {node.name or node.output[0]!r} {why}")

    def attr(self, node, name, default=None):
        for a in node.attribute:
            if a.name == name:
                return onnx.helper.get_attribute_value(a)
        return default

    def const(self, name: str) -> np.ndarray | None:
        return self.consts.get(name) if name else None

    def const_rank(self, name: str) -> int | None:
        return self.const_ranks.get(name)

    def axes_input(self, node, attr_name="axes", index=1):
        """A node's axes, from its attribute (older opsets) or its input `index` (newer)."""
        value = self.attr(node, attr_name)
        if value is not None:
            return [int(a) for a in value]
        if len(node.input) > index and node.input[index]:
            c = self.const(node.input[index])
            return None if c is None else [int(a) for a in np.atleast_1d(c)]
        return []

    # -- one node ------------------------------------------------------------------------------
    def _visit(self, index: int, node: onnx.NodeProto) -> list[Axes]:
        first = next(self.values[i] for i in node.input if i in self.values)
        n_out = len(node.output)
        if any(not self.values[i].known for i in node.input if i in self.values):
            return [UNKNOWN] * n_out  # already flagged upstream
        op = node.op_type
        if node.domain == DOMAIN and op == OP_TYPE:
            return self._recurrent(index, node, seq_lens_index=3)
        if node.domain in ("", "ai.onnx") and op in _RECURRENT:
            return self._recurrent(index, node, seq_lens_index=_RECURRENT[op])
        if node.domain not in ("", "ai.onnx", "com.microsoft"):
            self.flag(node, "is not known to act per time step")
            return [UNKNOWN] * n_out
        if op in _ELEMENTWISE:
            return [self._broadcast(node)] * n_out
        t, b, r = first.time, first.batch, first.rank
        tb = {a for a in (t, b) if a is not None}
        if op in _SINGLE_AXIS:
            default = -1 if self.opset >= 13 else 1
            axis = _norm(int(self.attr(node, "axis", default)), r)
            covered = {axis} if self.opset >= 13 else set(range(axis, r))
            if covered & tb:
                self.flag(node, "normalizes along the time or batch axis")
            return [first] * n_out
        if op == "LayerNormalization":
            axis = _norm(int(self.attr(node, "axis", -1)), r)
            if any(a >= axis for a in tb):
                self.flag(node, "normalizes over the time or batch axis")
            return [first] + [UNKNOWN] * (n_out - 1)
        if op in _REDUCE:
            keep = int(self.attr(node, "keepdims", 1))
            if op in ("ArgMax", "ArgMin"):
                axes = [int(self.attr(node, "axis", 0))]
            else:
                axes = self.axes_input(node)
                if axes is None:
                    self.flag(node, "reduces over axes that are not constant")
                    return [UNKNOWN] * n_out
            axes = sorted({_norm(a, r) for a in axes}) if axes else list(range(r))
            if set(axes) & tb:
                self.flag(node, "reduces over the time or batch axis (e.g. a mean over time)")
            return [first if keep else self._drop(first, axes)] * n_out
        if op == "Transpose":
            perm = self.attr(node, "perm") or list(reversed(range(r)))
            where = {old: new for new, old in enumerate(perm)}
            return [Axes(r, where.get(t) if t is not None else None, where.get(b) if b is not None else None)]
        if op in ("Squeeze", "Unsqueeze"):
            axes = self.axes_input(node)
            if axes is None:
                self.flag(node, "has axes that are not constant")
                return [UNKNOWN]
            if op == "Squeeze":
                if not axes:
                    self.flag(node, "squeezes unnamed axes (the batch or time axis could be 1)")
                    return [UNKNOWN]
                axes = [_norm(a, r) for a in axes]
                if b in axes:
                    self.flag(node, "squeezes the batch axis")
                    return [UNKNOWN]
                if t in axes:  # one time step left (a Slice, flagged there); the axis goes
                    self.flag(node, "squeezes the time axis")
                return [self._drop(first, axes)]
            out_rank = r + len(axes)
            added = sorted(_norm(a, out_rank) for a in axes)
            return [Axes(out_rank, _shift(t, added), _shift(b, added))]
        if op == "Reshape":
            shape = self.const(node.input[1])
            if shape is None or int(self.attr(node, "allowzero", 0)):
                self.flag(node, "reshapes to a shape that is not a constant")
                return [UNKNOWN]
            shape = [int(s) for s in shape]
            keep = max(tb) if tb else -1
            if len(shape) > keep and all(shape[j] == 0 for j in range(keep + 1)):
                return [Axes(len(shape), t, b)]
            self.flag(node, "reshapes the time or batch axis")
            return [UNKNOWN]
        if op in ("MatMul", "MatMulInteger"):
            a, w = node.input[0], node.input[1]
            if a in self.values and w not in self.values and self.const_rank(w) == 2:
                if r - 1 in tb:
                    self.flag(node, "multiplies along the time or batch axis")
                return [first]
            self.flag(node, "is not a per-step product with a constant matrix")
            return [UNKNOWN]
        if op == "Gemm":
            contracted = 0 if int(self.attr(node, "transA", 0)) else 1
            if node.input[0] in self.values and not any(i in self.values for i in node.input[1:]):
                if contracted in tb:
                    self.flag(node, "multiplies along the time or batch axis")
                return [Axes(2, 0 if t is not None else None, 0 if b is not None else None)]
            self.flag(node, "is not a per-step product with a constant matrix")
            return [UNKNOWN]
        if op == "Gather":
            data, idx = node.input[0], node.input[1]
            axis = int(self.attr(node, "axis", 0))
            if data not in self.values:  # an embedding: the table is constant, the ids carry the axes
                rank = self.const_rank(data)
                if rank is None:
                    self.flag(node, "gathers from a table that is not constant")
                    return [UNKNOWN]
                axis = _norm(axis, rank)
                ax = self.values[idx]
                return [Axes(rank - 1 + ax.rank, None if ax.time is None else ax.time + axis,
                             None if ax.batch is None else ax.batch + axis)]
            axis = _norm(axis, r)
            ids = self.const(idx)
            if idx in self.values or ids is None:
                self.flag(node, "gathers with indices computed from the input")
                return [UNKNOWN]
            if axis in tb:
                what = "time steps (e.g. Y[:, -1], the last padded step)" if axis == t else "batch entries"
                self.flag(node, f"picks {what}")
            grow = ids.ndim - 1
            moved = lambda a: None if a is None else (a if a < axis else a + grow)  # noqa: E731
            if axis in tb and ids.ndim == 0:
                gone = lambda a: None if a is None or a == axis else (a if a < axis else a - 1)  # noqa: E731
                return [Axes(r - 1, gone(t), gone(b))]
            return [Axes(r + grow, moved(t), moved(b))]
        if op == "Slice":
            axes = self.axes_input(node, "axes", 3) if self.opset >= 10 else self.attr(node, "axes")
            starts = self.const(node.input[1]) if self.opset >= 10 else self.attr(node, "starts")
            ends = self.const(node.input[2]) if self.opset >= 10 else self.attr(node, "ends")
            steps = self.const(node.input[4]) if self.opset >= 10 and len(node.input) > 4 and node.input[4] else None
            if axes is None or starts is None or ends is None:
                self.flag(node, "slices with bounds that are not constant")
                return [UNKNOWN]
            axes = [_norm(int(a), r) for a in axes] if len(axes) else list(range(len(starts)))
            steps = [1] * len(axes) if steps is None else list(steps)
            for a, s, e, st in zip(axes, starts, ends, steps):
                whole = int(s) == 0 and int(e) >= 2**31 - 1 and int(st) == 1
                if a in tb and not whole:
                    what = "the time axis (e.g. Y[:, -1], the last padded step)" if a == t else "the batch axis"
                    self.flag(node, f"slices {what}")
            return [first]
        if op == "Concat":
            axis = _norm(int(self.attr(node, "axis", 0)), r)
            if axis in tb:
                self.flag(node, "concatenates along the time or batch axis")
            return [self._same(node)]
        if op == "Split":
            axis = _norm(int(self.attr(node, "axis", 0)), r)
            if axis in tb:
                self.flag(node, "splits along the time or batch axis")
            return [first] * n_out
        if op in ("Shape", "Size"):
            self.flag(node, "reads the padded shape")
            return [UNKNOWN] * n_out  # flagged already; no further noise downstream
        if op in ("Loop", "Scan", "If"):
            self.flag(node, "runs a subgraph (not analysed)")
            return [UNKNOWN] * n_out
        self.flag(node, "is not known to act per time step")
        return [UNKNOWN] * n_out

    def _recurrent(self, index: int, node: onnx.NodeProto, seq_lens_index: int) -> list[Axes]:
        x = self.values.get(node.input[0])
        layout = int(self.attr(node, "layout", 0))
        want = (0, 1) if layout == 0 else (1, 0)
        if x is None or any(i in self.values for i in node.input[1:seq_lens_index]):
            self.flag(node, "takes weights computed from the input")
            return [UNKNOWN] * len(node.output)
        if x.rank != 3 or (x.time, x.batch) != want:
            self.mismatched = True
            return [UNKNOWN] * len(node.output)
        self.matched.append(index)
        lens = node.input[seq_lens_index] if len(node.input) > seq_lens_index else ""
        direction = self.attr(node, "direction", b"forward")
        direction = direction.decode() if isinstance(direction, bytes) else direction
        states_used = any(o in self._consumers for o in node.output[1:] if o)
        if lens and lens in self.seq_len_inputs:
            if self.sequence_lens not in (None, lens):
                self.flag(node, f"reads sequence_lens {lens!r}, another node {self.sequence_lens!r}")
            self.sequence_lens = lens
        elif lens:
            self.flag(node, f"takes sequence_lens {lens!r}, computed in the graph rather than a model input")
        elif direction != "forward" or states_used:
            what = "its reverse direction" if direction != "forward" else "its final states"
            self.flag(node, f"has no sequence_lens: padded steps change {what} (optimize with sequence_lens_input)")
        y = Axes(4, 0, 2) if layout == 0 else Axes(4, 1, 0)
        state = Axes(3, None, 1) if layout == 0 else Axes(3, None, 0)
        return [y, state, state][: len(node.output)]

    def _broadcast(self, node: onnx.NodeProto) -> Axes:
        ranks = [self.values[i].rank if i in self.values else self.const_rank(i) for i in node.input if i]
        if any(k is None for k in ranks):
            self.flag(node, "broadcasts with a value of unknown rank")
            return UNKNOWN
        out_rank = max(ranks)
        aligned = {Axes(out_rank, *(None if a is None else a + out_rank - v.rank for a in (v.time, v.batch)))
                   for i in node.input if (v := self.values.get(i))}
        if len(aligned) != 1:
            self.flag(node, "combines values whose time or batch axes differ")
            return UNKNOWN
        out = aligned.pop()
        for i in node.input:
            c = self.const(i) if i and i not in self.values else None
            if c is not None:
                shape = (1,) * (out_rank - c.ndim) + c.shape
                if any(a is not None and shape[a] != 1 for a in (out.time, out.batch)):
                    self.flag(node, "adds a constant that varies along the time or batch axis")
        return out

    def _same(self, node: onnx.NodeProto) -> Axes:
        seen = {self.values[i] for i in node.input if i in self.values}
        if len(seen) != 1:
            self.flag(node, "combines values whose time or batch axes differ")
            return UNKNOWN
        return seen.pop()

    @staticmethod
    def _drop(axes: Axes, removed: list[int]) -> Axes:
        def moved(a):
            if a is None or a in removed:
                return None
            return a - sum(1 for r in removed if r < a)
        return Axes(axes.rank - len(removed), moved(axes.time), moved(axes.batch))


def _shift(axis: int | None, added: list[int]) -> int | None:
    if axis is None:
        return None
    for a in added:  # ascending positions in the output
        if a <= axis:
            axis += 1
    return axis
