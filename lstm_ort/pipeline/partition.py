"""Splitting a model with one FusedLSTM stack into pipeline stages (docs/pipeline.md).

``analyze`` reads the model as an exporter and ``lstm-ort optimize`` left it: the stack (one
FusedLSTM node or a chain of them, ``stack.py``), where every layer's initial state comes from
(``states.py``), the per-time-step ops before it (ancestors of X: stage 0) and after it (consumers
of Y: the last stage, each Reshape given the constant shape ``shapes.resolve_reshape`` proves),
the ops on its final states (run on the host), and where every input and output has its time and
batch axes. ``layer_costs`` / ``balanced_ranges`` choose layer ranges, and ``stage_models`` builds
one ONNX model per range: a FusedLSTM node of ``num_layers`` = the range's size whose W/B/P are
the packed slices of the stack's (``weight_offset`` gives the boundaries; a range starting at
layer l > 0 has input size D*H), fed by the previous range's Y through Transpose(0,2,1,3) +
Reshape (docs/ops.md's stacking). Every stage reads its initial states (``pipe_h0``/``pipe_c0``)
and writes its final states (``pipe_yh``/``pipe_yc``): a pipeline concatenates those, and time
chunks carry them.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import helper, numpy_helper

from lstm_ort.graph.axes import PICKS_TIME, AxisWalk, Axes, Constants, input_axes, recurrent_outputs, recurrent_x
from lstm_ort.ops.identity import DOMAIN, OP_TYPE, OPSET_VERSION
from lstm_ort.ops.packing import layer_input_size, weight_offset
from lstm_ort.pipeline.shapes import infer_dims, resolve_reshape, shape_values
from lstm_ort.pipeline.stack import Stack, find_stack, fused_nodes
from lstm_ort.pipeline.states import StatePlan, cut_model, trace_states
from lstm_ort.pipeline.unsupported import Unsupported
from lstm_ort.runtime.model_io import constant_tensors, load_model

# Names inside stage models.
STAGE_IN, STAGE_Y, H0, C0, YH, YC = "pipe_in", "pipe_y", "pipe_h0", "pipe_c0", "pipe_yh", "pipe_yc"
CONTROL_FLOW = {"If", "Loop", "Scan"}


@dataclass
class OutputInfo:
    name: str
    kind: str  # "post" (Y or an op after it: the last stage), "state" (rows of the stack's final h or c),
    # "final" (computed on the host from the final states)
    axes: Axes | None  # time/batch axes ("post" and "state"); None for "final"
    state: str | None = None  # "h" or "c" (kind "state")
    rows: tuple | None = None  # [a, b) of the stack's state rows (kind "state")


@dataclass
class PipelineModel:
    """What a pipeline needs to know about a model; ``analyze`` builds it."""

    model: onnx.ModelProto
    stack: Stack
    states: StatePlan
    consts: dict
    pre_nodes: list
    post_nodes: list  # as stages run them (a Reshape with the constant shape resolve_reshape proved)
    inputs: dict  # stage-0 graph inputs -> Axes
    sequence_lens: str | None
    outputs: list  # OutputInfo, in graph order
    opset: int
    final_model: onnx.ModelProto | None = None  # the chain's final states (and graph inputs) -> "final" outputs
    final_inputs: dict = field(default_factory=dict)  # its inputs from the stack: name -> ("h"|"c", (a, b))
    pins: dict = field(default_factory=dict)  # "time"/"batch" -> (size, why): the only size the model runs at
    chunk_refusal: str | None = None  # why time chunks are not exact for this model, None if they are
    extra_costs: dict = field(default_factory=dict)  # "pre"/"post": FLOPs per (time step, batch entry)

    layers = property(lambda self: self.stack.layers)
    directions = property(lambda self: self.stack.directions)
    input_size = property(lambda self: self.stack.input_size)
    hidden = property(lambda self: self.stack.hidden)
    layout = property(lambda self: self.stack.layout)
    direction = property(lambda self: self.stack.direction)
    elem_type = property(lambda self: self.stack.elem_type)

    @property
    def state_axis(self) -> int:
        """initial_h / initial_c / Y_h / Y_c: the axis of layers x directions."""
        return 0 if self.layout == 0 else 1

    @property
    def state_batch_axis(self) -> int:
        return 1 - self.state_axis

    @property
    def np_dtype(self):
        return helper.tensor_dtype_to_np_dtype(self.elem_type)



class _Walk(AxisWalk):
    """The one axis analysis (graph/axes.py) under the pipeline's policy: an op that could mix time
    steps or batch entries refuses the model; one that picks constant time steps (a classifier on
    the last step) is noted, for time chunks are then not exact."""

    def __init__(self, graph: onnx.GraphProto, opset: int, consts: dict, values: dict[str, Axes]) -> None:
        super().__init__(graph, opset, {}, Constants(arrays=consts))
        self.values = values
        self.time_picked: str | None = None

    def flag(self, node: onnx.NodeProto, why: str, kind: str = "") -> None:
        if kind != PICKS_TIME:
            raise Unsupported(f"{node.op_type} node {node.name or node.output[0]!r} {why}")
        self.time_picked = self.time_picked or f"{node.op_type} node {node.name!r} picks time steps"

    def outputs(self, node: onnx.NodeProto) -> list[Axes]:
        """The axes of each output of ``node`` (each named one known)."""
        outs = self.visit(0, node)
        for name, axes in zip(node.output, outs):
            if name and not axes.known:
                raise Unsupported(f"{node.op_type} node {node.name!r}: where the time and batch axes of its output "
                                  f"{name!r} are is unknown")
        return outs


def _constants(model: onnx.ModelProto) -> dict[str, np.ndarray]:
    consts = {name: numpy_helper.to_array(t) for name, t in constant_tensors(model).items()}
    for node in model.graph.node:
        if node.op_type == "Constant" and node.output[0] not in consts:
            what = node.attribute[0].name if node.attribute else "no value"
            raise Unsupported(f"Constant node {node.name!r} with {what}")
    return consts


def _matmul_flops(nodes, consts) -> float:
    """FLOPs per (time step, batch entry) of the products by constant matrices among ``nodes``."""
    return float(sum(2 * np.prod(np.shape(consts[n.input[1]])) for n in nodes
                     if n.op_type in ("MatMul", "Gemm") and n.input[1] in consts))


def _ancestors(values, producers: dict, consts: dict) -> set[int]:
    out, todo = set(), [v for v in values if v]
    while todo:
        node = producers.get(todo.pop())
        if node is None or id(node) in out:
            continue
        out.add(id(node))
        todo.extend(i for i in node.input if i and i not in consts)
    return out


def _declared(vi: onnx.ValueInfoProto) -> list | None:
    tt = vi.type.tensor_type
    if not tt.HasField("shape"):
        return None
    return [d.dim_value if d.HasField("dim_value") else (d.dim_param or None) for d in tt.shape.dim]


def analyze(model_or_path) -> PipelineModel:
    """Reads a model with one FusedLSTM stack; raises Unsupported (naming the node and its op)
    for any other."""
    model = load_model(model_or_path)
    g = model.graph
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 13)
    flow = next((n for n in g.node if n.op_type in CONTROL_FLOW), None)
    if flow is not None or model.functions:
        what = f"{flow.op_type} node {flow.name!r}" if flow is not None else "model-local functions"
        raise Unsupported(f"the model has {what}: a pipeline takes one graph with one FusedLSTM stack")
    consts = _constants(model)
    graph_inputs = {vi.name for vi in g.input if vi.name not in consts}
    producers = {o: n for n in g.node for o in n.output if o}
    consumers: dict[str, list] = {}
    for n in g.node:
        for i in n.input:
            if i:
                consumers.setdefault(i, []).append(n)
    shape_vals = shape_values(g, consts)
    fused = fused_nodes(g)
    layout = int(next((a.i for a in fused[0].attribute if a.name == "layout"), 0)) if fused else 0
    state_axis = 0 if layout == 0 else 1
    dims = infer_dims(model, fused, state_axis)
    stack = find_stack(model, consts, producers, consumers, shape_vals, dims, opset)
    states = trace_states(stack, model, consts, producers, graph_inputs, dims, state_axis, opset)
    if stack.sequence_lens and stack.sequence_lens not in graph_inputs:
        node = producers.get(stack.sequence_lens)
        what = f" by {node.op_type} node {node.name!r}" if node is not None else ""
        raise Unsupported(f"the stack's sequence_lens is computed in the graph{what}; a pipeline cuts it by "
                          f"micro-batch and needs it as a graph input")

    # Before: the ancestors of X (constants aside), walked back from X with X's axes.
    chain_ids = {id(n) for n in stack.nodes}
    known: dict[str, Axes] = {stack.x: recurrent_x(layout)}
    pre_walk = _Walk(g, opset, consts, {})
    pre_ids, todo = set(), [stack.x]
    while todo:
        name = todo.pop()
        if name in consts or name in graph_inputs:
            continue
        prod = producers.get(name)
        if prod is None:
            raise Unsupported(f"value {name!r} has no producer")
        if id(prod) in pre_ids:
            continue
        if id(prod) in chain_ids:
            raise Unsupported(f"FusedLSTM node {prod.name!r} feeds the stack's first layer")
        pre_ids.add(id(prod))
        found = input_axes(pre_walk, prod, known[prod.output[0]])
        if isinstance(found, str):
            raise Unsupported(found)
        for n_in, ax in found.items():
            if n_in in known and known[n_in] != ax:
                raise Unsupported(f"value {n_in!r} is used with different time/batch axes")
            known[n_in] = ax
            todo.append(n_in)
        if len([o for o in prod.output if o]) > 1 and prod.op_type != "Dropout":
            raise Unsupported(f"{prod.op_type} node {prod.name!r} before the LSTM has several outputs")
    pre_nodes = [n for n in g.node if id(n) in pre_ids]  # graph order is topological
    inputs = {name: ax for name, ax in known.items() if name in graph_inputs}
    for name, ax in inputs.items():
        if ax.batch is None:
            raise Unsupported(f"input {name!r} has no batch axis the pipeline can find")

    # After: ops on Y go to the last stage; ops on the final states run on the host.
    skip = chain_ids | pre_ids | {id(n) for n in stack.glue}
    skip |= _ancestors([i for n in stack.nodes for i in n.input[3:6]], producers, consts)
    state_outs = {}  # a chain node's Y_h / Y_c -> ("h" | "c", its rows of the stack's)
    for node, rows in zip(stack.nodes, stack.node_rows):
        for k, which in ((1, "h"), (2, "c")):
            if len(node.output) > k and node.output[k]:
                state_outs[node.output[k]] = (which, rows)
    post_axes: dict[str, Axes] = {stack.y: recurrent_outputs(layout)[0]} if stack.y else {}
    post_walk = _Walk(g, opset, consts, post_axes)
    final_values: set[str] = set(state_outs)
    post_nodes, pins = [], {}
    for n in g.node:
        if id(n) in skip or n.op_type == "Constant" or (n.output and all(o in shape_vals for o in n.output if o)):
            continue
        var = [i for i in n.input if i and i not in consts and i not in shape_vals]
        on_y = [i for i in var if i in post_axes]
        on_final = [i for i in var if i in final_values]
        if on_y and on_final:
            raise Unsupported(f"{n.op_type} node {n.name!r} reads both the stack's Y and its final states: a "
                              f"pipeline computes those apart (Y on the last stage, the states from every stage)")
        if on_final:
            final_values.update(o for o in n.output if o)
            continue
        if not on_y:
            raise Unsupported(f"{n.op_type} node {n.name!r} is neither before the LSTM stack nor computed from its "
                              f"outputs (it reads {(var or list(n.input))[0]!r})")
        missing = [i for i in var if i not in post_axes and i not in graph_inputs]
        if missing or any(i in graph_inputs for i in var):
            raise Unsupported(f"{n.op_type} node {n.name!r} after the LSTM stack reads "
                              f"{(missing or [i for i in var if i in graph_inputs])[0]!r}, not only values "
                              f"computed from its Y")
        if n.op_type == "Reshape":
            n = _stage_reshape(n, post_axes[n.input[0]], dims, consts, pins, len(post_nodes))
        for o, axes in zip(n.output, post_walk.outputs(n)):
            if o:
                post_axes[o] = axes
        post_nodes.append(n)
    time_picked = post_walk.time_picked

    outputs = []
    for vi in g.output:
        rows_of = _state_rows(vi.name, state_outs, producers, state_axis)
        if vi.name in post_axes:
            outputs.append(OutputInfo(vi.name, "post", post_axes[vi.name]))
        elif rows_of is not None:
            outputs.append(OutputInfo(vi.name, "state", recurrent_outputs(layout)[1], *rows_of))
        elif vi.name in final_values:
            outputs.append(OutputInfo(vi.name, "final", None))
        else:
            raise Unsupported(f"graph output {vi.name!r} is computed before the LSTM stack or is an input/constant")
    final_model, final_inputs = None, {}
    finals = [vi for vi in g.output if any(o.name == vi.name and o.kind == "final" for o in outputs)]
    if finals:
        shape = lambda rows: [rows[1] - rows[0], "B", stack.hidden] if state_axis == 0 else \
            ["B", rows[1] - rows[0], stack.hidden]  # noqa: E731
        given = [helper.make_tensor_value_info(v, stack.elem_type, shape(rows)) for v, (_, rows) in state_outs.items()]
        final_model, read = cut_model(model, finals, consts, producers, graph_inputs, "pipeline_final", given)
        final_inputs = {v: state_outs[v] for v in read if v in state_outs}

    declared = {vi.name: _declared(vi) for vi in g.input if vi.name in graph_inputs}
    for name, ax in inputs.items():
        d = declared.get(name) or []
        for role, axis in (("time", ax.time), ("batch", ax.batch)):
            if axis is not None and axis < len(d) and isinstance(d[axis], int) and d[axis] > 0:
                pins.setdefault(role, (d[axis], f"input {name!r} is declared with {role} size {d[axis]}"))

    refusal = None
    if stack.direction != "forward":
        refusal = f"time chunks are exact only for forward stacks, this one is {stack.direction}"
    elif stack.sequence_lens:
        refusal = "time chunks are not exact with sequence_lens (the micro-batch schedule handles them)"
    elif any(ax.time is None for ax in inputs.values()):
        refusal = "an input has no time axis"
    elif time_picked:
        refusal = f"{time_picked}: each item needs its whole sequence"
    # A pinned length (a fixed-shape export, or dynamo's Reshape to the example's T) binds the
    # call, not the items: the stages read 0 for the time axis wherever the model wrote T.
    return PipelineModel(
        model=model, stack=stack, states=states, consts=consts, pre_nodes=pre_nodes, post_nodes=post_nodes,
        inputs=inputs, sequence_lens=stack.sequence_lens, outputs=outputs, opset=opset, final_model=final_model,
        final_inputs=final_inputs, pins=pins, chunk_refusal=refusal,
        extra_costs={"pre": _matmul_flops(pre_nodes, consts), "post": _matmul_flops(post_nodes, consts)})


def _state_rows(value: str, state_outs: dict, producers: dict, state_axis: int) -> tuple | None:
    """("h" | "c", [a, b)) where ``value`` is rows a..b of the stack's final h or c: a node's
    Y_h/Y_c, or consecutive ones joined by a Concat (as torch's dynamo export writes the whole
    stack's from each layer's), so the pipeline hands them out without a host model."""
    if value in state_outs:
        return state_outs[value]
    node = producers.get(value)
    if node is None or node.op_type not in ("Concat", "Identity"):
        return None
    if node.op_type == "Concat" and int(next((a.i for a in node.attribute if a.name == "axis"), 0)) % 3 != state_axis:
        return None
    parts = [_state_rows(i, state_outs, producers, state_axis) for i in node.input]
    if any(p is None for p in parts) or len({p[0] for p in parts}) != 1:
        return None
    for (_, (_, end)), (_, (start, _)) in zip(parts, parts[1:]):
        if end != start:
            return None
    return parts[0][0], (parts[0][1][0], parts[-1][1][1])


def _stage_reshape(node: onnx.NodeProto, ax: Axes, dims: dict, consts: dict, pins: dict, k: int) -> onnx.NodeProto:
    """The Reshape as a stage runs it: the constant shape ``resolve_reshape`` proves (0 for the
    time and batch axes), so items of any size go through; the sizes it pins are recorded."""
    shape_in = node.input[1]
    shape, pinned = resolve_reshape(node, ax, dims.get(node.input[0]), dims.get(node.output[0]),
                                    consts.get(shape_in))
    for role, size in pinned.items():
        pins.setdefault(role, (size, f"Reshape node {node.name!r} writes {size} for the {role} axis"))
    name = f"pipe_shape{k}_{shape_in}"
    consts[name] = np.array(shape, np.int64)
    out = onnx.NodeProto()
    out.CopyFrom(node)
    out.input[1] = name
    kept = [a for a in out.attribute if a.name != "allowzero"]
    del out.attribute[:]
    out.attribute.extend(kept)
    return out


# -- layer ranges -----------------------------------------------------------------------------

def layer_costs(L: int, D: int, I: int, H: int) -> list[float]:
    """Modelled FLOPs of each layer per (time step, batch entry): the input projection and the
    recurrent product, D * 2 * (I_l + H) * 4H. T and B multiply every layer alike."""
    return [float(D * 2 * (layer_input_size(l, D, I, H) + H) * 4 * H) for l in range(L)]


def balanced_ranges(costs: list[float], stages: int, first_extra: float = 0.0, last_extra: float = 0.0
                    ) -> list[tuple[int, int]]:
    """Contiguous [start, end) layer ranges, one per stage, each non-empty, minimising the largest
    stage cost (stage 0 also carries ``first_extra``, the last ``last_extra``). Ties: the most even."""
    L = len(costs)
    if not 1 <= stages <= L:
        raise Unsupported(f"a pipeline of {stages} stages needs a stack of at least {stages} layers (a stage runs "
                          f"whole layers); this one has {L}")
    prefix = np.concatenate([[0.0], np.cumsum(costs)])

    def cost(k, a, b):
        c = prefix[b] - prefix[a]
        return c + (first_extra if k == 0 else 0.0) + (last_extra if k == stages - 1 else 0.0)


    @functools.cache
    def best(k, a):  # stages k.. over layers a..L: (max cost, sum of squares, cuts)
        if k == stages - 1:
            c = cost(k, a, L)
            return c, c * c, ()
        out = None
        for b in range(a + 1, L - (stages - k - 1) + 1):
            c = cost(k, a, b)
            m, sq, cuts = best(k + 1, b)
            cand = (max(c, m), sq + c * c, (b,) + cuts)
            if out is None or cand[:2] < out[:2]:
                out = cand
        return out

    cuts = (0,) + best(0, 0)[2] + (L,)
    return [(cuts[k], cuts[k + 1]) for k in range(stages)]


def ranges_from_counts(counts, L: int) -> list[tuple[int, int]]:
    counts = [int(c) for c in counts]
    if any(c < 1 for c in counts) or sum(counts) != L:
        raise ValueError(f"stages={counts}: layers per stage must be >= 1 and add up to the stack's {L} layers")
    starts = np.concatenate([[0], np.cumsum(counts)])
    return [(int(starts[k]), int(starts[k + 1])) for k in range(len(counts))]


def slice_weights(pm: PipelineModel, start: int, end: int) -> dict[str, np.ndarray | None]:
    """The packed W/B/P of layers [start, end) (docs/ops.md's layout: blocks layer-major)."""
    st = pm.stack
    L, D, I, H = st.layers, st.directions, st.input_size, st.hidden
    return {"W": st.W[weight_offset(L, D, I, H, start, 0):weight_offset(L, D, I, H, end, 0)],
            "B": None if st.B is None else st.B[start * D * 4 * H:end * D * 4 * H],
            "P": None if st.P is None else st.P[start * D * 3 * H:end * D * 3 * H]}


def slice_states(pm: PipelineModel, value: np.ndarray, start: int, end: int) -> np.ndarray:
    """The initial-state rows of layers [start, end): rows l*D + d along the state axis."""
    D = pm.directions
    return np.ascontiguousarray(np.take(value, np.arange(start * D, end * D), axis=pm.state_axis))


# -- stage models -----------------------------------------------------------------------------

@dataclass
class StageModel:
    index: int
    layers: tuple[int, int]
    model: onnx.ModelProto
    inputs: list[str]  # stage-0: the pipeline's inputs it reads; others: [STAGE_IN]
    outputs: list[str]  # model outputs it computes (the last stage) besides STAGE_Y / YH / YC
    has_y: bool  # it writes STAGE_Y for the next stage


def _item_value_info(vi: onnx.ValueInfoProto, ax: Axes | None, elem: int) -> onnx.ValueInfoProto:
    """``vi`` with its time and batch dims left open (a stage runs items of any size); a value
    without declared type gets ``elem`` and no shape."""
    tt = vi.type.tensor_type
    if not tt.HasField("shape") or ax is None:
        return helper.make_tensor_value_info(vi.name, tt.elem_type or elem, None)
    dims = [d.dim_value if d.HasField("dim_value") else (d.dim_param or None) for d in tt.shape.dim]
    for axis, sym in ((ax.time, "T"), (ax.batch, "B")):
        if axis is not None and axis < len(dims):
            dims[axis] = sym
    return helper.make_tensor_value_info(vi.name, tt.elem_type, dims)


def stage_models(pm: PipelineModel, ranges: list[tuple[int, int]]) -> list[StageModel]:
    K = len(ranges)
    st = pm.stack
    g = pm.model.graph
    elem = st.elem_type
    vinfo = {vi.name: vi for vi in list(g.input) + list(g.output) + list(g.value_info)}
    y_name = st.y or STAGE_Y
    post = [o for o in pm.outputs if o.kind == "post"]
    first_node = st.nodes[0]
    opsets = [o for o in pm.model.opset_import if o.domain != DOMAIN] + [helper.make_opsetid(DOMAIN, OPSET_VERSION)]
    stages = []
    for k, (a, b) in enumerate(ranges):
        first, last = k == 0, k == K - 1
        inits, nodes, inputs = [], [], []
        w = slice_weights(pm, a, b)
        prefix = f"pipe_s{k}_"
        inits.append(numpy_helper.from_array(np.ascontiguousarray(w["W"]), prefix + "W"))
        b_name = p_name = ""
        if w["B"] is not None:
            b_name = prefix + "B"
            inits.append(numpy_helper.from_array(np.ascontiguousarray(w["B"]), b_name))
        if w["P"] is not None:
            p_name = prefix + "P"
            inits.append(numpy_helper.from_array(np.ascontiguousarray(w["P"]), p_name))
        if first:
            x = st.x
            nodes.extend(pm.pre_nodes)
            for name, ax in pm.inputs.items():
                inputs.append(_item_value_info(vinfo.get(name) or helper.make_empty_tensor_value_info(name), ax, elem))
            needed = {i for n in pm.pre_nodes for i in n.input}
        else:
            shape = ["T", pm.directions, "B", pm.hidden] if pm.layout == 0 else ["B", "T", pm.directions, pm.hidden]
            inputs.append(helper.make_tensor_value_info(STAGE_IN, elem, shape))
            flat = STAGE_IN
            if pm.layout == 0:
                nodes.append(helper.make_node("Transpose", [STAGE_IN], [prefix + "tbdh"], perm=[0, 2, 1, 3]))
                flat = prefix + "tbdh"
            inits.append(numpy_helper.from_array(np.array([0, 0, -1], np.int64), prefix + "flat"))
            nodes.append(helper.make_node("Reshape", [flat, prefix + "flat"], [prefix + "x"]))
            x = prefix + "x"
            needed = set()
        state_shape = [(b - a) * pm.directions, "B", pm.hidden] if pm.layout == 0 else ["B", (b - a) * pm.directions, pm.hidden]
        inputs.append(helper.make_tensor_value_info(H0, elem, state_shape))
        inputs.append(helper.make_tensor_value_info(C0, elem, state_shape))
        if pm.sequence_lens:
            inputs.append(helper.make_tensor_value_info(pm.sequence_lens, onnx.TensorProto.INT32, ["B"]))
        y = y_name if last else STAGE_Y
        nodes.append(helper.make_node(
            OP_TYPE, [x, prefix + "W", b_name, pm.sequence_lens or "", H0, C0, p_name], [y, YH, YC],
            name=f"{first_node.name or 'fused_lstm'}_layers{a}_{b}", domain=DOMAIN))
        nodes[-1].attribute.extend(st.attributes)
        nodes[-1].attribute.append(helper.make_attribute("num_layers", b - a))
        outputs = []
        if last:
            nodes.extend(pm.post_nodes)
            needed |= {i for n in pm.post_nodes for i in n.input}
            for o in post:
                outputs.append(_item_value_info(vinfo.get(o.name) or helper.make_empty_tensor_value_info(o.name),
                                                o.axes, elem))
        else:
            outputs.append(helper.make_tensor_value_info(STAGE_Y, elem, None))
        outputs.append(helper.make_tensor_value_info(YH, elem, state_shape))
        outputs.append(helper.make_tensor_value_info(YC, elem, state_shape))
        made = {o for n in nodes for o in n.output}
        for name in sorted(needed - made):
            if name in pm.consts:
                inits.append(numpy_helper.from_array(np.asarray(pm.consts[name]), name))
        graph = helper.make_graph(nodes, f"{g.name or 'model'}_stage{k}", inputs, outputs, inits)
        model = helper.make_model(graph, opset_imports=opsets, producer_name="lstm_ort.pipeline")
        model.ir_version = pm.model.ir_version
        stages.append(StageModel(k, (a, b), model, list(pm.inputs) if first else [STAGE_IN],
                                 [o.name for o in post] if last else [], not last))
    return stages
