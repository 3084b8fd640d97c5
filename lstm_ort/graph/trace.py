"""One concrete run of a model with every value kept, the values inside the taken branch of each
If included: what the batch-axis analysis (batch_axes.py) reads for the values a graph computes
from shapes and constants (an If's condition, a Pad's pads, a Reshape's target) and for the shape
of every value.

onnx.reference runs the nodes one at a time, FusedLSTM through lstm_ort.ops.reference. It is
slow (a readable float64 LSTM), and run once per kind of step (the shapes of one stream's feeds).
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from lstm_ort.ops.reference import FusedLSTM


class TraceFailed(Exception):
    """onnx.reference could not run a node of the model with these feeds."""


def trace(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Every value of the model (main graph and taken If branches) computed from ``feeds``."""
    values: dict[str, np.ndarray] = {name: np.asarray(v) for name, v in feeds.items()}
    opsets = [o for o in model.opset_import]
    _run_graph(model.graph, values, opsets, model.ir_version)
    return values


def taken_branch(node: onnx.NodeProto, condition) -> onnx.GraphProto:
    """The branch an If node runs for this condition value."""
    which = "then_branch" if bool(np.asarray(condition).ravel()[0]) else "else_branch"
    return next(a.g for a in node.attribute if a.name == which)


def _run_graph(graph: onnx.GraphProto, values: dict, opsets, ir_version: int) -> None:
    for init in graph.initializer:
        values[init.name] = numpy_helper.to_array(init)
    for node in graph.node:
        if node.op_type == "If" and node.domain in ("", "ai.onnx"):
            branch = taken_branch(node, values[node.input[0]])
            _run_graph(branch, values, opsets, ir_version)
            outs = [values[o.name] for o in branch.output]
        else:
            outs = run_node(node, values, opsets, ir_version)
        for name, value in zip(node.output, outs):
            if name:
                values[name] = value


def run_node(node: onnx.NodeProto, values: dict, opsets, ir_version: int) -> list:
    """One node's outputs, its inputs (and the names its subgraphs read) taken from ``values``."""
    names = list(dict.fromkeys([i for i in node.input if i] + sorted(outer_names(node))))
    missing = [n for n in names if n not in values]
    if missing:
        raise TraceFailed(f"{_label(node)}: no value for {missing[0]!r}")
    inputs = []
    for name in names:
        value = values[name]
        if not isinstance(value, np.ndarray):
            raise TraceFailed(f"{_label(node)}: input {name!r} is not a tensor")
        inputs.append(helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(value.dtype), value.shape))
    outputs = [helper.make_empty_tensor_value_info(o) for o in node.output if o]
    graph = helper.make_graph([node], "trace", inputs, outputs)
    model = helper.make_model(graph, opset_imports=opsets, ir_version=ir_version)
    try:
        results = ReferenceEvaluator(model, new_ops=[FusedLSTM]).run(None, {n: values[n] for n in names})
    except Exception as e:  # noqa: BLE001 - any failure of the reference: the caller decides
        raise TraceFailed(f"{_label(node)}: {type(e).__name__}: {e}") from None
    it = iter(results)
    return [np.asarray(next(it)) if o else None for o in node.output]


def outer_names(node: onnx.NodeProto) -> set[str]:
    """Names a node's subgraphs (Loop, Scan bodies) read from the enclosing scope."""
    used: set[str] = set()
    for a in node.attribute:
        for g in ([a.g] if a.type == onnx.AttributeProto.GRAPH else list(a.graphs)):
            defined = {i.name for i in g.input} | {i.name for i in g.initializer}
            for n in g.node:
                defined.update(n.output)
            for n in g.node:
                used.update(i for i in n.input if i and i not in defined)
                used.update(o for o in outer_names(n) if o not in defined)
            used.update(o.name for o in g.output if o.name not in defined)
    return used


def _label(node: onnx.NodeProto) -> str:
    return f"{node.op_type} node {node.name or node.output[0]!r}"
