"""Rule: FusedLSTM layers chained through export glue -> one multi-layer FusedLSTM.

Pattern: FusedLSTM A whose Y feeds, through nothing else, the glue exporters put between
stacked layers (Transpose(0,2,1,3) + Reshape(0,0,-1), Squeeze of the direction axis, or Reshape
alone in layout 1) and then X of FusedLSTM B. Condition: same attributes but num_layers, same
sequence_lens, initial states on every layer or none (joined by one Slice where they are
consecutive Slices of one tensor, or read whole where that tensor is a graph input declared to
hold just the stack's layers, as torch's exports give h0 and c0; else joined by a Concat).
Replacement: one FusedLSTM with the packed weights concatenated layer-major; each layer's
Y_h/Y_c uses read a Slice of the fused outputs, and a Concat that rebuilds the whole stack's
states reads them directly.
"""

from __future__ import annotations

from dataclasses import dataclass

import onnx_ir as ir

from lstm_ort.ops.identity import ELEMENT_TYPES, INT8_WEIGHT_TYPE, is_fused, num_directions, type_name
from lstm_ort.rewriter import opset_nodes, shape_expr
from lstm_ort.rewriter.fused_node import insert_fused_node
from lstm_ort.rewriter.graph_utils import axes_of, const_array, const_tensor, move_value, slice_bounds
from lstm_ort.rewriter.lazy_weights import merged
from lstm_ort.rewriter.rule import OK, CheckResult, Rule

_WEIGHT_TYPES = (*ELEMENT_TYPES, INT8_WEIGHT_TYPE)
_SAME = ("hidden_size", "direction", "layout", "clip", "input_forget", "activations", "activation_alpha",
         "activation_beta")


def _attr(node: ir.Node, name: str, default=None):
    a = node.attributes.get(name)
    return default if a is None else a.value


def _num_dirs(node: ir.Node) -> int:
    return num_directions(_attr(node, "direction", "forward"))


def _single_use(value: ir.Value, besides: list[ir.Node] = ()) -> ir.Node | None:
    uses = [u for u in value.uses() if u.node not in besides]
    if len(uses) != 1 or value.is_graph_output():
        return None
    return uses[0].node


_SHAPE_OPS = ("Shape", "Slice", "Gather", "Concat", "Mul", "Reshape", "Squeeze", "Unsqueeze", "Cast", "ReduceProd",
              "Identity")


def _shape_code(value: ir.Value) -> tuple[list[ir.Node], set[ir.Node]]:
    """The shape arithmetic on Shape(value) (dynamo's export computes the target of the Reshape
    that flattens value, with a dynamic batch), and the Reshapes whose target it computes; none
    where it computes anything else."""
    found, targets, todo = [], set(), [u.node for u in value.uses() if u.node.op_type == "Shape"]
    while todo:
        node = todo.pop()
        if node in found:
            continue
        if node.op_type not in _SHAPE_OPS or any(out.is_graph_output() for out in node.outputs):
            return [], set()
        found.append(node)
        for out in node.outputs:
            for use in out.uses():
                if use.node.op_type == "Reshape" and use.idx == 1 and use.node.inputs[0] is value:
                    targets.add(use.node)
                else:
                    todo.append(use.node)
    return found, targets


def _is_flatten_reshape(node: ir.Node, width: int) -> bool:
    """Reshape [T, B, D, H] -> [T, B, D*H] (or the layout-1 twin): leading dims kept (0, or equal
    to the input's dims), the last one D*H or -1; the target a constant or computed from the
    input's own shape (dynamo's export with a dynamic batch)."""
    if node.op_type != "Reshape" or len(node.inputs) < 2:
        return False
    source = node.inputs[0]
    shape = const_array(node.inputs[1])
    if shape is None:
        found = shape_expr.elements(node.inputs[1])
        return (found is not None and len(found) == 3 and found[0] == shape_expr.dim(source, 0)
                and found[1] == shape_expr.dim(source, 1) and found[2] in (shape_expr.Product(width),
                                                                           shape_expr.dim(source, 2) * shape_expr.dim(source, 3)))
    if shape.shape != (3,) or shape[2] not in (-1, width) or list(shape).count(-1) > 1:
        return False
    dims = source.shape
    for k in (0, 1):
        known = dims is not None and isinstance(dims[k], int)
        if not (shape[k] == 0 or (known and shape[k] == dims[k])):
            return False
    return True


def _squeezes_axis(node: ir.Node, axis: int) -> bool:
    return node.op_type == "Squeeze" and axes_of(node) in ([axis], [axis - 4])


def next_layer(a: ir.Node) -> tuple[ir.Node, list[ir.Node]] | None:
    """The FusedLSTM that A feeds through stacking glue, and the glue nodes."""
    D, H, layout = _num_dirs(a), _attr(a, "hidden_size"), _attr(a, "layout", 0)
    node = _single_use(a.outputs[0])
    glue = []
    if node is None:
        return None
    if layout == 0 and node.op_type == "Transpose" and list(_attr(node, "perm", [])) == [0, 2, 1, 3]:
        glue.append(node)
        shape_code, targets = _shape_code(node.outputs[0])
        node = _single_use(node.outputs[0], besides=shape_code)
        if node is None or not _is_flatten_reshape(node, D * H) or targets - {node}:
            return None
        glue += shape_code
    elif not (_is_flatten_reshape(node, D * H) and layout == 1) and not (D == 1 and _squeezes_axis(node, 1 + layout)):
        return None
    glue.append(node)
    b = _single_use(node.outputs[0])
    if not is_fused(b) or b.inputs[0] is not node.outputs[0]:
        return None
    return b, glue


def _compatible(a: ir.Node, b: ir.Node) -> bool:
    def inp(n, i):
        return n.inputs[i] if i < len(n.inputs) else None

    if any(_attr(a, k) != _attr(b, k) for k in _SAME):
        return False
    if inp(a, 3) is not inp(b, 3):  # the same sequence_lens value, or none on both
        return False
    return all((inp(a, i) is None) == (inp(b, i) is None) for i in (4, 5))


def _slice_of(value: ir.Value | None):
    """(source, start, end, axis) when value = Slice(source, [start], [end], [axis]) with constants, step 1."""
    node = value.producer() if value is not None else None
    bounds = slice_bounds(node) if node is not None else None
    if bounds is None:
        return None
    starts, ends, axes, steps = bounds
    if len(starts) != 1 or axes is None or len(axes) != 1 or (steps is not None and steps != [1]):
        return None
    return node.inputs[0], starts[0], ends[0], axes[0]


def _merged_state(chain: list[ir.Node], index: int, state_axis: int):
    """How the layers' initial states (input `index`) join into the stack's: ("none",) when no
    layer has one; ("slice", source, start, end) when they are consecutive Slices of one tensor
    (torch's exports), so one Slice serves; ("concat", values) otherwise; None when only some
    layers have one (the others' zeros have no tensor to join)."""
    values = [n.inputs[index] if index < len(n.inputs) else None for n in chain]
    if all(v is None for v in values):
        return ("none",)
    if any(v is None for v in values):
        return None
    slices = [_slice_of(v) for v in values]
    if all(s is not None for s in slices):
        src, start = slices[0][0], slices[0][1]
        pos = start
        for (s, lo, hi, axis), node in zip(slices, chain):
            if s is not src or lo != pos or hi - lo != _attr(node, "num_layers", 1) * _num_dirs(node) \
                    or axis != state_axis:
                break
            pos = hi
        else:
            return ("slice", src, start, pos)
    return ("concat", values)


def _cat(chain, index, width_per_layer, dtype) -> ir.TensorProtocol | None:
    """Packed input `index` (W, B or P) of the whole chain, lazily: layers without it contribute zeros."""
    present = [index < len(n.inputs) and n.inputs[index] is not None for n in chain]
    if not any(present):
        return None
    parts = [const_tensor(node.inputs[index]) if has else _attr(node, "num_layers", 1) * _num_dirs(node) * width_per_layer
             for node, has in zip(chain, present)]
    return merged(parts, dtype)


@dataclass
class Chain:
    layers: list[ir.Node]  # FusedLSTM nodes, first to last
    glue: list[ir.Node]    # the export glue between them


class StackLstm(Rule):
    name = "stack_lstm"

    def find(self, graph) -> list[Chain]:
        """Maximal chains of compatible FusedLSTM layers, with the glue between them."""
        succ = {}
        for node in graph:
            if is_fused(node):
                found = next_layer(node)
                if found and _compatible(node, found[0]):
                    succ[node] = found
        targets = {b for b, _ in succ.values()}
        chains = []
        for head in list(succ):
            if head in targets:
                continue
            chain = Chain([head], [])
            while chain.layers[-1] in succ:
                b, g = succ[chain.layers[-1]]
                chain.layers.append(b)
                chain.glue.extend(g)
            chains.append(chain)
        return chains

    def nodes(self, chain: Chain) -> list[ir.Node]:
        return chain.layers

    def describe(self, chain: Chain) -> str:
        return f"{len(chain.layers)} FusedLSTM nodes"

    def check(self, chain: Chain) -> CheckResult:
        state_axis = _state_axis(chain.layers[0])
        for node in chain.layers:
            for index, name in ((1, "W"), (2, "B"), (6, "P"), (8, "W_scale")):
                value = node.inputs[index] if index < len(node.inputs) else None
                if value is not None and const_tensor(value) is None:
                    return CheckResult.fail(f"{node.name or 'a layer'}: {name} is not a constant")
        dtypes = {const_tensor(node.inputs[1]).dtype for node in chain.layers}
        if len(dtypes) != 1 or next(iter(dtypes)) not in _WEIGHT_TYPES:
            return CheckResult.fail("the layers' weights differ in element type")
        for index, name in ((4, "initial_h"), (5, "initial_c")):
            if _merged_state(chain.layers, index, state_axis) is None:
                return CheckResult.fail(f"some layers have an {name} and others none")
        return OK

    def rewrite(self, graph, chain: Chain) -> ir.Node:
        """Replaces the chain by one FusedLSTM."""
        nodes = chain.layers
        first, last = nodes[0], nodes[-1]
        state_axis = _state_axis(first)
        H, D = _attr(first, "hidden_size"), _num_dirs(first)
        counts = [_attr(n, "num_layers", 1) for n in nodes]  # layers each node holds
        base = (first.name or "lstm") + "_stack"

        def state_input(index: int):
            kind, *how = _merged_state(nodes, index, state_axis)
            if kind == "none":
                return None
            if kind == "slice":
                source, start, end = how
                if _spans_the_axis(source, start, end, state_axis):
                    return source  # the stack's layers are all the tensor holds: a Slice would copy it whole
                return opset_nodes.slice_axis(graph, first, source, start, end, state_axis, name=f"{base}_state_slice")
            # The graph is sorted below: later layers' states may come after the first layer.
            return opset_nodes.node(graph, first, "Concat", how[0], {"axis": state_axis}, name=f"{base}_state_concat")

        attrs = dict(first.attributes)
        attrs["num_layers"] = ir.AttrInt64("num_layers", sum(counts))
        w_dtype = type_name(const_tensor(first.inputs[1]).dtype)
        dtype = "float32" if w_dtype == "int8" else w_dtype  # int8 weights: float32 B, P and scales
        fused = insert_fused_node(
            graph, first, name=base, attributes=attrs, x=first.inputs[0],
            w=_cat(nodes, 1, 0, w_dtype), b=_cat(nodes, 2, 4 * H, dtype), p=_cat(nodes, 6, 3 * H, dtype),
            seq_lens=first.inputs[3] if len(first.inputs) > 3 else None,
            initial_h=state_input(4), initial_c=state_input(5),
            w_scale=_cat(nodes, 8, 8 * H, dtype) if w_dtype == "int8" else None)

        # Y: the last layer's. Y_h / Y_c: a whole-stack Concat reads the fused output; other uses a Slice.
        move_value(last.outputs[0], fused.outputs[0])
        for k in (1, 2):
            concat = _whole_stack_concat([n.outputs[k] for n in nodes], state_axis)
            if concat is not None:
                move_value(concat.outputs[0], fused.outputs[k])
                graph.remove(concat, safe=True)
            offset = 0
            for node, count in zip(nodes, counts):
                value = node.outputs[k]
                if value.uses() or value.is_graph_output():
                    sliced = opset_nodes.slice_axis(graph, fused, fused.outputs[k], offset, offset + count * D,
                                                    state_axis, name=f"{base}_out_slice_{k}", after=True)
                    move_value(value, sliced)
                offset += count * D
        graph.remove([*chain.glue, *nodes], safe=True)
        graph.sort()
        return fused


def _spans_the_axis(value: ir.Value, start: int, end: int, axis: int) -> bool:
    """Whether [start, end) along ``axis`` is all of ``value``: a graph input whose size there is
    declared (onnxruntime refuses a feed of another size; an exporter's declaration of an
    intermediate value can be wrong, and FusedLSTM would then fail on the state's shape)."""
    shape = value.shape
    return start == 0 and value.is_graph_input() and shape is not None and axis < len(shape) \
        and isinstance(shape[axis], int) and shape[axis] == end


def _state_axis(node: ir.Node) -> int:
    return 0 if _attr(node, "layout", 0) == 0 else 1


def _whole_stack_concat(values: list[ir.Value], axis: int) -> ir.Node | None:
    uses = [list(v.uses()) for v in values]
    if any(len(u) != 1 for u in uses) or any(v.is_graph_output() for v in values):
        return None
    node = uses[0][0].node
    if node.op_type != "Concat" or list(node.inputs) != values or _attr(node, "axis") not in (axis, axis - 3):
        return None
    return node
