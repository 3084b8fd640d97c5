"""The ONNX backend node cases for LSTM, from onnx's own generators, run through FusedLSTM."""

import warnings

import numpy as np
import pytest
from onnx import helper
from onnx.backend.test.case.node import collect_testcases

from lstm_ort.builders import LstmSpec, fused_model
from lstm_ort.ops.packing import LayerWeights
from lstm_ort.testing import run

with warnings.catch_warnings():  # the generators of unrelated ops warn about their own data
    warnings.simplefilter("ignore")
    CASES = [c for c in collect_testcases(None) if c.name.startswith("test_lstm")]


def test_all_six_cases_collected():
    assert sorted(c.name for c in CASES) == sorted([
        "test_lstm_defaults", "test_lstm_with_initial_bias", "test_lstm_with_peepholes",
        "test_lstm_batchwise", "test_lstm_reverse", "test_lstm_bidirectional"])


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_backend_case(case):
    (node,) = case.model.graph.node
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    (inputs, expected), = case.data_sets
    named = {name: value for name, value in zip(node.input, inputs) if name}
    x = named["X"]
    spec = LstmSpec.from_attributes(attrs, input_size=x.shape[-1])
    layer = LayerWeights(W=named["W"], R=named["R"], B=named.get("B"), P=named.get("P"))
    outputs = [name for name in node.output if name]
    model = fused_model(spec, [layer], x.dtype, seq_lens="sequence_lens" in named,
                        initial_states="initial_h" in named, outputs=outputs)
    feeds = {k: v for k, v in named.items() if k in ("X", "sequence_lens", "initial_h", "initial_c")}
    got = run(model, feeds)
    for name, g, e in zip(outputs, got, expected):
        np.testing.assert_allclose(g, e, rtol=1e-5, atol=1e-6, err_msg=name)
