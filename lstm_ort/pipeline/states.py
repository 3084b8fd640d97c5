"""Where each layer's initial state comes from, and what the model computes from its final states.

A stage reads the initial states of its layers only: rows ``l*D + d`` of the stack's
``[layers*D, B, H]`` (layout 0; ``[B, layers*D, H]`` in layout 1). Exporters do not hand those
rows over as one graph input: torch slices ``h0`` per layer (and optimize joins the slices with a
Slice or a Concat), tf2onnx unsqueezes a Keras ``[B, H]`` state, and both size zero states from
the input's shape (``ConstantOfShape``/``Expand`` of 0 over ``Shape(X)``). ``trace_states``
follows each row back through Slice, Concat, Unsqueeze and Identity to where it comes from:

- zeros, proven (a zero constant, ``ConstantOfShape`` of 0, ``Expand``/``Tile`` of zeros, and
  data movement of zeros): the stage's zero buffer, set once;
- a row of a graph input (or of a constant): copied from the caller's array into the stage's
  buffer for each micro-batch, with no copy of the whole array;
- anything else: the value that holds it is computed per call on the host by a small ONNX model
  cut from the graph (``StatePlan.model``: the nodes it needs, from the graph inputs), and its
  rows are copied as a graph input's are.

After the stack, ops that read the final states (Keras squeezes ``Y_h``; torch's dynamo export
concatenates each layer's; a classifier reads ``h_n[-1]``) run on the host once the states are
assembled from every stage (``final_model``), on the whole call's states.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import helper, numpy_helper

from lstm_ort.graph.axes import keeps_whole, node_axes, norm, slice_parts
from lstm_ort.ops.spec import attribute as attr
from lstm_ort.pipeline.stack import Stack
from lstm_ort.pipeline.unsupported import Unsupported

Row = tuple  # (source name or None for zeros, its row along the state axis or None for a [B, H] source)
_MOVES_DATA = {"Slice", "Squeeze", "Unsqueeze", "Reshape", "Transpose", "Identity", "Cast", "Flatten", "Expand", "Tile",
               "Gather"}  # ops whose output is zeros where their first input is


@dataclass
class StatePlan:
    h: list  # Row per stack row l*D + d
    c: list
    computed: list = field(default_factory=list)  # values the state model computes per call
    constants: dict = field(default_factory=dict)  # constant sources: name -> array
    model: onnx.ModelProto | None = None  # graph inputs -> the computed values
    model_inputs: list = field(default_factory=list)
    sizes: dict = field(default_factory=dict)  # source -> its size along the state axis (None: a [B, H] source)

    @property
    def sources(self) -> set[str]:
        return {r[0] for r in self.h + self.c if r[0] is not None}


class _Tracer:
    def __init__(self, consts: dict, producers: dict, graph_inputs: set, dims: dict, state_axis: int, opset: int):
        self.consts, self.producers, self.inputs = consts, producers, graph_inputs
        self.dims, self.axis, self.opset = dims, state_axis, opset
        self.computed: list[str] = []
        self.sizes: dict = {}
        self._zero: dict[str, bool] = {}

    def is_zero(self, value: str) -> bool:
        if value not in self._zero:
            self._zero[value] = self._proves_zero(value)
        return self._zero[value]

    def _proves_zero(self, value: str) -> bool:
        if value in self.consts:
            return not np.any(np.asarray(self.consts[value]))
        node = self.producers.get(value)
        if node is None:
            return False
        if node.op_type == "ConstantOfShape":
            fill = attr(node, "value")
            return fill is None or not np.any(numpy_helper.to_array(fill))
        if node.op_type == "Concat":
            return all(self.is_zero(i) for i in node.input if i)
        return node.op_type in _MOVES_DATA and bool(node.input) and self.is_zero(node.input[0])

    def size(self, value: str) -> int | None:
        d = self.dims.get(value)
        return d[self.axis] if d and len(d) == 3 and isinstance(d[self.axis], int) else None

    def rows(self, value: str, n: int) -> list[Row]:
        """The n rows of ``value`` along the state axis, each as where it comes from."""
        if self.is_zero(value):
            return [(None, None)] * n
        if value in self.inputs or value in self.consts:
            return self._source(value, n)
        node = self.producers[value]
        traced = self._through(node, n)
        return traced if traced is not None else self._computed(value, n)

    def _source(self, value: str, n: int, flat: bool = False) -> list[Row]:
        self.sizes[value] = None if flat else n
        return [(value, None)] if flat else [(value, r) for r in range(n)]

    def _computed(self, value: str, n: int) -> list[Row]:
        if value not in self.computed:
            self.computed.append(value)
        return self._source(value, n)

    def _through(self, node: onnx.NodeProto, n: int) -> list[Row] | None:
        """Rows through a Slice, Concat, Unsqueeze or Identity; None where they cannot be told."""
        op = node.op_type
        if op == "Identity":
            return self.rows(node.input[0], n)
        if op == "Concat":
            if norm(attr(node, "axis", 0), 3) != self.axis:
                return None
            sizes = [self.size(i) for i in node.input]
            if None in sizes or sum(sizes) != n:
                return None
            return [r for i, k in zip(node.input, sizes) for r in self.rows(i, k)]
        if op == "Unsqueeze":
            axes = node_axes(node, self.consts.get)
            if n != 1 or axes is None or [norm(a, 3) for a in axes] != [self.axis]:
                return None
            src = node.input[0]
            if self.is_zero(src):
                return [(None, None)]
            return self._source(src, 1, flat=True) if src in self.inputs or src in self.consts else None
        if op == "Slice":
            picked = self._slice_rows(node)
            if picked is None or len(picked) != n:
                return None
            src = node.input[0]
            whole = self.rows(src, self.size(src))
            return [whole[r] for r in picked]
        return None

    def _slice_rows(self, node: onnx.NodeProto) -> list[int] | None:
        """The rows a Slice along the state axis picks (ONNX's clamping is Python's), or None
        when it slices another axis too or its bounds are not constants."""
        parts = slice_parts(node, self.consts.get, self.opset, 3)
        size = self.size(node.input[0])
        if parts is None or size is None:
            return None
        picked = list(range(size))
        for a, s, e, st in parts:
            if a == self.axis:
                picked = picked[slice(s, min(e, 2**62), st)]
            elif not keeps_whole(s, e, st):
                return None
        return picked



def trace_states(stack: Stack, model: onnx.ModelProto, consts: dict, producers: dict, graph_inputs: set, dims: dict,
                 state_axis: int, opset: int) -> StatePlan:
    tracer = _Tracer(consts, producers, graph_inputs, dims, state_axis, opset)
    rows = {}
    for which, k in (("h", 4), ("c", 5)):
        rows[which] = []
        for node, (a, b) in zip(stack.nodes, stack.node_rows):
            value = node.input[k] if len(node.input) > k else ""
            rows[which] += tracer.rows(value, b - a) if value else [(None, None)] * (b - a)
    plan = StatePlan(rows["h"], rows["c"], list(tracer.computed), sizes=dict(tracer.sizes))
    plan.constants = {s: np.asarray(consts[s]) for s in plan.sources if s in consts}
    if plan.computed:
        outs = [helper.make_tensor_value_info(v, stack.elem_type, None) for v in plan.computed]
        plan.model, plan.model_inputs = cut_model(model, outs, consts, producers, graph_inputs, "pipeline_states")
    return plan


def cut_model(model: onnx.ModelProto, outputs: list, consts: dict, producers: dict, graph_inputs: set, name: str,
              given: list | None = None) -> tuple[onnx.ModelProto, list[str]]:
    """The nodes ``outputs`` (ValueInfoProtos) need, as a model of their own, and the names it
    reads: graph inputs, the values in ``given`` (ValueInfoProtos, fed like inputs) and
    constants. Raises Unsupported, naming the node, if they need an op outside the ONNX domain."""
    given = {vi.name: vi for vi in given or []}
    need, seen, todo = set(), set(), [vi.name for vi in outputs]
    while todo:
        v = todo.pop()
        if v in seen or v in consts or v in graph_inputs or v in given:
            continue
        seen.add(v)
        node = producers.get(v)
        if node is None:
            raise Unsupported(f"value {v!r} has no producer")
        if node.domain not in ("", "ai.onnx"):
            raise Unsupported(f"{node.op_type} node {node.name!r} ({node.domain}) computes a value the pipeline "
                              f"evaluates on the host, where it takes ONNX-domain ops only")
        need.add(id(node))
        todo.extend(i for i in node.input if i)
    g = model.graph
    nodes = [n for n in g.node if id(n) in need]
    read = {i for n in nodes for i in n.input if i} | {vi.name for vi in outputs}
    made = {o for n in nodes for o in n.output}
    inputs = [vi.name for vi in g.input if vi.name in read and vi.name in graph_inputs]
    fed = inputs + [n for n in given if n in read]
    ins = [vi for vi in g.input if vi.name in inputs] + [given[n] for n in given if n in read]
    inits = [numpy_helper.from_array(np.asarray(consts[n]), n) for n in sorted(read - made) if n in consts]
    graph = helper.make_graph(nodes, name, ins, list(outputs), inits)
    out = helper.make_model(graph, opset_imports=[o for o in model.opset_import if o.domain in ("", "ai.onnx")],
                            producer_name="lstm_ort.pipeline")
    out.ir_version = model.ir_version
    return out, fed
