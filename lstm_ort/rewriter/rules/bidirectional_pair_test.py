"""bidirectional_pair: a forward and a reverse one-layer FusedLSTM over one sequence become one
bidirectional node with the same outputs; pairs one node cannot run are refused with the reason."""

import numpy as np
import pytest
from onnx import TensorProto, compose, helper, numpy_helper

from lstm_ort.builders import looped_cell_model
from lstm_ort.chain_builders import cell_chain_model
from lstm_ort.rewriter import Report, optimize
from lstm_ort.testing import max_abs, run

T, B, I, H = 6, 3, 5, 8


def fused(model):
    return [n for n in model.graph.node if n.domain == "lstm_ort"]


def lstm_pair(*, concat=True, states="none", hidden=(H, H)):
    """Two ONNX LSTMs, forward and reverse, over X [T, B, I]; Y = Concat of their squeezed outputs
    on the feature axis (or both as outputs). states: "none", "both" (graph inputs) or
    "dependent" (the reverse one starts from the forward one's final state)."""
    rng = np.random.default_rng(1)
    nodes, inits = [], [numpy_helper.from_array(np.array([1], np.int64), "axis1")]
    inputs = [helper.make_tensor_value_info("X", TensorProto.FLOAT, [T, "B", I])]
    ys = []
    for d, (direction, h) in enumerate(zip(("forward", "reverse"), hidden)):
        for name, shape in (("W", (1, 4 * h, I)), ("R", (1, 4 * h, h)), ("B", (1, 8 * h))):
            inits.append(numpy_helper.from_array(rng.uniform(-0.4, 0.4, shape).astype(np.float32), f"{name}{d}"))
        ins = ["X", f"W{d}", f"R{d}", f"B{d}"]
        if states == "both":
            ins += ["", f"h0_{d}", f"c0_{d}"]
            inputs += [helper.make_tensor_value_info(f"{s}0_{d}", TensorProto.FLOAT, [1, "B", h]) for s in "hc"]
        elif states == "dependent" and d == 1:
            ins += ["", "Yh0", "Yc0"]
        nodes.append(helper.make_node("LSTM", ins, [f"Y{d}", f"Yh{d}", f"Yc{d}"], hidden_size=h, direction=direction))
        nodes.append(helper.make_node("Squeeze", [f"Y{d}", "axis1"], [f"seq{d}"]))
        ys.append(f"seq{d}")
    outputs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in (["Y"] if concat else ys)]
    outputs += [helper.make_tensor_value_info(f"Yh{d}", TensorProto.FLOAT, None) for d in (0, 1)]
    if concat:
        nodes.append(helper.make_node("Concat", ys, ["Y"], axis=2))
    model = helper.make_model(helper.make_graph(nodes, "pair", inputs, outputs, inits),
                              opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 10
    return model


def feeds(model, rng):
    out = {"X": rng.standard_normal((T, B, I)).astype(np.float32)}
    for value in model.graph.input[1:]:
        out[value.name] = rng.standard_normal((1, B, H)).astype(np.float32)
    return out


@pytest.mark.parametrize("concat", [True, False])
@pytest.mark.parametrize("states", ["none", "both"])
def test_lstm_pair_becomes_one_bidirectional_node(concat, states):
    model = lstm_pair(concat=concat, states=states)
    report = Report()
    out = optimize(model, report=report)
    assert report.all_rewritten and report.rules["bidirectional_pair"].hits == 1, report.table()
    [node] = fused(out)
    assert helper.get_attribute_value(next(a for a in node.attribute if a.name == "direction")) == b"bidirectional"
    assert [f.layers for f in report.findings] == [1]
    if concat:  # the two directions side by side are Y itself, reshaped (Y_h is sliced per direction)
        assert [n.op_type for n in out.graph.node if "Y" in n.output] == ["Reshape"]
        assert not [n for n in out.graph.node if n.op_type == "Squeeze"]
    f = feeds(model, np.random.default_rng(2))
    assert max_abs(run(out, f), run(model, f, fused=False)) <= 1e-5


def test_pair_of_scans_becomes_one_bidirectional_node():
    forward = looped_cell_model(I, H, np.random.default_rng(3), loop="scan")
    backward = compose.add_prefix(looped_cell_model(I, H, np.random.default_rng(4), loop="scan", reverse=True), "r_")
    graph = backward.graph
    for node in graph.node:
        node.input[:] = ["X" if v == "r_X" else v for v in node.input]
    nodes = [*forward.graph.node, *graph.node, helper.make_node("Concat", ["Y", "r_Y"], ["Y2"], axis=2)]
    model = helper.make_model(helper.make_graph(
        nodes, "scans", [*forward.graph.input, *[v for v in graph.input if v.name != "r_X"]],
        [helper.make_tensor_value_info("Y2", TensorProto.FLOAT, None)],
        [*forward.graph.initializer, *graph.initializer]), opset_imports=forward.opset_import)
    model.ir_version = 10
    report = Report()
    out = optimize(model, report=report)
    assert report.all_rewritten and len(fused(out)) == 1, report.table()
    rng = np.random.default_rng(5)
    f = {"X": rng.standard_normal((T, B, I)).astype(np.float32)}
    f.update({v.name: rng.standard_normal((B, H)).astype(np.float32) for v in model.graph.input[1:]})
    assert max_abs(run(out, f), run(model, f, fused=False)) <= 1e-5


def refused(model, reason):
    report = Report()
    out = optimize(model, report=report)
    assert report.rules["bidirectional_pair"].refusals and reason in next(iter(report.rules["bidirectional_pair"].refusals))
    assert len(fused(out)) == 2
    f = feeds(model, np.random.default_rng(6))
    assert max_abs(run(out, f), run(model, f, fused=False)) <= 1e-5


def test_pair_where_one_direction_reads_the_other_is_refused():
    refused(lstm_pair(states="dependent"), "one direction has an initial_h")


def test_pair_of_different_sizes_is_refused():
    model = lstm_pair(concat=False, hidden=(H, H + 2))
    report = Report()
    optimize(model, report=report)
    assert "differ in hidden_size" in next(iter(report.rules["bidirectional_pair"].refusals))


def test_reverse_reading_the_forward_outputs_is_refused():
    model = lstm_pair(states="dependent")
    # Give the forward direction states too, so only the dependency stands in the way.
    model.graph.input.extend([helper.make_tensor_value_info(f"{s}0_0", TensorProto.FLOAT, [1, "B", H]) for s in "hc"])
    lstm = model.graph.node[0]
    lstm.input.extend(["", "h0_0", "c0_0"])
    refused(model, "one direction reads the other's outputs")


# tests/test_rule_opsets.py runs the rule on these at every opset from the first one given to 21.
OPSET_MODELS = {  # name: (builder(opset), first opset it can be written in)
    "torch bidirectional chains x2": (lambda o: cell_chain_model(5, 6, 4, np.random.default_rng(o),
                                                                 direction="bidirectional", layers=2, opset=o), 9),
}
