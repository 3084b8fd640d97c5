"""Rule: one ONNX ``LSTM`` node (opsets 7, 14, 22) -> a one-layer ``lstm_ort.FusedLSTM``.

Pattern: an LSTM of the default domain. Condition: X present, W and R (and B, P where given)
constant, attributes known. Replacement: FusedLSTM with the weights pre-packed into the op
contract's layout; sequence_lens and initial states pass through unchanged.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from lstm_ort.builders import spec_from_attributes
from lstm_ort.ops.packing import LayerWeights, pack_layers
from lstm_ort.rewriter.fold_weights import why_not_constant
from lstm_ort.rewriter.fused_node import insert_fused_node
from lstm_ort.rewriter.graph_utils import const_array, is_zeros, replace_outputs
from lstm_ort.rewriter.rule import OK, CheckResult, Rule

_NP = {ir.DataType.FLOAT: np.float32, ir.DataType.FLOAT16: np.float16}


def _input(node: ir.Node, i: int) -> ir.Value | None:
    return node.inputs[i] if i < len(node.inputs) else None


def _attributes(node: ir.Node) -> dict:
    return {k: a.value for k, a in node.attributes.items()}


class SingleLstm(Rule):
    name = "single_lstm"

    def find(self, graph):
        return [node for node in graph if node.op_type == "LSTM" and node.domain in ("", "ai.onnx")]

    def nodes(self, node: ir.Node) -> list[ir.Node]:
        return [node]

    def describe(self, node: ir.Node) -> str:
        w = _input(node, 1)
        shape = w.shape if w is not None and w.shape is not None else None
        attrs = _attributes(node)
        layout = attrs.get("layout", 0)
        if shape is not None and len(shape) == 3:
            return f"D={shape[0]} H={attrs.get('hidden_size', '?')} I={shape[2]} layout={layout}"
        return f"H={attrs.get('hidden_size', '?')} layout={layout}"

    def check(self, node: ir.Node) -> CheckResult:
        if _input(node, 0) is None:
            return CheckResult.fail("input X is missing")
        x = node.inputs[0]
        if x.dtype is not None and x.dtype not in _NP:
            return CheckResult.fail(f"element type {x.dtype} is not float32/float16")
        for i, name in ((1, "W"), (2, "R"), (3, "B"), (7, "P")):
            value = _input(node, i)
            if value is None:
                if i in (1, 2):
                    return CheckResult.fail(f"input {name} is missing")
                continue
            if const_array(value) is None:
                return CheckResult.fail(f"weight {name} ({value.name}) is not a constant after folding: "
                                        f"{why_not_constant(value)}")
        try:
            spec = spec_from_attributes(_attributes(node), 1)
        except (ValueError, KeyError) as e:
            return CheckResult.fail(f"attributes: {e}")
        w = const_array(node.inputs[1])
        if w.ndim != 3 or w.shape[0] != spec.num_directions or w.shape[1] != 4 * spec.hidden_size:
            return CheckResult.fail(f"W has shape {list(w.shape)}, not [{spec.num_directions}, "
                                    f"{4 * spec.hidden_size}, I]")
        return OK

    def rewrite(self, graph, node: ir.Node) -> ir.Node:
        """Inserts the FusedLSTM beside `node`, moves its outputs over, and removes `node`."""
        layer = LayerWeights(W=const_array(node.inputs[1]), R=const_array(node.inputs[2]),
                             B=const_array(_input(node, 3)), P=const_array(_input(node, 7)))
        spec = spec_from_attributes(_attributes(node), layer.input_size)
        dtype = _NP.get(node.inputs[0].dtype) or (np.float16 if layer.W.dtype == np.float16 else np.float32)
        packed = pack_layers([layer], dtype)
        # Zero initial states (exporters build them with Expand/ConstantOfShape) are the same as none.
        h0, c0 = (None if is_zeros(_input(node, i)) else _input(node, i) for i in (5, 6))
        fused = insert_fused_node(graph, node, name=(node.name or "lstm") + "_fused",
                                  attributes=spec.fused_attributes(), x=node.inputs[0], w=packed.W, b=packed.B,
                                  seq_lens=_input(node, 4), initial_h=h0, initial_c=c0, p=packed.P)
        replace_outputs(node, fused)
        graph.remove(node, safe=True)
        return fused
