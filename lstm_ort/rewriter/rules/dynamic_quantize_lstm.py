"""Rule: onnxruntime's ``com.microsoft.DynamicQuantizeLSTM`` (what ``quantize_dynamic`` makes of
every LSTM) -> a one-layer ``lstm_ort.FusedLSTM`` with int8 weights (docs/ops.md, "int8 weights").

Pattern: a DynamicQuantizeLSTM node. Condition: float32 X; W [D, I, 4H] and R [D, H, 4H] int8 or
uint8, their scales and zero points ([D], or [D, 4H] per output channel) and B, P constant and
not overridable graph inputs; zero points stock accepts (int8 per channel: zero; uint8 per
channel: one value), and weights minus their zero point within int8. Replacement: FusedLSTM with
W and R transposed to ONNX order, minus the zero point (stock subtracts each direction's first),
packed as int8, their scales as W_scale; sequence_lens and initial states pass through (zero
states of the shape stock demands are dropped). StackLstm then joins the layers of a stack.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from lstm_ort.ops.spec import LstmSpec, attributes
from lstm_ort.rewriter.fold_weights import why_not_packable
from lstm_ort.rewriter.fused_node import insert_fused_node
from lstm_ort.rewriter.graph_utils import const_array, const_tensor, is_zeros, replace_outputs
from lstm_ort.rewriter.lazy_weights import LayerSource, LazyPacked
from lstm_ort.rewriter.rule import OK, CheckResult, Rule
from lstm_ort.rewriter.rules.single_lstm import state_verdict

DOMAIN = "com.microsoft"
OP_TYPE = "DynamicQuantizeLSTM"
_QUANTIZED = (ir.DataType.INT8, ir.DataType.UINT8)
# Constant inputs: index -> name, as the contrib op's schema names them.
_CONSTANTS = {1: "W", 2: "R", 3: "B", 7: "P", 8: "W_scale", 9: "W_zero_point", 10: "R_scale", 11: "R_zero_point"}
_REQUIRED = (1, 2, 8, 9, 10, 11)
_SCALE_AND_ZERO_POINT = {1: (8, 9), 2: (10, 11)}  # W's, R's


def _input(node: ir.Node, i: int) -> ir.Value | None:
    return node.inputs[i] if i < len(node.inputs) else None


class _OnnxOrder:
    """A DynamicQuantizeLSTM weight ([D, n, 4H], int8 or uint8) as FusedLSTM packs it: ONNX order
    [D, 4H, n], int8, minus each direction's zero point; read only when the model is written."""

    def __init__(self, tensor: ir.TensorProtocol, zero_points: np.ndarray) -> None:
        self.tensor, self.zero_points = tensor, zero_points
        D, n, G = (int(d) for d in tensor.shape)
        self.shape = (D, G, n)

    def numpy(self) -> np.ndarray:
        levels = self.tensor.numpy().astype(np.int16) - self.zero_points.astype(np.int16)[:, None, None]
        return levels.astype(np.int8).transpose(0, 2, 1)


def _zero_points(node: ir.Node, index: int) -> np.ndarray:
    """Each direction's zero point of weight `index` (1: W, 2: R), as stock reads it: the first of
    that direction's."""
    zp = const_array(_input(node, _SCALE_AND_ZERO_POINT[index][1]))
    D = int(const_tensor(node.inputs[index]).shape[0])
    return zp.reshape(D, -1)[:, 0].astype(np.int16)


def _scales(node: ir.Node, index: int, H: int) -> np.ndarray:
    """Weight `index`'s scales per direction and output row [D, 4H] (a per-tensor scale repeated)."""
    scale = const_array(_input(node, _SCALE_AND_ZERO_POINT[index][0])).astype(np.float32)
    D = int(const_tensor(node.inputs[index]).shape[0])
    return np.broadcast_to(scale.reshape(D, -1), (D, 4 * H)).copy()


class DynamicQuantizeLstm(Rule):
    name = "dynamic_quantize_lstm"

    def find(self, graph):
        return [node for node in graph if node.op_type == OP_TYPE and node.domain == DOMAIN]

    def nodes(self, node: ir.Node) -> list[ir.Node]:
        return [node]

    def describe(self, node: ir.Node) -> str:
        w = const_tensor(_input(node, 1))
        H = attributes(node).get("hidden_size", "?")
        if w is not None and len(w.shape) == 3:
            return f"D={w.shape[0]} H={H} I={w.shape[1]} int8"
        return f"H={H} int8"

    def check(self, node: ir.Node) -> CheckResult:
        x = _input(node, 0)
        if x is None:
            return CheckResult.fail("input X is missing")
        if x.dtype is not None and x.dtype != ir.DataType.FLOAT:
            return CheckResult.fail(f"X is {x.dtype}, not float32")
        for i, name in _CONSTANTS.items():
            value = _input(node, i)
            if value is None:
                if i in _REQUIRED:
                    return CheckResult.fail(f"input {name} is missing")
                continue
            refusal = why_not_packable(value, name)
            if refusal:
                return CheckResult.fail(refusal)
        try:
            spec = LstmSpec.from_node(node, 1)
        except (ValueError, KeyError, TypeError) as e:
            return CheckResult.fail(f"attributes: {e}")
        D, H = spec.num_directions, spec.hidden_size
        W, R = const_tensor(node.inputs[1]), const_tensor(node.inputs[2])
        w_shape, r_shape = [int(d) for d in W.shape], [int(d) for d in R.shape]
        if len(w_shape) != 3 or w_shape[0] != D or w_shape[2] != 4 * H or w_shape[1] < 1:
            return CheckResult.fail(f"W has shape {w_shape}, not [{D}, I, {4 * H}]: stock rejects this node too")
        if r_shape != [D, H, 4 * H]:
            return CheckResult.fail(f"R has shape {r_shape}, not {[D, H, 4 * H]}: stock rejects this node too")
        x_dims = x.shape
        if x_dims is not None and (len(x_dims) != 3 or (isinstance(x_dims[2], int) and x_dims[2] != w_shape[1])):
            return CheckResult.fail(f"X has shape {list(x_dims)}, which does not fit W's input size {w_shape[1]}: "
                                    "stock rejects this node too (at run time)")
        for i, name, want in ((3, "B", [D, 8 * H]), (7, "P", [D, 3 * H])):
            t = const_tensor(_input(node, i))
            if t is not None and ([int(d) for d in t.shape] != want or t.dtype != ir.DataType.FLOAT):
                return CheckResult.fail(f"{name} is {t.dtype} {[int(d) for d in t.shape]}, not float32 {want}")
        for index, name in ((1, "W"), (2, "R")):
            refusal = self._quantization_refusal(node, index, name, D, H)
            if refusal:
                return CheckResult.fail(refusal)
        for i in (5, 6):
            if is_zeros(_input(node, i)):
                verdict = state_verdict(node, i, D, H, 0)
                if verdict not in ("drop", "keep"):
                    return CheckResult.fail(verdict)
        return OK

    @staticmethod
    def _quantization_refusal(node: ir.Node, index: int, name: str, D: int, H: int) -> str:
        weights = const_tensor(node.inputs[index])
        s_index, z_index = _SCALE_AND_ZERO_POINT[index]
        scale, zp = const_tensor(node.inputs[s_index]), const_tensor(node.inputs[z_index])
        if weights.dtype not in _QUANTIZED:
            return f"{name} is {weights.dtype}, not int8 or uint8"
        if scale.dtype != ir.DataType.FLOAT:
            return f"{_CONSTANTS[s_index]} is {scale.dtype}, not float32"
        if zp.dtype != weights.dtype:
            return f"{_CONSTANTS[z_index]} is {zp.dtype}, {name} is {weights.dtype}: stock rejects this node too"
        for value, what in ((scale, _CONSTANTS[s_index]), (zp, _CONSTANTS[z_index])):
            shape = [int(d) for d in value.shape]
            if shape not in ([D], [D, 4 * H]):
                return f"{what} has shape {shape}, not [{D}] or [{D}, {4 * H}]: stock rejects this node too"
        zero_points = zp.numpy().astype(np.int16)
        if len(zp.shape) == 2 and weights.dtype == ir.DataType.INT8 and zero_points.any():
            return f"{_CONSTANTS[z_index]} is per channel and not zero: stock rejects this node too"
        if len(zp.shape) == 2 and weights.dtype == ir.DataType.UINT8 and (zero_points != zero_points.flat[0]).any():
            return f"{_CONSTANTS[z_index]} is per channel and not one value: stock rejects this node too"
        if not np.isfinite(scale.numpy()).all():
            return f"{_CONSTANTS[s_index]} is not finite"
        first = zero_points.reshape(D, -1)[:, 0]
        if weights.dtype == ir.DataType.UINT8 or first.any():
            levels = weights.numpy().astype(np.int16).reshape(D, -1) - first[:, None]
            if levels.min(initial=0) < -128 or levels.max(initial=0) > 127:
                return (f"{name} minus its zero point spans [{levels.min()}, {levels.max()}], beyond int8: FusedLSTM's "
                        "int8 weights cannot hold it")
        return ""

    def rewrite(self, graph, node: ir.Node) -> ir.Node:
        """Inserts the FusedLSTM beside `node`, moves its outputs over, and removes `node`."""
        W, R = const_tensor(node.inputs[1]), const_tensor(node.inputs[2])
        B, P = const_tensor(_input(node, 3)), const_tensor(_input(node, 7))
        spec = LstmSpec.from_node(node, int(W.shape[1]))
        H = spec.hidden_size
        layers = [LayerSource(_OnnxOrder(W, _zero_points(node, 1)), _OnnxOrder(R, _zero_points(node, 2)), B, P,
                              W_scale=_scales(node, 1, H), R_scale=_scales(node, 2, H))]
        h0, c0 = (None if is_zeros(_input(node, i)) and state_verdict(node, i, spec.num_directions, H, 0) == "drop"
                  else _input(node, i) for i in (5, 6))
        fused = insert_fused_node(graph, node, name=(node.name or "lstm") + "_fused",
                                  attributes=spec.fused_attributes(), x=node.inputs[0],
                                  w=LazyPacked("W", layers, np.int8),
                                  b=LazyPacked("B", layers, np.float32) if B is not None else None,
                                  seq_lens=_input(node, 4), initial_h=h0, initial_c=c0,
                                  p=LazyPacked("P", layers, np.float32) if P is not None else None,
                                  w_scale=LazyPacked("S", layers, np.float32))
        replace_outputs(node, fused)
        graph.remove(node, safe=True)
        return fused
