"""cell_chain: unrolled cells chained over time become one FusedLSTM over the sequence (a forward and
a reverse chain one bidirectional node, stacked chains one multi-layer node) with the outputs of
the cells; a chain that cannot be proven is left whole, with the reason, never cut into steps."""

import numpy as np
import onnx
import pytest

from lstm_ort.chain_builders import cell_chain_model
from lstm_ort.rewriter import Report, optimize
from lstm_ort.testing import max_abs, run

CELL_OPS = ("Sigmoid", "HardSigmoid", "Clip", "Tanh", "Gemm", "MatMul", "Split")


def fused(model):
    return [n for n in model.graph.node if n.domain == "lstm_ort"]


def attribute(node, name):
    return next((onnx.helper.get_attribute_value(a) for a in node.attribute if a.name == name), None)


def parity(model, out, T, I, states=(), H=8):
    rng = np.random.default_rng(T)
    worst = 0.0
    for B in (1, 3):
        feeds = {"X": rng.standard_normal((B, T, I)).astype(np.float32)}
        feeds.update({name: rng.standard_normal((B, H)).astype(np.float32) for name in states})
        worst = max(worst, max_abs(run(out, feeds), run(model, feeds, fused=False)))
    return worst


CASES = [("torch", "forward"), ("torch", "reverse"), ("torch", "flip"), ("torch", "bidirectional"),
         ("keras", "forward"), ("keras", "reverse"), ("keras", "bidirectional")]


@pytest.mark.parametrize("style,direction", CASES)
def test_chain_becomes_one_node(style, direction):
    T, I, H = 5, 7, 8
    model = cell_chain_model(I, H, T, np.random.default_rng(len(style + direction)), style=style,
                             direction=direction, final_states=direction != "bidirectional")
    report = Report()
    out = optimize(model, report=report)
    assert report.all_rewritten and report.lstm_count == (2 if direction == "bidirectional" else 1), report.table()
    [node] = fused(out)
    want = {"flip": "reverse"}.get(direction, direction)
    assert attribute(node, "direction").decode() == want
    assert len(node.input) <= 3  # zero states proven zero and dropped
    assert not [n for n in out.graph.node if n.op_type in CELL_OPS]
    assert parity(model, out, T, I) <= 1e-5


@pytest.mark.parametrize("style,direction", [("torch", "forward"), ("torch", "bidirectional"), ("keras", "forward")])
def test_stacked_chains_become_one_multi_layer_node(style, direction):
    T, I, H = 4, 5, 8
    model = cell_chain_model(I, H, T, np.random.default_rng(2), style=style, direction=direction, layers=2)
    report = Report()
    out = optimize(model, report=report)
    assert report.all_rewritten, report.table()
    [node] = fused(out)
    assert attribute(node, "num_layers") == 2
    assert not [n for n in out.graph.node if n.op_type in CELL_OPS]
    assert parity(model, out, T, I) <= 1e-5


def test_given_initial_states_are_kept():
    T, I, H = 4, 5, 8
    model = cell_chain_model(I, H, T, np.random.default_rng(3), zero_states=False, final_states=True)
    out = optimize(model)
    [node] = fused(out)
    assert node.input[4] and node.input[5]
    assert parity(model, out, T, I, states=("h0_l0d0_", "c0_l0d0_")) <= 1e-5


@pytest.mark.parametrize("gate_activation", ["hard_sigmoid", "keras2_hard_sigmoid", "keras3_hard_sigmoid"])
def test_hard_sigmoid_gates(gate_activation):
    """Hard-sigmoid gates (the HardSigmoid op, tf2onnx's Keras 2 and Keras 3 forms) are matched as
    HardSigmoid(alpha, beta), exactly."""
    T, I, H = 4, 5, 8
    model = cell_chain_model(I, H, T, np.random.default_rng(4), style="keras", gate_activation=gate_activation)
    out = optimize(model)
    [node] = fused(out)
    assert attribute(node, "activations").decode().startswith("HardSigmoid,Tanh,Tanh")
    assert parity(model, out, T, I) <= 1e-5


def test_peephole_cells():
    T, I, H = 4, 5, 8
    model = cell_chain_model(I, H, T, np.random.default_rng(5), style="keras", peepholes=True, final_states=True)
    out = optimize(model)
    [node] = fused(out)
    assert len(node.input) == 7 and node.input[6]  # P
    assert parity(model, out, T, I) <= 1e-5


def refused(model, reason):
    report = Report()
    out = optimize(model, report=report)
    [finding] = report.findings
    assert not finding.rewritten and reason in finding.reason, report.table()
    # Left whole: no FusedLSTM at all (one-step nodes would run slower than the cells).
    assert not fused(out) and "unrolled_cell" not in report.rules
    return out


def _node(model, output):
    return next(n for n in model.graph.node if output in n.output)


def test_differing_weights_are_refused():
    model = cell_chain_model(5, 8, 4, np.random.default_rng(6), style="keras")
    matmul = next(n for n in model.graph.node if n.op_type == "MatMul" and n.input[0].startswith("squeeze"))
    other = onnx.numpy_helper.to_array(next(t for t in model.graph.initializer if t.name == matmul.input[1]))
    model.graph.initializer.append(onnx.numpy_helper.from_array(other * 1.5, "other_W"))
    matmul.input[1] = "other_W"
    refused(model, "the steps differ in their weights")


def test_intermediate_h_used_elsewhere_is_refused():
    model = cell_chain_model(5, 8, 4, np.random.default_rng(7))
    model.graph.output.append(onnx.helper.make_tensor_value_info("l0d0_h_1", onnx.TensorProto.FLOAT, None))
    refused(model, "step 1's h or c is a graph output")


def test_value_inside_a_cell_used_outside_is_refused():
    model = cell_chain_model(5, 8, 4, np.random.default_rng(8))
    model.graph.output.append(onnx.helper.make_tensor_value_info("l0d0_s2_f", onnx.TensorProto.FLOAT, None))
    refused(model, "inside a cell is used outside it")


def test_steps_out_of_order_are_refused():
    model = cell_chain_model(5, 8, 4, np.random.default_rng(9))
    first = _node(model, "l0d0_s0_px")
    second = _node(model, "l0d0_s1_px")
    first.input[0], second.input[0] = second.input[0], first.input[0]
    refused(model, "neither forward nor reverse")


def test_sequence_of_unknown_length_is_refused():
    model = cell_chain_model(5, 8, 4, np.random.default_rng(10))
    model.graph.input[0].type.tensor_type.shape.dim[1].dim_param = "T"
    refused(model, "the sequence's length is not fixed")


# tests/test_rule_opsets.py runs the rule on these at every opset from the first one given to 21.
OPSET_MODELS = {  # name: (builder(opset), first opset it can be written in)
    "torch chain": (lambda o: cell_chain_model(5, 6, 4, np.random.default_rng(o), opset=o, final_states=True), 9),
    "torch flipped chain": (lambda o: cell_chain_model(5, 6, 4, np.random.default_rng(o), direction="flip", opset=o),
                            10),
    "keras hard sigmoid": (lambda o: cell_chain_model(5, 6, 4, np.random.default_rng(o), style="keras",
                                                      gate_activation="keras3_hard_sigmoid", opset=o), 9),
}
