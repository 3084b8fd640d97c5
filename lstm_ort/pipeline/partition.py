"""Splitting a model with one FusedLSTM stack into pipeline stages (docs/pipeline.md).

``analyze`` reads the model: the one FusedLSTM node, the per-time-step ops before it (ancestors
of X: stage 0) and after it (consumers of Y: the last stage), and where every input and output
has its time and batch axes. ``layer_costs`` / ``balanced_ranges`` choose layer ranges, and
``stage_models`` builds one ONNX model per range: a FusedLSTM node of ``num_layers`` = the range's
size whose W/B/P are the packed slices of the original's (``weight_offset`` gives the
boundaries; a range starting at layer l > 0 has input size D*H), fed by the previous range's Y
through Transpose(0,2,1,3) + Reshape (docs/ops.md's stacking). Every stage reads its initial
states (``pipe_h0``/``pipe_c0``: the original's rows of its layers, or zeros) and writes its final
states (``pipe_yh``/``pipe_yc``): a pipeline concatenates those, and time chunks carry them.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import helper, numpy_helper

from lstm_ort.ops.identity import DOMAIN, OP_TYPE, OPSET_VERSION
from lstm_ort.ops.packing import layer_input_size, weight_offset
from lstm_ort.pipeline.axes import Axes, Unsupported, attr, backward, forward
from lstm_ort.runtime.model_io import load_model
from lstm_ort.runtime.nodes import node_ranks, node_shapes

# Names inside stage models.
STAGE_IN, STAGE_Y, H0, C0, YH, YC = "pipe_in", "pipe_y", "pipe_h0", "pipe_c0", "pipe_yh", "pipe_yc"
CONTROL_FLOW = {"If", "Loop", "Scan"}


@dataclass
class OutputInfo:
    name: str
    kind: str  # "post" (Y or an op after it, computed by the last stage), "Y_h" or "Y_c" (assembled)
    axes: Axes


@dataclass
class PipelineModel:
    """What a pipeline needs to know about a model; ``analyze`` builds it."""

    model: onnx.ModelProto
    node: onnx.NodeProto
    layers: int
    directions: int
    input_size: int
    hidden: int
    layout: int
    direction: str
    elem_type: int
    consts: dict
    pre_nodes: list
    post_nodes: list
    inputs: dict  # stage-0 graph inputs (not states nor lengths) -> Axes
    sequence_lens: str | None
    initial_h: str | None
    initial_c: str | None
    outputs: list  # OutputInfo, in graph order
    opset: int
    chunk_refusal: str | None = None  # why time chunks are not exact for this model, None if they are
    extra_costs: dict = field(default_factory=dict)  # "pre"/"post": FLOPs per (time step, batch entry)

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

    def y_axes(self) -> Axes:
        return Axes(4, 0, 2) if self.layout == 0 else Axes(4, 1, 0)

    def state_axes(self) -> Axes:
        return Axes(3, None, 1) if self.layout == 0 else Axes(3, None, 0)


def _constants(model: onnx.ModelProto) -> dict[str, np.ndarray]:
    consts = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    for node in model.graph.node:
        if node.op_type == "Constant":
            a = node.attribute[0]
            if a.name == "value":
                consts[node.output[0]] = numpy_helper.to_array(a.t)
            elif a.name in ("value_float", "value_floats"):
                consts[node.output[0]] = np.array(helper.get_attribute_value(a), np.float32)
            elif a.name in ("value_int", "value_ints"):
                consts[node.output[0]] = np.array(helper.get_attribute_value(a), np.int64)
            else:
                raise Unsupported(f"Constant node {node.name!r} with {a.name}")
    return consts


def _matmul_flops(nodes, consts) -> float:
    """FLOPs per (time step, batch entry) of the MatMuls by constant matrices among ``nodes``."""
    return float(sum(2 * np.prod(np.shape(consts[n.input[1]])) for n in nodes
                     if n.op_type == "MatMul" and n.input[1] in consts))


def analyze(model_or_path) -> PipelineModel:
    """Reads a model with one FusedLSTM stack; raises Unsupported (saying why) for any other."""
    model = load_model(model_or_path)
    g = model.graph
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 13)
    if any(n.op_type in CONTROL_FLOW for n in g.node) or model.functions:
        raise Unsupported("the model has control flow (If/Loop/Scan) or functions: a pipeline takes one graph "
                          "with one FusedLSTM stack")
    fused = [n for n in g.node if n.domain == DOMAIN and n.op_type == OP_TYPE]
    if len(fused) != 1:
        raise Unsupported(f"a pipeline takes a model with exactly one FusedLSTM node, this one has {len(fused)}"
                          + (" (run `lstm-ort optimize` first)" if not fused else ""))
    node = fused[0]
    if node_ranks(node).any:
        raise Unsupported("the FusedLSTM node has factored weights (optimize --low-rank): a pipeline splits "
                          "whole-weight stacks only")
    shapes = {id(n): s for n, s in node_shapes(model)}
    shape = shapes.get(id(node))
    if shape is None:
        raise Unsupported("the FusedLSTM node's W is not an initializer: its layers cannot be split")
    consts = _constants(model)
    ins = list(node.input) + [""] * (7 - len(node.input))
    for k, what in ((1, "W"), (2, "B"), (6, "P")):
        if ins[k] and ins[k] not in consts:
            raise Unsupported(f"the FusedLSTM node's {what} is not a constant")
    graph_inputs = {vi.name: vi for vi in g.input if vi.name not in consts}
    for k, what in ((3, "sequence_lens"), (4, "initial_h"), (5, "initial_c")):
        if ins[k] and ins[k] not in graph_inputs:
            raise Unsupported(f"the FusedLSTM node's {what} is computed in the graph; the pipeline needs it as a "
                              f"graph input")
    if (ins[4] == "") != (ins[5] == ""):
        raise Unsupported("the FusedLSTM node has one of initial_h/initial_c only")
    layout = int(attr(node, "layout", 0))
    direction = attr(node, "direction", b"forward")
    direction = direction.decode() if isinstance(direction, bytes) else str(direction)
    L, D, I, H = shape.layers, shape.directions, shape.input_size, shape.hidden_size
    elem_type = g.initializer[[i.name for i in g.initializer].index(ins[1])].data_type

    producers = {o: n for n in g.node for o in n.output if o}
    # Before: the ancestors of X (constants aside), walked back from X with X's axes.
    x_axes = Axes(3, 0, 1) if layout == 0 else Axes(3, 1, 0)
    known: dict[str, Axes] = {ins[0]: x_axes}
    pre_ids, order, stack = set(), [], [ins[0]]
    while stack:
        name = stack.pop()
        if name in consts or name in graph_inputs:
            continue
        prod = producers.get(name)
        if prod is None:
            raise Unsupported(f"value {name!r} has no producer")
        if id(prod) in pre_ids:
            continue
        if prod is node:
            raise Unsupported("the FusedLSTM node feeds itself")
        pre_ids.add(id(prod))
        order.append(prod)
        for n_in, ax in backward(prod, known[prod.output[0]], consts, opset).items():
            if n_in in known and known[n_in] != ax:
                raise Unsupported(f"value {n_in!r} is used with different time/batch axes")
            known[n_in] = ax
            stack.append(n_in)
        if len([o for o in prod.output if o]) > 1 and prod.op_type != "Dropout":
            raise Unsupported(f"node {prod.name!r} before the LSTM has several outputs")
    pre_nodes = [n for n in g.node if id(n) in pre_ids]  # graph order is topological
    inputs = {name: ax for name, ax in known.items() if name in graph_inputs}

    # After: every other node must read Y (or values computed from it), never the final states.
    y_out = node.output[0] if len(node.output) > 0 else ""
    state_outs = {o for o in node.output[1:3] if o}
    post_axes: dict[str, Axes] = {}
    if y_out:
        post_axes[y_out] = Axes(4, 0, 2) if layout == 0 else Axes(4, 1, 0)
    post_nodes = []
    for n in g.node:
        if n is node or id(n) in pre_ids or n.op_type == "Constant":
            continue
        var = [i for i in n.input if i and i not in consts]
        if any(i in state_outs for i in var):
            raise Unsupported(f"node {n.name!r} ({n.op_type}) reads the LSTM's final states: the pipeline assembles "
                              f"those from every stage, only ops on Y may follow the stack")
        missing = [i for i in var if i not in post_axes]
        if missing:
            raise Unsupported(f"node {n.name!r} ({n.op_type}) is neither before the LSTM nor computed from its Y "
                              f"(it reads {missing[0]!r})")
        out_axes = forward(n, {i: post_axes[i] for i in var}, consts, opset)
        for o in n.output:
            if o:
                post_axes[o] = out_axes
        post_nodes.append(n)
    outputs = []
    for vi in g.output:
        if vi.name in state_outs:
            outputs.append(OutputInfo(vi.name, "Y_h" if vi.name == node.output[1] else "Y_c",
                                      Axes(3, None, 1) if layout == 0 else Axes(3, None, 0)))
        elif vi.name in post_axes:
            outputs.append(OutputInfo(vi.name, "post", post_axes[vi.name]))
        else:
            raise Unsupported(f"graph output {vi.name!r} is computed before the LSTM or is an input/constant")
    for name, ax in inputs.items():
        if ax.batch is None:
            raise Unsupported(f"input {name!r} has no batch axis the pipeline can find")

    refusal = None
    if direction != "forward":
        refusal = f"time chunks are exact only for forward stacks, this one is {direction}"
    elif ins[3]:
        refusal = "time chunks are not exact with sequence_lens (the micro-batch schedule handles them)"
    elif any(ax.time is None for ax in inputs.values()):
        refusal = "an input has no time axis"
    return PipelineModel(
        model=model, node=node, layers=L, directions=D, input_size=I, hidden=H, layout=layout,
        direction=direction, elem_type=elem_type, consts=consts, pre_nodes=pre_nodes, post_nodes=post_nodes,
        inputs=inputs, sequence_lens=ins[3] or None, initial_h=ins[4] or None, initial_c=ins[5] or None,
        outputs=outputs, opset=opset, chunk_refusal=refusal,
        extra_costs={"pre": _matmul_flops(pre_nodes, consts), "post": _matmul_flops(post_nodes, consts)})


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
        raise Unsupported(f"{stages} stages need between 1 and {L} (the stack's layers)")
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
    L, D, I, H = pm.layers, pm.directions, pm.input_size, pm.hidden
    ins = list(pm.node.input) + [""] * (7 - len(pm.node.input))
    W = pm.consts[ins[1]]
    out = {"W": W[weight_offset(L, D, I, H, start, 0):weight_offset(L, D, I, H, end, 0)]}
    out["B"] = pm.consts[ins[2]][start * D * 4 * H:end * D * 4 * H] if ins[2] else None
    out["P"] = pm.consts[ins[6]][start * D * 3 * H:end * D * 3 * H] if ins[6] else None
    return out


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


def stage_models(pm: PipelineModel, ranges: list[tuple[int, int]]) -> list[StageModel]:
    K = len(ranges)
    g = pm.model.graph
    elem = pm.elem_type
    vinfo = {vi.name: vi for vi in list(g.input) + list(g.output) + list(g.value_info)}
    y_name = pm.node.output[0] if len(pm.node.output) > 0 and pm.node.output[0] else STAGE_Y
    post_outputs = [o.name for o in pm.outputs if o.kind == "post"]
    attrs = [a for a in pm.node.attribute if a.name != "num_layers"]
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
            x = pm.node.input[0]
            nodes.extend(pm.pre_nodes)
            for name in pm.inputs:
                inputs.append(vinfo[name] if name in vinfo else helper.make_tensor_value_info(name, elem, None))
            needed = {i for n in pm.pre_nodes for i in n.input} | {x}
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
            inputs.append(vinfo.get(pm.sequence_lens) or helper.make_tensor_value_info(pm.sequence_lens, onnx.TensorProto.INT32, ["B"]))
        y = y_name if last else STAGE_Y
        nodes.append(helper.make_node(
            OP_TYPE, [x, prefix + "W", b_name, pm.sequence_lens or "", H0, C0, p_name], [y, YH, YC],
            name=f"{pm.node.name or 'fused_lstm'}_layers{a}_{b}", domain=DOMAIN))
        nodes[-1].attribute.extend(attrs)
        nodes[-1].attribute.append(helper.make_attribute("num_layers", b - a))
        outputs = []
        if last:
            nodes.extend(pm.post_nodes)
            needed |= {i for n in pm.post_nodes for i in n.input}
            for name in post_outputs:
                outputs.append(vinfo[name] if name in vinfo else helper.make_tensor_value_info(name, elem, None))
        else:
            outputs.append(helper.make_tensor_value_info(STAGE_Y, elem, None))
        outputs.append(helper.make_tensor_value_info(YH, elem, state_shape))
        outputs.append(helper.make_tensor_value_info(YC, elem, state_shape))
        for name in sorted(needed):
            if name in pm.consts and name not in pm.node.input:
                inits.append(numpy_helper.from_array(np.asarray(pm.consts[name]), name))
        graph = helper.make_graph(nodes, f"{g.name or 'model'}_stage{k}", inputs, outputs, inits)
        model = helper.make_model(graph, opset_imports=opsets, producer_name="lstm_ort.pipeline")
        model.ir_version = pm.model.ir_version
        stages.append(StageModel(k, (a, b), model, list(pm.inputs) if first else [STAGE_IN],
                                 post_outputs if last else [], not last))
    return stages
