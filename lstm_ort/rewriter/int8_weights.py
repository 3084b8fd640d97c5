"""The int8 pass (`optimize --precision int8`): after fusion, each FusedLSTM node's float32 weights
W ([4H, I_l] per layer and direction) and R ([4H, H]) become int8 weights (docs/ops.md, "int8
weights"): one scale per output row (per output channel) mapping the row's largest |w| to 127,
symmetric, the levels rounded to nearest. The kernel applies a scale per column at no cost, and
one per row is never less exact than one per direction, so every row gets its own. The node then
runs onnxruntime's DynamicQuantizeLSTM arithmetic (activations quantized per call and per step).

Opt-in, and never silent: every node is listed with what it became or why not, and the error
this costs is measured against the float optimized model (lstm_ort.low_rank_error, as for
--low-rank); a bound on the error refuses the model rather than return it.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnx_ir as ir

from lstm_ort.ops.identity import INT8
from lstm_ort.ops.packing import Int8Layer, pack_int8_layers
from lstm_ort.rewriter.fused_node import change_fused_nodes, whole_layers
from lstm_ort.rewriter.graph_utils import add_constant, drop_if_unused
from lstm_ort.rewriter.low_rank import measure_against
from lstm_ort.rewriter.report import Int8Node, Int8Report, Report

_W_SCALE = 8  # the input index of W_scale


def quantize_rows(matrix: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(int8 levels, float32 scale per row) of [rows, n] float weights: symmetric, the largest |w|
    of each row at 127, rounded half to even; a row of zeros takes scale 1."""
    top = np.abs(matrix).max(axis=1)
    scale = np.where(top > 0, top / 127, 1).astype(np.float32)
    levels = np.clip(np.round(matrix / scale[:, None]), -127, 127).astype(np.int8)
    return levels, scale


def relative_error(matrix: np.ndarray, levels: np.ndarray, scale: np.ndarray) -> float:
    """||w - levels x scale||_2 / ||w||_2, in float64 (float32 squares of weights near its largest
    values would overflow)."""
    matrix = np.asarray(matrix, np.float64)
    norm = float(np.linalg.norm(matrix))
    diff = float(np.linalg.norm(matrix - levels.astype(np.float64) * scale.astype(np.float64)[:, None]))
    return diff / norm if norm > 0 else 0.0


def quantize(model: onnx.ModelProto, report: Report | None = None) -> onnx.ModelProto:
    """A copy of `model` with every FusedLSTM node whose weights are float32 constants given int8
    weights; `report.int8` lists every node."""
    summary = Int8Report()
    out = change_fused_nodes(model, lambda graph, node: _quantize_node(graph, node, summary))
    if report is not None:
        report.int8 = summary
        quantized = {n.node for n in summary.quantized}
        for finding in report.findings:
            if finding.rewritten and finding.fused_node in quantized:
                finding.precision = INT8
    return out


def quantize_and_measure(model: onnx.ModelProto, report: Report, *, calibration=None,
                         shapes: dict[str, list[int]] | None = None, max_error: float | None = None) -> onnx.ModelProto:
    """quantize(), then the error against `model` (the float optimized model) on the calibration
    samples or seeded random unit-scale inputs, as --low-rank measures it; raises
    ErrorBoundExceeded when the max-abs error of the outputs exceeds `max_error`."""
    quantized = quantize(model, report)
    if not report.int8.quantized:
        report.int8.inputs = "nothing quantized: the model is the float one"
        return quantized
    measure_against(model, quantized, report.int8, "int8", calibration=calibration, shapes=shapes,
                    max_error=max_error, changed=_has_int8_weights)
    return quantized


def _has_int8_weights(node: onnx.NodeProto, constants: dict) -> bool:
    w = constants.get(node.input[1])
    return w is not None and w.data_type == onnx.TensorProto.INT8


def _quantize_node(graph, node: ir.Node, summary: Int8Report) -> None:
    name = node.name or "<unnamed>"
    found = whole_layers(node, (ir.DataType.FLOAT,))  # int8 weights take float32 X
    if isinstance(found, str):
        summary.skipped.append(f"{name}: {found}")
        return
    unpacked, w = found
    bad = next((f"{part} of layer {k} holds {m[~np.isfinite(m)][0]}" for k, layer in enumerate(unpacked)
                for part, m in (("W", layer.W), ("R", layer.R)) if not np.isfinite(m).all()), None)
    if bad:  # no scale maps it to a level: quantizing would turn the whole row into NaN
        summary.skipped.append(f"{name}: {bad}, which int8 levels cannot hold")
        return
    L, D = len(unpacked), unpacked[0].num_directions
    layers, errors = [], []  # B and P stay as they are: int8 nodes read them as float nodes do
    for layer in unpacked:
        quantized = [[quantize_rows(m[d]) for d in range(D)] for m in (layer.W, layer.R)]
        for m, q in zip((layer.W, layer.R), quantized):
            errors += [relative_error(m[d], *q[d]) for d in range(D)]
        (wq, rq) = ([np.stack([levels for levels, _ in q]), np.stack([scale for _, scale in q])] for q in quantized)
        layers.append(Int8Layer(W=wq[0], W_scale=wq[1], R=rq[0], R_scale=rq[1]))
    packed = pack_int8_layers(layers)
    base = name if node.name else "fused_lstm"
    old = node.inputs[1]
    node.resize_inputs(max(len(node.inputs), _W_SCALE + 1))
    node.replace_input_with(1, add_constant(graph, node, base + "_W_int8", packed.W))
    node.replace_input_with(_W_SCALE, add_constant(graph, node, base + "_W_scale", packed.scales))
    node.attributes.pop("precision", None)  # int8 weights fix the arithmetic
    drop_if_unused(graph, old)
    summary.quantized.append(Int8Node(name, L * D, w.nbytes, packed.W.nbytes + packed.scales.nbytes, max(errors)))
