"""Which axis of each input and output of a model carries the batch, and whether the entries of a
batch stay apart: the analysis behind StreamBatcher (streams.py) and `optimize --batchify`.

The one axis analysis (graph/axes.py) with the time axis left out: every value computed from the
inputs that carry the batch is followed with its batch axis through its handlers. A concrete run
at batch 1 (trace.py) gives what the graph computes from shapes and constants, so an If walks its
taken branch and Pad, Reshape, Expand and ConstantOfShape read their operands. A value holding the
batch size (read by Shape or Size) is followed entry by entry through the ops that only move
entries: it may become a Reshape's target or a new tensor's shape; a branch on it, or data
computed from it, stops the batch.

Which input carries the batch on which axis is a hypothesis, as in ragged.py: each input's axes of
size 1 (one stream's feed) are tried, and the assignment under which the walk finds nothing
wrong, with the most inputs carrying the batch, is the layout.
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass, field

import numpy as np
import onnx

from lstm_ort.graph.axes import UNKNOWN, AxisWalk, Axes, Constants, norm, recurrent_outputs
from lstm_ort.graph.trace import outer_names, run_node, taken_branch, trace
from lstm_ort.ops.identity import is_fused

# Ops that only move entries of their first input (or of every input, for Concat): a batch-size entry
# stays one, and where it goes is found by running the op on a mask.
_MOVES = {"Identity", "Cast", "Gather", "Slice", "Concat", "Squeeze", "Unsqueeze", "Reshape", "Flatten",
          "Transpose", "Split", "Expand", "Tile"}
_MAX_HYPOTHESES = 512


@dataclass
class BatchLayout:
    """Where one stream's feeds and results carry the batch."""

    inputs: dict[str, int | None]  # model input -> batch axis (None: the streams of a batch share its value)
    outputs: dict[str, int | None]  # model output -> batch axis (None: the same for every stream of a batch)
    rows: dict[str, int] = field(default_factory=dict)  # output -> one stream's extent on its batch axis
    reasons: list[str] = field(default_factory=list)  # why steps of several streams cannot share a call
    # --batchify: (Reshape node with a target written for batch 1, the batch's axis, -1 or 0 to put there)
    fixes: list[tuple[onnx.NodeProto, int, int]] = field(default_factory=list)

    @property
    def batched(self) -> bool:
        return not self.reasons

    def describe(self) -> str:
        def axes(d):
            return ", ".join(f"{n} {'-' if a is None else a}" for n, a in d.items())
        head = f"batch axes: inputs {axes(self.inputs)}; outputs {axes(self.outputs)}"
        return head if self.batched else head + "; not batchable: " + "; ".join(self.reasons)


def batch_layout(model: onnx.ModelProto, feeds: dict[str, np.ndarray], carried=(), *,
                 fixed_batch: bool = False, values: dict[str, np.ndarray] | None = None) -> BatchLayout:
    """The layout of one stream's ``feeds`` (every model input, batch axes of size 1). ``carried``:
    inputs that must carry the batch. ``fixed_batch``: the model was exported for batch 1 (``--batchify``):
    dimensions and Reshape targets that hold 1 where the batch goes are accepted (and listed in
    ``fixes``). ``values``: a trace of these feeds, if already made. Raises TraceFailed where
    onnx.reference cannot run the feeds."""
    values = values if values is not None else trace(model, feeds)
    declared = {vi.name: vi for vi in model.graph.input}
    choices = []
    for name, value in feeds.items():
        axes = _batch_candidates(declared.get(name), np.shape(value), fixed_batch)
        choices.append(axes if name in carried else [None, *axes])
    names = list(feeds)
    hypotheses = sorted(itertools.product(*choices), key=lambda h: -sum(a is not None for a in h))
    best = None  # the walk to report: valid, else the failing one with the most inputs carrying the batch
    for hypothesis in hypotheses[:_MAX_HYPOTHESES]:
        if not any(a is not None for a in hypothesis):
            continue  # nothing carries the batch: nothing to batch
        starts = {n: Axes(np.ndim(feeds[n]), None, a) for n, a in zip(names, hypothesis) if a is not None}
        walk = _BatchWalk(model, starts, values, fixed_batch)
        if not walk.reasons and not walk.mismatched:
            best = walk
            break
        if best is None or (best.mismatched and not walk.mismatched):
            best = walk
    if best is None:
        bad = [n for n, c in zip(names, choices) if not c]
        why = [f"carried input {n!r} has no axis of size 1 to carry the batch (shape {np.shape(feeds[n])})"
               for n in bad] or ["no input has an axis of size 1 to carry the batch"]
        return BatchLayout({n: None for n in names}, {}, reasons=why)
    layout = best.layout(names)
    if not fixed_batch:
        layout.reasons += _fixed_dims(model, layout, values)
    return layout


def split_outputs(outputs: list[np.ndarray], names: list[str], layout: BatchLayout, n: int) -> list[list[np.ndarray]]:
    """One call's outputs, per step, each as its own call would return it."""
    if n == 1:
        return [list(outputs)]
    per_step = [[] for _ in range(n)]
    for name, value in zip(names, outputs):
        axis = layout.outputs.get(name)
        if axis is None:  # the same for every stream of the batch
            for k in range(n):
                per_step[k].append(value.copy())
            continue
        rows = layout.rows.get(name, 1)
        index = [slice(None)] * value.ndim
        for k in range(n):
            index[axis] = slice(k * rows, (k + 1) * rows)
            part = value[tuple(index)]
            per_step[k].append(part if axis == 0 else np.ascontiguousarray(part))
    return per_step


def _batch_candidates(vi: onnx.ValueInfoProto | None, shape, fixed_batch: bool) -> list[int]:
    """Axes of size 1 in the feed where the model declares no other fixed size."""
    dims = list(vi.type.tensor_type.shape.dim) if vi is not None and vi.type.tensor_type.HasField("shape") else []
    out = []
    for k, size in enumerate(shape):
        if size != 1:
            continue
        if k < len(dims) and dims[k].HasField("dim_value") and dims[k].dim_value not in (1, -1) and not fixed_batch:
            continue
        out.append(k)
    return out


def _fixed_dims(model: onnx.ModelProto, layout: BatchLayout, values: dict[str, np.ndarray]) -> list[str]:
    """A batch axis the model declares as 1: onnxruntime refuses a batch there. Not an output
    declared with another rank than the graph computes (``values``: the trace): onnxruntime sets
    such a declaration aside for the shape it infers (torch 2.11's dynamo exporter declares an
    LSTM's h_n [layers, 1, batch, hidden] for the [layers, batch, hidden] it computes)."""
    reasons = []
    for kind, infos, axes in (("input", model.graph.input, layout.inputs), ("output", model.graph.output, layout.outputs)):
        for vi in infos:
            axis = axes.get(vi.name)
            dims = vi.type.tensor_type.shape.dim
            if kind == "output" and vi.name in values and len(dims) != np.ndim(values[vi.name]):
                continue
            if axis is not None and axis < len(dims) and dims[axis].HasField("dim_value") and dims[axis].dim_value == 1:
                reasons.append(f"{kind} {vi.name!r} declares a fixed batch of 1 on axis {axis} "
                               f"(lstm-ort optimize --batchify makes it symbolic)")
    return reasons


class _BatchWalk(AxisWalk):
    """One hypothesis: the inputs in ``starts`` carry the batch on these axes."""

    def __init__(self, model: onnx.ModelProto, starts: dict[str, Axes], values: dict[str, np.ndarray],
                 fixed_batch: bool):
        opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 13)
        super().__init__(model.graph, opset, starts, Constants(arrays=values))  # the trace has every value
        self.trace, self.fixed_batch, self.model = values, fixed_batch, model
        self.sized: dict[str, frozenset[int] | None] = {}  # value -> flat entries equal to B x (their value at 1)
        self.fixes: list[tuple[onnx.NodeProto, int, int]] = []
        self.matched: list[int] = []
        self.mismatched = False
        self.walk(model.graph)

    def flag(self, node: onnx.NodeProto, why: str, kind: str = "") -> None:
        """The handlers' reasons name "the time or batch axis"; here only the batch is followed."""
        why = re.sub(r" \(e\.g\. [^)]*\)", "", why).replace("time or batch", "batch").replace("batch or time", "batch")
        why = why.replace("act per time step", "keep the entries of a batch apart")
        super().flag(node, why.replace("computed from the input", "computed from per-stream data"))

    def const(self, name: str) -> np.ndarray | None:
        return None if name in self.sized else super().const(name)

    def const_rank(self, name: str) -> int | None:
        return None if name in self.sized else super().const_rank(name)

    def layout(self, inputs: list[str]) -> BatchLayout:
        outputs, rows = {}, {}
        for o in self.graph.output:
            if o.name in self.sized:
                self.reasons.append(f"output {o.name!r} is computed from the batch size")
            axes = self.values.get(o.name)
            outputs[o.name] = None if axes is None else axes.batch
            if axes is not None and axes.batch is not None:
                rows[o.name] = int(np.shape(self.trace[o.name])[axes.batch])
        starts = {n: (self.values[n].batch if n in self.values else None) for n in inputs}
        return BatchLayout(starts, outputs, rows, list(dict.fromkeys(self.reasons)), self.fixes)

    # -- the graph -----------------------------------------------------------------------------
    def walk(self, graph: onnx.GraphProto) -> None:
        for node in graph.node:
            if node.op_type == "If" and node.domain in ("", "ai.onnx"):
                self._if(node)
                continue
            reads = [i for i in node.input if i] + sorted(_subgraph_reads(node))
            tracked = [i for i in reads if i in self.values]
            sized = [i for i in reads if i in self.sized]
            if not tracked and not sized:
                continue  # the same for every stream of the batch: the trace holds it
            if any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for a in node.attribute):
                self._give_up(node, "runs a subgraph on values that carry the batch (not analysed)")
            elif not tracked:
                self._sized_node(node)
            elif node.op_type in ("Shape", "Size") and node.domain in ("", "ai.onnx"):
                self._shape_node(node)
            elif sized and (node.op_type not in ("Reshape", "Expand") or node.input[0] in self.sized):
                self._give_up(node, "computes data from the batch size")
            else:
                for name, axes in zip(node.output, self.visit(0, node)):
                    if name:
                        self.values[name] = axes

    def _give_up(self, node: onnx.NodeProto, why: str) -> None:
        self.flag(node, why)
        for name in node.output:
            if name:
                self.values[name] = UNKNOWN

    def _if(self, node: onnx.NodeProto) -> None:
        cond = node.input[0]
        if cond in self.values:
            return self._give_up(node, "branches on per-stream data")
        if cond in self.sized:
            return self._give_up(node, "branches on the batch size")
        branch = taken_branch(node, self.trace[cond])
        self.walk(branch)
        for name, out in zip(node.output, branch.output):
            if out.name in self.values:
                self.values[name] = self.values[out.name]
            elif out.name in self.sized:
                self.sized[name] = self.sized[out.name]

    # -- values that hold the batch size -------------------------------------------------------
    def _shape_node(self, node: onnx.NodeProto) -> None:
        x = self.values[node.input[0]]
        if not x.known:
            return self._give_up(node, "reads the shape of a value whose batch axis is unknown")
        if node.op_type == "Size":
            self.sized[node.output[0]] = frozenset({0})
            return
        start, end = int(self.attr(node, "start", 0)), self.attr(node, "end", None)
        start, end = norm(start, x.rank), x.rank if end is None else norm(int(end), x.rank)
        start, end = max(0, min(start, x.rank)), max(0, min(end, x.rank))
        if x.batch is not None and start <= x.batch < end:
            self.sized[node.output[0]] = frozenset({x.batch - start})

    def _sized_node(self, node: onnx.NodeProto) -> None:
        """A node reading batch-size values and values the streams share."""
        op, ins = node.op_type, node.input
        if op in ("Shape", "Size") and self.sized[ins[0]] is not None:
            return  # the entries move, the length does not: the same for every stream
        if op == "ConstantOfShape" or (op == "Expand" and ins[0] not in self.sized):
            shape_name = ins[0] if op == "ConstantOfShape" else ins[1]
            axis = self._new_batch_axis(node, shape_name, None if op == "ConstantOfShape" else ins[0])
            if axis is not None:
                self.values[node.output[0]] = Axes(len(self.trace[shape_name]), None, axis)
            return
        if op == "Mul" and len(ins) == 2 and sum(i in self.sized for i in ins) == 1:
            sized, other = (ins[0], ins[1]) if ins[0] in self.sized else (ins[1], ins[0])
            if np.ndim(self.trace[other]) == 0 or np.shape(self.trace[other]) == np.shape(self.trace[sized]):
                self.sized[node.output[0]] = self.sized[sized]  # B x v times a shared c is B x (v c)
                return
        moved = self._moved_entries(node) if op in _MOVES and node.domain in ("", "ai.onnx") else None
        for k, name in enumerate(node.output):
            if name:
                entries = None if moved is None else moved[k]
                if entries is None or entries:
                    self.sized[name] = entries

    def _moved_entries(self, node: onnx.NodeProto) -> list[frozenset[int] | None] | None:
        """Where the batch-size entries of a moving op's data inputs end up (run on masks)."""
        data = list(node.input) if node.op_type == "Concat" else node.input[:1]
        if any(i in self.sized for i in node.input if i and i not in data):
            return None  # a batch size as an index, bound or shape: not a move
        if any(self.sized.get(i, frozenset()) is None for i in data):
            return None
        masks = dict(self.trace)
        for name in data:
            mask = np.zeros(np.shape(self.trace[name]), np.int64).ravel()
            mask[list(self.sized.get(name, ()))] = 1
            masks[name] = mask.reshape(np.shape(self.trace[name])).astype(self.trace[name].dtype)
        try:
            outs = run_node(node, masks, list(self.model.opset_import), self.model.ir_version)
        except Exception:  # noqa: BLE001 - cannot follow: treat the result as opaque
            return None
        return [None if o is None else frozenset(np.flatnonzero(np.asarray(o).ravel() != 0).tolist()) for o in outs]

    def _new_batch_axis(self, node: onnx.NodeProto, shape_name: str, data: str | None) -> int | None:
        """The axis a shape holding the batch size once makes the batch axis of a new tensor."""
        entries = self.sized.get(shape_name)
        if entries is None or len(entries) != 1:
            self._give_up(node, "builds a tensor from a shape computed from the batch size in a way not followed")
            return None
        axis = next(iter(entries))
        if data is not None:
            rank, out_rank = np.ndim(self.trace[data]), len(self.trace[shape_name])
            k = axis - (out_rank - rank)
            if k >= 0 and np.shape(self.trace[data])[k] != 1:
                self._give_up(node, "expands a value that varies along the batch axis")
                return None
        return axis

    # -- one node that carries the batch -------------------------------------------------------
    def visit(self, index: int, node: onnx.NodeProto) -> list[Axes]:
        """graph/axes.py's handlers, but for Reshape and Expand: read on the trace, where a shape may
        hold the batch size."""
        x = self.values.get(node.input[0]) if node.input else None
        if node.domain in ("", "ai.onnx") and x is not None and x.known and \
                all(self.values[i].known for i in node.input if i in self.values):
            if node.op_type == "Reshape":
                return [self._reshape(node, x)]
            if node.op_type == "Expand":
                return [self._expand(node, x)]
        return super().visit(index, node)

    def _expand(self, node: onnx.NodeProto, x: Axes) -> Axes:
        shape = self.trace[node.input[1]]
        out_rank = max(x.rank, len(shape))
        axis = x.batch + out_rank - x.rank
        k = axis - (out_rank - len(shape))
        if k >= 0 and int(shape[k]) != 1 and k not in (self.sized.get(node.input[1]) or ()):
            self.flag(node, "expands the batch axis to a fixed size")
            return UNKNOWN
        return Axes(out_rank, None, axis)

    def _reshape(self, node: onnx.NodeProto, x: Axes) -> Axes:
        """The output's batch axis: where B lands when the shapes are written in B. Axes before
        the batch's that the target keeps (0, or the same constant) stay; the rest is reshaped
        with the batch leading it."""
        target_name = node.input[1]
        if target_name in self.values:
            self.flag(node, "reshapes to a shape computed from per-stream data")
            return UNKNOWN
        entries = self.sized.get(target_name, frozenset())
        if entries is None:
            self.flag(node, "reshapes to a shape computed from the batch size in a way not followed")
            return UNKNOWN
        target = [int(v) for v in np.ravel(self.trace[target_name])]
        allowzero = bool(int(self.attr(node, "allowzero", 0))) and 0 in target  # else it changes nothing
        dims = list(np.shape(self.trace[node.input[0]]))
        b = x.batch
        kept = len(target) > b and all((t == 0 and not allowzero) or (t == dims[k] and k not in entries)
                                       for k, t in enumerate(target[:b]))
        lead = b if kept else 0
        if not kept and int(np.prod(dims[:b])) != 1:
            self.flag(node, "reshapes a value whose batch entries are interleaved with another axis")
            return UNKNOWN
        axis = self._reshape_rest(node, dims[lead:], b - lead, target[lead:], {e - lead for e in entries if e >= lead},
                                  allowzero, lead)
        return UNKNOWN if axis is None else Axes(len(target), None, lead + axis)

    def _reshape_rest(self, node, dims, b, target, entries, allowzero, lead) -> int | None:
        """Where B lands reshaping ``dims`` (batch on axis ``b``, nothing but 1s before it) to ``target``."""
        in_place = (self.fixed_batch and not allowzero and b < len(target) and b not in entries
                    and target[b] == dims[b] > 0)
        if in_place:  # exported for batch 1: the batch's own dim written as a constant; it stays in place
            entries = entries | {b}
        out: list[tuple[bool, int] | None] = []  # each dim as (carries B, its value at B=1)
        for k, t in enumerate(target):
            if k in entries:
                out.append((True, t))
            elif t == 0 and not allowzero and k < len(dims):
                out.append((k == b, dims[k]))
            elif t == -1:
                out.append(None)
            else:
                out.append((False, t))
        if out.count(None) > 1:
            self.flag(node, "reshapes with more than one -1")
            return None
        if None in out:
            free = out.index(None)
            known = [d for d in out if d is not None]
            out[free] = (not any(c for c, _ in known), int(np.prod(dims)) // max(int(np.prod([v for _, v in known])), 1))
        carrying = [k for k, (c, _) in enumerate(out) if c]
        if not carrying and self.fixed_batch:
            axis = self._fixed_axis(out, dims[b])
            if axis is not None and (out[axis][1] == dims[b] or -1 not in target):
                # 0 copies the input's batch dim where the axis stays its own; else -1 takes the rest
                self.fixes.append((node, lead + axis, 0 if axis == b and out[axis][1] == dims[b] else -1))
                return axis
        if len(carrying) != 1:
            self.flag(node, f"reshapes to the fixed shape {target}: the batch size is written into the model"
                      if not carrying else "reshapes so that the batch size shows in more than one axis")
            return None
        axis = carrying[0]
        if int(np.prod([v for _, v in out[:axis]])) != 1:
            self.flag(node, "reshapes the batch axis into the middle of another axis")
            return None
        if in_place:
            self.fixes.append((node, lead + b, 0))
        return axis

    @staticmethod
    def _fixed_axis(out: list[tuple[bool, int]], rows: int) -> int | None:
        """In a model exported for batch 1: the first axis where the batch can lead (all before it 1)."""
        for k, (_, v) in enumerate(out):
            if v % max(rows, 1) == 0:
                return k
            if v != 1:
                return None
        return None

    def recurrent(self, index: int, node: onnx.NodeProto, seq_lens_index: int) -> list[Axes]:
        layout = int(self.attr(node, "layout", 0))
        x_axis = state_axis = 1 if layout == 0 else 0
        fused = is_fused(node)
        weights = list(node.input[1:seq_lens_index]) + ([] if fused or len(node.input) < 8 else [node.input[7]])
        if any(w in self.values or w in self.sized for w in weights if w):
            self.flag(node, "takes weights computed from per-stream data")
            return [UNKNOWN] * len(node.output)
        states = 2 if fused or node.op_type == "LSTM" else 1
        roles = [("X", 0, 3, x_axis), ("sequence_lens", seq_lens_index, 1, 0)] + [
            (name, seq_lens_index + 1 + k, 3, state_axis) for k, name in enumerate(("initial_h", "initial_c")[:states])]
        for role, k, rank, axis in roles:
            name = node.input[k] if k < len(node.input) else ""
            if not name:
                continue
            v = self.values.get(name)
            if v is None:
                self.flag(node, f"reads {role} without the batch (a fixed batch of 1?) beside inputs with it")
            elif v.rank != rank or v.batch != axis:
                self.mismatched = True
                self.flag(node, f"reads {role} with the batch on axis {v.batch}, its layout has it on {axis}")
        self.matched.append(index)
        return [axes.without_time() for axes in recurrent_outputs(layout, len(node.output))]


def _subgraph_reads(node: onnx.NodeProto) -> set[str]:
    if any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for a in node.attribute):
        return outer_names(node)
    return set()
