"""`optimize(..., batchify=True)` / `lstm-ort optimize --batchify`: a model exported for batch 1
gets a symbolic batch dimension, so a StreamBatcher (or any caller) can run many streams in one
call.

Which axis of each input and output is the batch, and whether every op keeps the entries of a
batch apart, is lstm_ort.graph.batch_axes (shared with the batcher), run in its
``fixed_batch`` mode: dims and Reshape targets that hold 1 where the batch goes are taken for the
batch. The inputs' and outputs' batch dims become ``batch``, those Reshape targets get -1 (or 0,
copying the input's dim) in the batch's place, and the intermediate shapes the export recorded are
dropped. Where an op would mix the entries of a batch (or builds a tensor of batch 1 the analysis
cannot follow), nothing is changed and BatchifyRefused names the op.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import numpy_helper

from lstm_ort.graph.batch_axes import BatchLayout, batch_layout
from lstm_ort.graph.trace import TraceFailed
from lstm_ort.rewriter.report import Report

RULE_NAME = "batchify"
BATCH = "batch"


class BatchifyRefused(ValueError):
    """The model's batch dimension cannot be made symbolic; the message names the op that stops it."""


def batchify(model: onnx.ModelProto, report: Report | None = None,
             shapes: dict[str, list[int]] | None = None) -> BatchLayout:
    """Makes the batch dimension of ``model`` symbolic, in place (see the module docstring);
    returns the analysis of the result. ``shapes``: feed shapes for dims the model leaves unknown
    (default 1). Raises BatchifyRefused, leaving ``model`` as it was."""
    report = report if report is not None else Report()
    feeds = _zero_feeds(model, shapes or {})
    work = onnx.ModelProto()
    work.CopyFrom(model)
    try:
        layout = batch_layout(work, feeds, fixed_batch=True)
    except TraceFailed as e:
        unknown = [n for n in feeds if n not in (shapes or {}) and _has_unknown_dims(model, n)]
        hint = f" (its inputs {unknown} have unknown dims, taken as 1: give their shapes)" if unknown else ""
        raise _refuse(report, f"the analysis cannot run the model: {e}{hint}") from None
    if not layout.batched:
        raise _refuse(report, "; ".join(layout.reasons))
    if not any(a is not None for a in layout.inputs.values()):
        raise _refuse(report, "no input carries a batch axis")
    for node, axis, value in layout.fixes:
        _free_reshape_target(work, node, axis, value)
    _symbolic_dims(work.graph.input, layout.inputs, {})
    _symbolic_dims(work.graph.output, layout.outputs, layout.rows)
    for graph in _graphs(work.graph):
        del graph.value_info[:]  # the export's shapes hold the batch of 1
    result = batch_layout(work, feeds)
    if not result.batched:
        raise _refuse(report, "after the rewrite: " + "; ".join(result.reasons))
    model.CopyFrom(work)
    for _ in range(1 + len(layout.fixes)):
        report.count(RULE_NAME)
    return result


def _refuse(report: Report, why: str) -> BatchifyRefused:
    report.count(RULE_NAME, refused=why)
    return BatchifyRefused(why)


def _zero_feeds(model: onnx.ModelProto, shapes: dict[str, list[int]]) -> dict[str, np.ndarray]:
    """Zeros for every input: the analysis reads shapes and what the graph computes from them."""
    inits = {i.name for i in model.graph.initializer}
    feeds = {}
    for vi in model.graph.input:
        if vi.name in inits:
            continue
        tt = vi.type.tensor_type
        dims = shapes.get(vi.name) or [d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else 1
                                       for d in tt.shape.dim]
        feeds[vi.name] = np.zeros(dims, onnx.helper.tensor_dtype_to_np_dtype(tt.elem_type))
    return feeds


def _has_unknown_dims(model: onnx.ModelProto, name: str) -> bool:
    vi = next(i for i in model.graph.input if i.name == name)
    return any(not (d.HasField("dim_value") and d.dim_value > 0) for d in vi.type.tensor_type.shape.dim)


def _free_reshape_target(model: onnx.ModelProto, node: onnx.NodeProto, axis: int, value: int) -> None:
    """The Reshape's constant target with ``value`` in the batch's place: -1 (the rest of the
    elements) or 0 (the input's dim there)."""
    target = _constant(model, node.input[1])
    if target is None:
        raise BatchifyRefused(f"Reshape node {node.name or node.output[0]!r}: its target is not a constant")
    target = target.astype(np.int64).copy()
    target[axis] = value
    if value == 0:  # a copy of the input's dim; the target had no 0, so allowzero changed nothing
        for a in node.attribute:
            if a.name == "allowzero":
                a.i = 0
    name = f"{node.name or node.output[0]}__batch_shape"
    model.graph.initializer.append(numpy_helper.from_array(target, name))
    node.input[1] = name


def _constant(model: onnx.ModelProto, name: str) -> np.ndarray | None:
    for graph in _graphs(model.graph):
        for t in graph.initializer:
            if t.name == name:
                return numpy_helper.to_array(t)
        for n in graph.node:
            if n.op_type == "Constant" and n.output[0] == name:
                return next((numpy_helper.to_array(a.t) for a in n.attribute if a.name == "value"), None)
    return None


def _symbolic_dims(infos, axes: dict[str, int | None], rows: dict[str, int]) -> None:
    for vi in infos:
        axis = axes.get(vi.name)
        dims = vi.type.tensor_type.shape.dim
        if axis is None or axis >= len(dims):
            continue
        dims[axis].Clear()
        if rows.get(vi.name, 1) == 1:
            dims[axis].dim_param = BATCH


def _graphs(graph: onnx.GraphProto):
    yield graph
    for node in graph.node:
        for a in node.attribute:
            for g in ([a.g] if a.type == onnx.AttributeProto.GRAPH else a.graphs):
                yield from _graphs(g)
