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


def test_square_cell_with_separate_states():
    rng = np.random.default_rng(3)
    # I == H and h, c separate inputs: either operand may be read as h for one step (x W + h R is
    # the same sum), so the cell is rewritten and its outputs are the same.
    model = unrolled_cell_model(8, 8, rng)
    report = Report()
    out = optimize(model, report=report)
    assert report.all_rewritten and report.rules["unrolled_cell"].hits == 1, report.table()
    feeds = {name: rng.standard_normal((2, 8)).astype(np.float32) for name in ("x", "h", "c")}
    assert chained(model, out, feeds, {"h_out": "h", "c_out": "c"}) <= 1e-5


def test_not_a_cell_is_left_alone():
    rng = np.random.default_rng(3)
    model = unrolled_cell_model(6, 8, rng)
    tanh = next(n for n in model.graph.node if n.output[0] == "tc")
    tanh.op_type = "Relu"  # h = o * Relu(c'): not an LSTM cell
    report = Report()
    out = optimize(model, report=report)
    assert report.findings == [] and not [n for n in out.graph.node if n.domain == "lstm_ort"]


def stacked_streaming_model(I, H, rng, layers=2):
    """Streaming cells stacked in one call (T=1): layer k reads layer k-1's new h; each layer's h
    and c come in as inputs and go out as outputs."""
    from onnx import TensorProto, helper

    from lstm_ort.builders import IR_VERSION, cell_nodes

    nodes, inits, inputs, outputs = [], [], [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["B", I])], []
    x = "x"
    for k in range(layers):
        io = {"x": x, "h": f"h{k}", "c": f"c{k}", "h_out": f"h{k}_out", "c_out": f"c{k}_out"}
        cell, consts = cell_nodes(I if k == 0 else H, H, rng, form="gemm", **io)
        keep = set(io.values())
        rename = lambda v: v if v in keep or not v else f"l{k}_{v}"  # noqa: E731
        for node in cell:
            node.input[:] = [rename(v) for v in node.input]
            node.output[:] = [rename(v) for v in node.output]
        for t in consts:
            t.name = rename(t.name)
        nodes += cell
        inits += consts
        inputs += [helper.make_tensor_value_info(f"{s}{k}", TensorProto.FLOAT, ["B", H]) for s in "hc"]
        outputs += [helper.make_tensor_value_info(f"{s}{k}_out", TensorProto.FLOAT, ["B", H]) for s in "hc"]
        x = f"h{k}_out"
    model = helper.make_model(helper.make_graph(nodes, "stacked_cells", inputs, outputs, inits),
                              opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = IR_VERSION
    return model


def test_stacked_streaming_cells_become_one_multi_layer_node():
    rng = np.random.default_rng(11)
    I, H, B = 7, 8, 2
    model = stacked_streaming_model(I, H, rng)
    report = Report()
    out = optimize(model, report=report)
    assert report.all_rewritten and report.rules["stack_lstm"].hits == 1, report.table()
    [node] = [n for n in out.graph.node if n.domain == "lstm_ort"]
    assert next(a.i for a in node.attribute if a.name == "num_layers") == 2
    feeds = {"x": rng.standard_normal((B, I)).astype(np.float32)}
    feeds.update({f"{s}{k}": rng.standard_normal((B, H)).astype(np.float32) for s in "hc" for k in (0, 1)})
    assert chained(model, out, feeds, {f"{s}{k}_out": f"{s}{k}" for s in "hc" for k in (0, 1)}) <= 1e-5


# tests/test_rule_opsets.py runs the rule on these at every opset from the first one given to 21.
OPSET_MODELS = {  # name: (builder(opset), first opset it can be written in)
    "streaming cell": (lambda o: unrolled_cell_model(5, 6, np.random.default_rng(o), opset=o), 9),
}
