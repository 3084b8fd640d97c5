"""single_lstm: each ONNX LSTM becomes one FusedLSTM with the same outputs; refusals say why."""

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from lstm_ort.builders import IR_VERSION, LstmSpec, random_layers, stock_model
from lstm_ort.rewriter import Report, optimize
from lstm_ort.rewriter.rules import SingleLstm
from lstm_ort.testing import make_feeds, max_abs, run


@pytest.mark.parametrize("opset", [7, 14, 22])
@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
def test_single_node_rewritten_with_parity(opset, direction):
    rng = np.random.default_rng(opset)
    extra = {} if opset == 7 else {"clip": 2.0}
    spec = LstmSpec(input_size=5, hidden_size=6, direction=direction, peepholes=True, **extra)
    states = opset >= 10  # the stock stack slices its states with input-form Slice (opset 10+)
    model = stock_model(spec, random_layers(spec, rng), seq_lens=True, initial_states=states, opset=opset)
    report = Report()
    out = optimize(model, report=report, rules=[SingleLstm()])
    assert report.all_rewritten and report.lstm_count == 1
    assert report.rules["single_lstm"].hits == 1 and not report.rules["single_lstm"].refusals
    assert [n.op_type for n in out.graph.node if n.domain == "lstm_ort"] == ["FusedLSTM"]
    assert not [n for n in out.graph.node if n.op_type == "LSTM"]
    assert out.ir_version == model.ir_version
    assert {o.domain: o.version for o in out.opset_import}[""] == opset
    feeds = make_feeds(spec, 7, 3, rng, seq_lens=True, initial_states=states)
    assert max_abs(run(out, feeds), run(model, feeds, fused=False)) <= 1e-5


def _lstm_with_runtime_weights():
    """W comes from a graph input: not a constant, so the rule must leave the node."""
    H, I = 3, 2
    node = helper.make_node("LSTM", ["X", "W", "R"], ["Y"], hidden_size=H)
    graph = helper.make_graph(
        [node], "g",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, [4, 1, I]),
         helper.make_tensor_value_info("W", TensorProto.FLOAT, [1, 4 * H, I])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(np.zeros((1, 4 * H, H), np.float32), "R")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = IR_VERSION
    return model


def test_runtime_weights_are_refused_with_reason():
    report = Report()
    out = optimize(_lstm_with_runtime_weights(), report=report)
    (finding,) = report.findings
    assert not finding.rewritten and "weight W (W) is not a constant" in finding.reason
    assert [n.op_type for n in out.graph.node] == ["LSTM"]
    assert "lstm_ort" not in {o.domain for o in out.opset_import}


def test_unsupported_element_type_is_refused():
    spec = LstmSpec(input_size=2, hidden_size=3)
    model = stock_model(spec, random_layers(spec, np.random.default_rng(0)))
    model.graph.input[0].type.tensor_type.elem_type = TensorProto.DOUBLE
    report = Report()
    optimize(model, report=report, fold_constants=False)
    assert "not float32/float16" in report.findings[0].reason


def test_lstm_inside_if_branch_is_rewritten():
    rng = np.random.default_rng(1)
    spec = LstmSpec(input_size=4, hidden_size=5)
    inner = stock_model(spec, random_layers(spec, rng), outputs=("Y_h",))
    then_graph = inner.graph
    then_graph.ClearField("input")
    else_graph = helper.make_graph([helper.make_node("Identity", ["zeros"], ["Y_h_else"])], "else", [],
                                   [helper.make_tensor_value_info("Y_h_else", TensorProto.FLOAT, None)],
                                   [numpy_helper.from_array(np.zeros((1, 2, 5), np.float32), "zeros")])
    then_graph.name = "then"
    if_node = helper.make_node("If", ["cond"], ["out"], then_branch=then_graph, else_branch=else_graph)
    graph = helper.make_graph([if_node], "main",
                              [helper.make_tensor_value_info("cond", TensorProto.BOOL, []),
                               helper.make_tensor_value_info("X", TensorProto.FLOAT, ["T", 2, 4])],
                              [helper.make_tensor_value_info("out", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = IR_VERSION
    report = Report()
    out = optimize(model, report=report)
    assert report.all_rewritten and report.findings[0].location.startswith("graph/")
    feeds = {"cond": np.array(True), "X": rng.standard_normal((6, 2, 4)).astype(np.float32)}
    assert max_abs(run(out, feeds), run(model, feeds, fused=False)) <= 1e-5
    onnx.checker.check_model(out)


def _with_node_edit(edit):
    spec = LstmSpec(input_size=2, hidden_size=3)
    model = stock_model(spec, random_layers(spec, np.random.default_rng(0)))
    edit(model)
    report = Report()
    out = optimize(model, report=report, fold_constants=False)
    return report.findings[0], out


def test_unknown_attribute_is_refused():
    def edit(model):
        model.graph.node[0].attribute.append(helper.make_attribute("future_knob", 1))

    finding, out = _with_node_edit(edit)
    assert not finding.rewritten and "unsupported LSTM attributes: ['future_knob']" in finding.reason
    assert [n.op_type for n in out.graph.node].count("LSTM") == 1


def test_wrong_weight_shape_is_refused():
    def edit(model):
        w = next(i for i in model.graph.initializer if i.name == "l0_W")
        w.CopyFrom(numpy_helper.from_array(np.zeros((1, 8, 2), np.float32), "l0_W"))

    finding, _ = _with_node_edit(edit)
    assert not finding.rewritten and "W has shape [1, 8, 2], not [1, 12, I]" in finding.reason


def test_missing_x_is_refused():
    def edit(model):
        model.graph.node[0].input[0] = ""

    finding, _ = _with_node_edit(edit)
    assert not finding.rewritten and finding.reason == "input X is missing"


def _lstm_nodes_with_constant_weights(spec, rng, x="X", y_h="Y_h"):
    """An LSTM whose weights are Constant nodes (as they must be inside functions)."""
    (layer,) = random_layers(spec, rng)
    consts = [helper.make_node("Constant", [], [name], value=numpy_helper.from_array(arr, name))
              for name, arr in (("W", layer.W), ("R", layer.R), ("B", layer.B))]
    return consts + [helper.make_node("LSTM", [x, "W", "R", "B"], ["", y_h], hidden_size=spec.hidden_size)]


def test_lstm_inside_function_is_rewritten():
    rng = np.random.default_rng(3)
    spec = LstmSpec(input_size=4, hidden_size=5)
    fn = helper.make_function("local", "lstm_fn", ["X"], ["Y_h"], _lstm_nodes_with_constant_weights(spec, rng),
                              opset_imports=[helper.make_opsetid("", 17)])
    graph = helper.make_graph([helper.make_node("lstm_fn", ["X"], ["out"], domain="local")], "main",
                              [helper.make_tensor_value_info("X", TensorProto.FLOAT, [6, 2, 4])],
                              [helper.make_tensor_value_info("out", TensorProto.FLOAT, [1, 2, 5])])
    model = helper.make_model(graph, functions=[fn], opset_imports=[helper.make_opsetid("", 17),
                                                                    helper.make_opsetid("local", 1)])
    model.ir_version = IR_VERSION
    report = Report()
    out = optimize(model, report=report, fold_constants=False)
    assert report.all_rewritten and report.findings[0].location == "function:lstm_fn"
    feeds = {"X": rng.standard_normal((6, 2, 4)).astype(np.float32)}
    assert max_abs(run(out, feeds), run(model, feeds, fused=False)) <= 1e-5


def test_lstm_inside_loop_body_is_rewritten():
    rng = np.random.default_rng(4)
    spec = LstmSpec(input_size=4, hidden_size=5)
    body = helper.make_graph(
        _lstm_nodes_with_constant_weights(spec, rng, y_h="h") + [helper.make_node("Identity", ["cond_in"], ["cond_out"])],
        "body",
        [helper.make_tensor_value_info("i", TensorProto.INT64, []),
         helper.make_tensor_value_info("cond_in", TensorProto.BOOL, [])],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("h", TensorProto.FLOAT, [1, 2, 5])])
    loop = helper.make_node("Loop", ["trip", "cond"], ["hs"], body=body)
    graph = helper.make_graph([loop], "main",
                              [helper.make_tensor_value_info("X", TensorProto.FLOAT, [6, 2, 4])],
                              [helper.make_tensor_value_info("hs", TensorProto.FLOAT, [2, 1, 2, 5])],
                              [numpy_helper.from_array(np.array(2, np.int64), "trip"),
                               numpy_helper.from_array(np.array(True), "cond")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = IR_VERSION
    report = Report()
    out = optimize(model, report=report, fold_constants=False)
    assert report.all_rewritten and report.findings[0].location.startswith("graph/")
    feeds = {"X": rng.standard_normal((6, 2, 4)).astype(np.float32)}
    assert max_abs(run(out, feeds), run(model, feeds, fused=False)) <= 1e-5
