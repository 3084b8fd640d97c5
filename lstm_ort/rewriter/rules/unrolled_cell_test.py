"""unrolled_cell: LSTM cells written out in plain ops become one-step FusedLSTMs with the same
outputs, in every gate order and form exporters write; what cannot be told apart is refused."""

import itertools

import numpy as np
import onnxruntime as ort
import pytest

from lstm_ort.builders import unrolled_cell_model
from lstm_ort.rewriter import Report, optimize
from lstm_ort.runtime.session import InferenceSession
from lstm_ort.verify import max_abs

CPU = ["CPUExecutionProvider"]


def chained(model, optimized, feeds, carry, calls=20):
    """Max-abs over `calls` chained calls, each call's states fed to the next on both sides."""
    stock = ort.InferenceSession(model.SerializeToString(), providers=CPU)
    ours = InferenceSession(optimized.SerializeToString(), providers=CPU)
    a, b, worst = dict(feeds), dict(feeds), 0.0
    names = [o.name for o in stock.get_outputs()]
    for _ in range(calls):
        ra, rb = dict(zip(names, stock.run(None, a))), dict(zip(names, ours.run(None, b)))
        worst = max(worst, max_abs(list(ra.values()), list(rb.values())))
        for out, inp in carry.items():
            a[inp], b[inp] = ra[out], rb[out]
    return worst


@pytest.mark.parametrize("gate_order,form", list(itertools.product(["ifco", "iofc", "ocfi"],
                                                                   ["matmul", "gemm", "concat", "slices"])))
def test_cell_rewritten_with_parity(gate_order, form):
    rng = np.random.default_rng(sum(map(ord, gate_order + form)))
    I, H, B = 6, 8, 3
    model = unrolled_cell_model(I, H, rng, gate_order=gate_order, form=form)
    report = Report()
    out = optimize(model, report=report)
    assert report.all_rewritten and report.rules["unrolled_cell"].hits == 1, report.table()
    assert [n.op_type for n in out.graph.node if n.domain == "lstm_ort"] == ["FusedLSTM"]
    assert not [n for n in out.graph.node if n.op_type in ("Sigmoid", "Split", "MatMul", "Gemm")]
    feeds = {"x": rng.standard_normal((B, I)).astype(np.float32), "h": rng.standard_normal((B, H)).astype(np.float32),
             "c": rng.standard_normal((B, H)).astype(np.float32)}
    assert chained(model, out, feeds, {"h_out": "h", "c_out": "c"}) <= 1e-5


def test_square_cell_with_shared_state():
    rng = np.random.default_rng(3)
    # I == H: x and h are told apart because h comes from the same state tensor as c (silero-vad).
    model = unrolled_cell_model(8, 8, rng, state="shared", gate_order="ifco")
    report = Report()
    out = optimize(model, report=report)
    assert report.all_rewritten, report.table()
    feeds = {"x": rng.standard_normal((2, 8)).astype(np.float32),
             "state": rng.standard_normal((2, 2, 8)).astype(np.float32)}
    assert chained(model, out, feeds, {"state_out": "state"}) <= 1e-5


def test_square_cell_with_separate_states_is_refused():
    rng = np.random.default_rng(3)
    model = unrolled_cell_model(8, 8, rng)
    report = Report()
    out = optimize(model, report=report)
    [finding] = report.findings
    assert not finding.rewritten and "cannot tell the input x from the recurrent h" in finding.reason
    assert report.rules["unrolled_cell"].hits == 0
    assert not [n for n in out.graph.node if n.domain == "lstm_ort"]


def test_not_a_cell_is_left_alone():
    rng = np.random.default_rng(3)
    model = unrolled_cell_model(6, 8, rng)
    tanh = next(n for n in model.graph.node if n.output[0] == "tc")
    tanh.op_type = "Relu"  # h = o * Relu(c'): not an LSTM cell
    report = Report()
    out = optimize(model, report=report)
    assert report.findings == [] and not [n for n in out.graph.node if n.domain == "lstm_ort"]
