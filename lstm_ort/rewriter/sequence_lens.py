"""`optimize(..., sequence_lens_input=True)`: a `sequence_lens` model input ([batch], int32) wired
into every FusedLSTM whose X comes from the model's sequence input, so a padded batch gives every
sequence the results it gets alone (docs/serving.md).

Which input carries the sequences, and whether the rest of the model acts per time step, is
lstm_ort.graph.ragged's analysis (shared with the batcher). The report gets a pseudo-rule
``sequence_lens``: one hit per node wired, and a refusal saying why where the model is not
ragged-exact.
"""

from __future__ import annotations

import onnx
from onnx import TensorProto, helper

from lstm_ort.graph.ragged import SEQUENCE_LENS, NoSequenceInput, RaggedLayout, analyze
from lstm_ort.ops.identity import is_fused
from lstm_ort.rewriter.report import Report

RULE_NAME = "sequence_lens"


def add_sequence_lens_input(model: onnx.ModelProto, report: Report | None = None,
                            input_name: str | None = None) -> RaggedLayout | None:
    """Adds the input in place and wires it; returns the analysis of the result (None, with a
    refusal in the report, where no input reaches a FusedLSTM)."""
    report = report if report is not None else Report()
    try:
        layout = analyze(model, input_name)
    except NoSequenceInput as e:
        report.count(RULE_NAME, refused=str(e))
        return None
    graph = model.graph
    name = _lens_input(graph, layout)
    wired = 0
    for index in layout.recurrent_nodes:
        node = graph.node[index]
        if not is_fused(node):
            continue  # a stock LSTM the rules left: its own sequence_lens input is the model's business
        inputs = list(node.input) + [""] * max(0, 4 - len(node.input))
        if inputs[3]:
            continue  # already reads one; analyze() reports it if it is not a model input
        inputs[3] = name
        del node.input[:]
        node.input.extend(inputs)
        wired += 1
    result = analyze(model, layout.input)
    for _ in range(wired):
        report.count(RULE_NAME)
    if not result.exact:
        report.count(RULE_NAME, refused="not ragged-exact: " + "; ".join(result.reasons))
    return result


def _lens_input(graph: onnx.GraphProto, layout: RaggedLayout) -> str:
    """The int32 [batch] input to wire: the one the model already has, else a new one."""
    if layout.sequence_lens:
        return layout.sequence_lens
    names = {i.name for i in graph.input} | {o for n in graph.node for o in n.output} | \
            {i.name for i in graph.initializer}
    name, k = SEQUENCE_LENS, 1
    while name in names:
        name, k = f"{SEQUENCE_LENS}_{k}", k + 1
    x = next(i for i in graph.input if i.name == layout.input)
    dims = x.type.tensor_type.shape.dim
    batch = dims[layout.batch_axis] if len(dims) > layout.batch_axis else None
    dim = (batch.dim_param or batch.dim_value or "batch") if batch is not None else "batch"
    graph.input.append(helper.make_tensor_value_info(name, TensorProto.INT32, [dim]))
    return name
