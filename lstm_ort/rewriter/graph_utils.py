"""Small onnx-ir helpers the rules share."""

from __future__ import annotations

import numpy as np
import onnx_ir as ir


def const_array(value: ir.Value | None) -> np.ndarray | None:
    """The value's constant contents (initializer or Constant node), or None."""
    if value is None:
        return None
    if value.const_value is not None:
        return value.const_value.numpy()
    producer = value.producer()
    if producer is not None and producer.op_type == "Constant" and producer.domain in ("", "ai.onnx"):
        attr = producer.attributes.get("value")
        if attr is not None:
            return attr.value.numpy()
    return None


def is_zeros(value: ir.Value | None) -> bool:
    """True for a tensor known to be all zeros: a constant, ConstantOfShape(0), or Expand of zeros
    (how exporters spell an absent initial state)."""
    if value is None:
        return False
    array = const_array(value)
    if array is not None:
        return not array.any()
    node = value.producer()
    if node is None or node.domain not in ("", "ai.onnx"):
        return False
    if node.op_type == "ConstantOfShape":
        attr = node.attributes.get("value")
        return attr is None or not attr.value.numpy().any()
    if node.op_type in ("Expand", "Identity", "Cast"):
        return is_zeros(node.inputs[0])
    return False


def add_constant(graph: ir.Graph | ir.Function, anchor: ir.Node, name: str, array: np.ndarray) -> ir.Value:
    """A constant for use by a node next to `anchor`: an initializer in a graph, a Constant node in a function.
    `name` is made unique in the graph."""
    name = unique_name(graph, name)
    tensor = ir.tensor(array, name=name)
    if isinstance(graph, ir.Graph):
        value = ir.Value(name=name, const_value=tensor, shape=ir.Shape(array.shape), type=ir.TensorType(tensor.dtype))
        graph.register_initializer(value)
        return value
    node = ir.Node("", "Constant", [], ir.convenience.convert_attributes({"value": tensor}), name=name + "_const")
    node.outputs[0].name = name
    graph.insert_before(anchor, node)
    return node.outputs[0]


def unique_name(graph: ir.Graph | ir.Function, base: str) -> str:
    """`base`, or `base_k`, unused by any value or node of the graph (a model with two nodes of
    one name does not load)."""
    taken = {v.name for n in graph for v in n.outputs} | {v.name for v in graph.inputs} | {n.name for n in graph}
    if isinstance(graph, ir.Graph):
        taken |= set(graph.initializers)
    name, k = base, 1
    while name in taken:
        name, k = f"{base}_{k}", k + 1
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
