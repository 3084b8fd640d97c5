"""Rule: one ONNX ``LSTM`` node (opsets 7, 14, 22) -> a one-layer ``lstm_ort.FusedLSTM``.

Pattern: an LSTM of the default domain. Condition: X present, W and R (and B, P where given)
constant, attributes known. Replacement: FusedLSTM with the weights pre-packed into the op
contract's layout; sequence_lens and initial states pass through unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx_ir as ir

from lstm_ort.builders import DOMAIN, OP_TYPE, spec_from_attributes
from lstm_ort.packing import LayerWeights, pack_layers
from lstm_ort.rewriter.graph_utils import add_constant, const_array, is_zeros, replace_outputs, unique_name

_NP = {ir.DataType.FLOAT: np.float32, ir.DataType.FLOAT16: np.float16}


@dataclass
class Refusal:
    reason: str


def matches(node: ir.Node) -> bool:
    return node.op_type == "LSTM" and node.domain in ("", "ai.onnx")


def _input(node: ir.Node, i: int) -> ir.Value | None:
    return node.inputs[i] if i < len(node.inputs) else None


def describe(node: ir.Node) -> str:
    w = _input(node, 1)
    shape = w.shape if w is not None and w.shape is not None else None
    attrs = {k: a.value for k, a in node.attributes.items()}
    layout = attrs.get("layout", 0)
    if shape is not None and len(shape) == 3:
        return f"D={shape[0]} H={attrs.get('hidden_size', '?')} I={shape[2]} layout={layout}"
    return f"H={attrs.get('hidden_size', '?')} layout={layout}"


def check(node: ir.Node) -> Refusal | None:
    if _input(node, 0) is None:
        return Refusal("input X is missing")
    x = node.inputs[0]
    if x.dtype is not None and x.dtype not in _NP:
        return Refusal(f"element type {x.dtype} is not float32/float16")
    for i, name in ((1, "W"), (2, "R"), (3, "B"), (7, "P")):
        value = _input(node, i)
        if value is None:
            if i in (1, 2):
                return Refusal(f"input {name} is missing")
            continue
        if const_array(value) is None:
            return Refusal(f"weight {name} ({value.name}) is not a constant after folding")
    try:
        spec = spec_from_attributes({k: a.value for k, a in node.attributes.items()}, 1)
    except (ValueError, KeyError) as e:
        return Refusal(f"attributes: {e}")
    w = const_array(node.inputs[1])
    if w.ndim != 3 or w.shape[0] != spec.num_directions or w.shape[1] != 4 * spec.hidden_size:
        return Refusal(f"W has shape {list(w.shape)}, not [{spec.num_directions}, {4 * spec.hidden_size}, I]")
    return None


def layer_of(node: ir.Node) -> LayerWeights:
    b, p = const_array(_input(node, 3)), const_array(_input(node, 7))
    return LayerWeights(W=const_array(node.inputs[1]), R=const_array(node.inputs[2]), B=b, P=p)


def rewrite(graph: ir.Graph | ir.Function, node: ir.Node) -> ir.Node:
    """Inserts the FusedLSTM beside `node`, moves its outputs over, and removes `node`."""
    layer = layer_of(node)
    spec = spec_from_attributes({k: a.value for k, a in node.attributes.items()}, layer.input_size)
    dtype = _NP.get(node.inputs[0].dtype) or (np.float16 if layer.W.dtype == np.float16 else np.float32)
    # Zero initial states (exporters build them with Expand/ConstantOfShape) are the same as none.
    h0, c0 = (None if is_zeros(_input(node, i)) else _input(node, i) for i in (5, 6))
    fused = make_fused_node(graph, node, spec, [layer], dtype, seq_lens=_input(node, 4), initial_h=h0, initial_c=c0,
                            x=node.inputs[0], name=(node.name or "lstm") + "_fused")
    replace_outputs(node, fused)
    graph.remove(node, safe=True)
    return fused


def make_fused_node(graph, anchor: ir.Node, spec, layers, dtype, *, x, seq_lens, initial_h, initial_c,
                    name: str) -> ir.Node:
    """A FusedLSTM node for `layers`, with packed weights as constants, inserted before `anchor`."""
    packed = pack_layers(layers, dtype)
    base = unique_name(graph, name)
    w = add_constant(graph, anchor, base + "_W", packed.W)
    b = add_constant(graph, anchor, base + "_B", packed.B) if packed.B is not None else None
    p = add_constant(graph, anchor, base + "_P", packed.P) if packed.P is not None else None
    attrs = ir.convenience.convert_attributes(spec.fused_attributes())
    fused = ir.Node(DOMAIN, OP_TYPE, [x, w, b, seq_lens, initial_h, initial_c, p], attrs, num_outputs=3, name=base)
    while fused.inputs and fused.inputs[-1] is None:
        fused.resize_inputs(len(fused.inputs) - 1)
    graph.insert_before(anchor, fused)
    return fused
