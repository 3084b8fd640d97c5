"""Constant folding that reaches every LSTM's weights, whatever their size.

Exporters compute weights at run time: torch's dynamo exporter slices and concatenates the flat
parameters, Paddle builds W/R/B from Constant nodes, silero-style models Unsqueeze outer-scope
initializers inside If branches. onnxscript's folder leaves tensors above its size limits alone
(8,192 input / 262,144 output elements), which every production-size weight exceeds. Here the
limits are lifted only for the nodes that compute an LSTM's weights (its W, R, B, P inputs'
producer cones), so the rest of the model's constants stay as they were.
"""

from __future__ import annotations

import onnx_ir as ir
import onnxscript.optimizer

from lstm_ort.rewriter.graph_utils import const_tensor, is_overridable, iter_graphs

# LSTM inputs that must be constants for a rewrite: W, R, B, P.
WEIGHT_INPUTS = (1, 2, 3, 7)
_UNLIMITED = 1 << 62


def is_lstm(node: ir.Node) -> bool:
    return node.op_type == "LSTM" and node.domain in ("", "ai.onnx")


def weight_cones(model: ir.Model) -> set[ir.Node]:
    """Every node whose output flows into some LSTM's weight inputs."""
    cone: set[ir.Node] = set()
    pending = [node.inputs[i] for _, graph in iter_graphs(model) for node in graph if is_lstm(node)
               for i in WEIGHT_INPUTS if i < len(node.inputs) and node.inputs[i] is not None]
    while pending:
        producer = pending.pop().producer()
        if producer is not None and producer not in cone:
            cone.add(producer)
            pending.extend(v for v in producer.inputs if v is not None)
    return cone


def fold_constants(model: ir.Model) -> None:
    """onnxscript's constant folding with its default limits, then once more with no size limit
    inside the LSTM weight cones and nothing folded outside them."""
    onnxscript.optimizer.fold_constants(model)
    cone = weight_cones(model)
    if cone:
        onnxscript.optimizer.fold_constants(model, input_size_limit=_UNLIMITED, output_size_limit=_UNLIMITED,
                                            should_fold=lambda node: node in cone)


def why_not_constant(value: ir.Value) -> str:
    """Where a value that should be constant stops being one: the graph input or node it depends on."""
    seen, pending = set(), [value]
    while pending:
        v = pending.pop()
        if v.const_value is not None:
            continue
        producer = v.producer()
        if producer is None:
            return f"depends on graph input {v.name!r}" if v.is_graph_input() else f"depends on {v.name!r}, " \
                "which no node in this graph computes (an outer-scope value)"
        if producer in seen:
            continue
        seen.add(producer)
        if producer.op_type == "Constant":
            continue
        inputs = [x for x in producer.inputs if x is not None]
        if all(x.const_value is not None for x in inputs):
            return f"computed by {producer.op_type} node {producer.name!r}, which constant folding cannot evaluate"
        pending.extend(inputs)
    return "not a constant"


def why_not_packable(value: ir.Value, name: str) -> str:
    """Why a weight input cannot be packed into a FusedLSTM node ("" when it can): a caller may feed
    it, or it is not a constant after folding."""
    if is_overridable(value):
        return (f"weight {name} ({value.name}) is an initializer that is also a graph input: a caller may feed "
                "another value, which packed weights would ignore (freeze such weights with --freeze-inputs)")
    if const_tensor(value) is None:
        return f"weight {name} ({value.name}) is not a constant after folding: {why_not_constant(value)}"
    return ""
