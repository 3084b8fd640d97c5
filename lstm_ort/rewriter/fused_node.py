"""Building a FusedLSTM node: written once for every rule."""

from __future__ import annotations

import numpy as np
import onnx
import onnx_ir as ir

from lstm_ort.ops.identity import DOMAIN, ELEMENT_TYPES, OP_TYPE, is_fused
from lstm_ort.ops.packing import LayerWeights, PackedWeights, input_size_from_weight_count, unpack_layers
from lstm_ort.ops.spec import LstmSpec
from lstm_ort.rewriter.graph_utils import RewriteContext, add_constant, const_tensor, iter_graphs, model_names, \
    rewrite_context, unique_name

Weights = np.ndarray | ir.TensorProtocol


def insert_fused_node(graph: ir.Graph | ir.Function, anchor: ir.Node, *, name: str, attributes: dict,
                      x: ir.Value, w: Weights, b: Weights | None = None, seq_lens: ir.Value | None = None,
                      initial_h: ir.Value | None = None, initial_c: ir.Value | None = None,
                      p: Weights | None = None, w_scale: Weights | None = None) -> ir.Node:
    """A FusedLSTM node inserted before `anchor`, its packed weights (docs/ops.md) as constants
    (arrays, or lazy tensors packed when the model is written); `attributes` maps names to Python
    values or ir.Attr; `w_scale` goes with int8 `w`. The node's and the constants' names are made
    unique in the model."""
    base = unique_name(graph, name)
    w_value = add_constant(graph, anchor, base + "_W", w)
    b_value = add_constant(graph, anchor, base + "_B", b) if b is not None else None
    p_value = add_constant(graph, anchor, base + "_P", p) if p is not None else None
    s_value = add_constant(graph, anchor, base + "_W_scale", w_scale) if w_scale is not None else None
    inputs = [x, w_value, b_value, seq_lens, initial_h, initial_c, p_value, None, s_value]
    while inputs[-1] is None:  # optional inputs are trailing-trimmed, as ONNX writes them
        inputs.pop()
    node = ir.Node(DOMAIN, OP_TYPE, inputs, ir.convenience.convert_attributes(attributes), num_outputs=3, name=base)
    for value, suffix in zip(node.outputs, ("_Y", "_Y_h", "_Y_c")):
        # Named here: onnx-ir would name it val_<k> when writing, blind to initializers and outer scopes.
        value.name = unique_name(graph, base + suffix)
    graph.insert_before(anchor, node)
    return node


def change_fused_nodes(model: onnx.ModelProto, change) -> onnx.ModelProto:
    """A copy of `model` with change(graph, node) applied to every FusedLSTM node (the passes after
    fusion: --low-rank, --precision int8); names it makes are unique in the model."""
    work = ir.serde.deserialize_model(model)
    with rewrite_context(RewriteContext(names=model_names(work))):
        for _, graph in iter_graphs(work):
            for node in list(graph):
                if is_fused(node):
                    change(graph, node)
    out = ir.serde.serialize_model(work)
    out.ir_version = model.ir_version
    return out


def whole_layers(node: ir.Node, dtypes=tuple(ELEMENT_TYPES)) -> tuple[list[LayerWeights], ir.TensorProtocol] | str:
    """The ONNX layers of a FusedLSTM node's W, with W, where W is a constant of one of `dtypes`
    (ONNX types) and not factored; else why not, for a pass after fusion to report."""
    spec = LstmSpec.from_node(node)
    if "rank_input" in spec.extra or "rank_recurrent" in spec.extra:
        return "its weights are factored"
    w = const_tensor(node.inputs[1])
    if w is None or w.dtype not in dtypes:
        return f"W is not a {'/'.join(ELEMENT_TYPES[t] for t in dtypes)} constant"
    H, L, D = spec.hidden_size, spec.num_layers, spec.num_directions
    W = w.numpy().reshape(-1)
    I = input_size_from_weight_count(W.size, L, D, H)
    if I is None:
        return "W's size fits no input size"
    return unpack_layers(PackedWeights(W, None, None), L, D, I, H), w
