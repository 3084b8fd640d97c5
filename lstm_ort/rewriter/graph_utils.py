"""Small onnx-ir helpers the rules share, and what the driver tells them about the model being
rewritten (RewriteContext)."""

from __future__ import annotations

import contextlib
import contextvars
from dataclasses import dataclass, field

import numpy as np
import onnx_ir as ir


@dataclass
class RewriteContext:
    """Set by the driver while its rules run over one model."""

    # Initializers that are also graph inputs (keep_initializers_as_inputs): a caller may feed
    # them, so they are not constants unless freezing them was asked for.
    freeze_inputs: bool = False
    # Every name used in the model, values and nodes of every graph: new names avoid them all
    # (a value name reused in a subgraph breaks SSA; two nodes of one name fail to load).
    names: set[str] = field(default_factory=set)
    # The default-domain opset each graph runs under (subgraphs take their model's).
    opsets: dict[int, int] = field(default_factory=dict)


_CONTEXT: contextvars.ContextVar[RewriteContext | None] = contextvars.ContextVar("lstm_ort_rewrite", default=None)


def context() -> RewriteContext:
    return _CONTEXT.get() or RewriteContext()


@contextlib.contextmanager
def rewrite_context(ctx: RewriteContext):
    token = _CONTEXT.set(ctx)
    try:
        yield ctx
    finally:
        _CONTEXT.reset(token)


def default_opset(graph: ir.Graph | ir.Function) -> int | None:
    version = context().opsets.get(id(graph))
    if version is None:
        version = graph.opset_imports.get("", graph.opset_imports.get("ai.onnx"))
    return version


def is_overridable(value: ir.Value | None) -> bool:
    """An initializer that is also a graph input: a caller may feed another value."""
    return (value is not None and value.is_graph_input() and value.is_initializer()
            and not context().freeze_inputs)


def const_tensor(value: ir.Value | None) -> ir.TensorProtocol | None:
    """The value's constant tensor (initializer or Constant node), without reading its data; None
    for a value that is not constant, or an initializer a caller may override."""
    if value is None or is_overridable(value):
        return None
    if value.const_value is not None:
        return value.const_value
    producer = value.producer()
    if producer is not None and producer.op_type == "Constant" and producer.domain in ("", "ai.onnx"):
        attr = producer.attributes.get("value")
        if attr is not None and attr.type == ir.AttributeType.TENSOR:
            return attr.value
    return None


def const_shape(value: ir.Value | None) -> tuple[int, ...] | None:
    tensor = const_tensor(value)
    return None if tensor is None else tuple(int(d) for d in tensor.shape)


def const_array(value: ir.Value | None) -> np.ndarray | None:
    """The value's constant contents (initializer or Constant node), or None (also for an
    initializer a caller may override by feeding it)."""
    if value is None or is_overridable(value):
        return None
    if value.const_value is not None:
        return value.const_value.numpy()
    producer = value.producer()
    if producer is not None and producer.op_type == "Constant" and producer.domain in ("", "ai.onnx"):
        attr = producer.attributes.get("value")
        if attr is not None:
            return attr.value.numpy()
    return None


# Ops whose output holds only elements of their first input (rearranged, repeated, cut or cast):
# all zeros in, all zeros out. A Cast of 0 is 0 in every numeric type.
_ZEROS_KEEPING = ("Expand", "Tile", "Slice", "Gather", "Reshape", "Squeeze", "Unsqueeze", "Transpose", "Flatten",
                  "Identity", "Cast", "Split")


def is_zeros(value: ir.Value | None) -> bool:
    """True for a tensor proven all zeros: a zero constant, ConstantOfShape with a zero or absent
    value, and what only rearranges, repeats, cuts, casts or concatenates such tensors (how
    exporters spell an absent initial state: torch slices one zero tensor per layer, built from
    the input's shape)."""
    if value is None:
        return False
    array = const_array(value)
    if array is not None:
        return not array.any()
    node = value.producer()
    if node is None or node.domain not in ("", "ai.onnx") or not node.inputs:
        return False
    if node.op_type == "ConstantOfShape":
        attr = node.attributes.get("value")
        return attr is None or not attr.value.numpy().any()
    if node.op_type in _ZEROS_KEEPING:
        return is_zeros(node.inputs[0])
    if node.op_type == "Concat":
        return all(is_zeros(v) for v in node.inputs)
    return False


def add_constant(graph: ir.Graph | ir.Function, anchor: ir.Node, name: str,
                 array: np.ndarray | ir.TensorProtocol) -> ir.Value:
    """A constant for use by a node next to `anchor`: an initializer in a graph, a Constant node in a function.
    `name` is made unique in the model; `array` may be a lazy tensor (evaluated when written)."""
    name = unique_name(graph, name)
    if isinstance(array, np.ndarray):
        tensor = ir.tensor(array, name=name)
    else:
        tensor = array
        tensor.name = name
    if isinstance(graph, ir.Graph):
        value = ir.Value(name=name, const_value=tensor, shape=ir.Shape(tensor.shape), type=ir.TensorType(tensor.dtype))
        graph.register_initializer(value)
        return value
    node = ir.Node("", "Constant", [], ir.convenience.convert_attributes({"value": tensor}),
                   name=unique_name(graph, name + "_const"))
    node.outputs[0].name = name
    node.outputs[0].shape, node.outputs[0].type = ir.Shape(tensor.shape), ir.TensorType(tensor.dtype)
    graph.insert_before(anchor, node)
    return node.outputs[0]


def model_names(model: ir.Model) -> set[str]:
    """Every value and node name of every graph and function of the model."""
    names: set[str] = set()
    for _, graph in iter_graphs(model):
        names.update(v.name for v in graph.inputs if v.name)
        names.update(v.name for v in graph.outputs if v.name)
        if isinstance(graph, ir.Graph):
            names.update(graph.initializers)
        for node in graph:
            if node.name:
                names.add(node.name)
            names.update(v.name for v in node.outputs if v.name)
    return names


def unique_name(graph: ir.Graph | ir.Function, base: str) -> str:
    """`base`, or `base_k`, unused by any value or node: of the whole model while the driver runs
    the rules (a name reused in a subgraph breaks SSA; two nodes of one name fail to load), else
    of the graph. The name returned is taken from then on."""
    ctx = _CONTEXT.get()
    if ctx is not None:
        taken = ctx.names
    else:
        taken = {v.name for n in graph for v in n.outputs} | {v.name for v in graph.inputs} | {n.name for n in graph}
        if isinstance(graph, ir.Graph):
            taken |= set(graph.initializers)
    name, k = base, 1
    while name in taken:
        name, k = f"{base}_{k}", k + 1
    if ctx is not None:
        ctx.names.add(name)
    return name


def replace_outputs(old: ir.Node, new: ir.Node) -> None:
    """Moves every use and the names of old's outputs to new's (graph outputs included)."""
    for o, n in zip(old.outputs, new.outputs):
        if o.name is None or not (o.uses() or o.is_graph_output()):
            continue
        name = o.name
        n.type, n.shape = o.type, o.shape
        ir.convenience.replace_all_uses_with(o, n, replace_graph_outputs=True)
        o.name = None
        n.name = name


def iter_graphs(model: ir.Model):
    """(location, graph) for the main graph, every subgraph of If/Loop/Scan (at any depth), and every function."""

    def walk(graph, location):
        yield location, graph
        for node in list(graph):
            for attr in node.attributes.values():
                if attr.type == ir.AttributeType.GRAPH:
                    yield from walk(attr.value, f"{location}/{node.name or node.op_type}.{attr.name}")
                elif attr.type == ir.AttributeType.GRAPHS:
                    for k, g in enumerate(attr.value):
                        yield from walk(g, f"{location}/{node.name or node.op_type}.{attr.name}[{k}]")

    yield from walk(model.graph, "graph")
    for function in model.functions.values():
        yield from walk(function, f"function:{function.name}")


def drop_if_unused(graph, value: ir.Value) -> None:
    """A replaced constant, once nothing reads it: its initializer, or its Constant node."""
    if value.uses() or value.is_graph_output() or value.is_graph_input():
        return
    if isinstance(graph, ir.Graph) and value.name in graph.initializers:
        del graph.initializers[value.name]
    producer = value.producer()
    if producer is not None and producer.op_type == "Constant":
        graph.remove(producer, safe=True)


def move_value(old: ir.Value, new: ir.Value) -> None:
    """Every use, graph-output place and name of `old` to `new`, the same tensor."""
    name = old.name
    new.type, new.shape = old.type, old.shape
    ir.convenience.replace_all_uses_with(old, new, replace_graph_outputs=True)
    if old.is_graph_output() or name:
        old.name = None
        new.name = name


def slice_bounds(node: ir.Node) -> tuple[list[int], list[int], list[int] | None, list[int] | None] | None:
    """(starts, ends, axes, steps) of a Slice with constant bounds, in either form (attributes
    before opset 10, inputs after); axes or steps None where absent. None when not constant."""
    if node.op_type != "Slice":
        return None
    if len(node.inputs) == 1:
        got = [node.attributes.get(k) for k in ("starts", "ends", "axes")]
        if got[0] is None or got[1] is None:
            return None
        return list(got[0].value), list(got[1].value), list(got[2].value) if got[2] is not None else None, None
    if len(node.inputs) < 3:
        return None
    found = [const_array(node.inputs[k]) if len(node.inputs) > k and node.inputs[k] is not None else None
             for k in range(1, 5)]
    if found[0] is None or found[1] is None:
        return None
    for k in (2, 3):
        if len(node.inputs) > k + 1 and node.inputs[k + 1] is not None and found[k] is None:
            return None  # axes or steps given but not constant
    as_list = lambda a: None if a is None else [int(v) for v in a.reshape(-1)]  # noqa: E731
    return as_list(found[0]), as_list(found[1]), as_list(found[2]), as_list(found[3])


def axes_of(node: ir.Node) -> list[int] | None:
    """The constant axes of a Squeeze/Unsqueeze/Reduce node, given as the second input (opset 13
    on) or as the attribute (before); None when absent or not constant."""
    if len(node.inputs) > 1 and node.inputs[1] is not None:
        array = const_array(node.inputs[1])
        return None if array is None else [int(a) for a in array.reshape(-1)]
    attr = node.attributes.get("axes")
    return None if attr is None else [int(a) for a in attr.value]


def same_tensor(a: ir.Value | None, b: ir.Value | None, depth: int = 6) -> bool:
    """Whether a and b hold the same tensor: one value, equal constants, or outputs of the same
    deterministic op with the same attributes on the same tensors (two Transposes of one input)."""
    if a is b:
        return True
    if a is None or b is None or depth == 0:
        return False
    ca, cb = const_array(a), const_array(b)
    if ca is not None or cb is not None:
        return ca is not None and cb is not None and ca.dtype == cb.dtype and np.array_equal(ca, cb)
    pa, pb = a.producer(), b.producer()
    if pa is None or pb is None or (pa.op_type, pa.domain) != (pb.op_type, pb.domain) or pa.domain not in ("", "ai.onnx"):
        return False
    if pa.op_type in ("RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike", "Multinomial",
                      "Bernoulli", "Dropout") or list(pa.outputs).index(a) != list(pb.outputs).index(b):
        return False
    simple = (int, float, str, list, tuple)
    if pa.attributes.keys() != pb.attributes.keys() or any(
            not isinstance(pa.attributes[k].value, simple) or pa.attributes[k].value != pb.attributes[k].value
            for k in pa.attributes):
        return False
    return len(pa.inputs) == len(pb.inputs) and all(same_tensor(x, y, depth - 1) for x, y in zip(pa.inputs, pb.inputs))
