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
    assert not finding.rewritten and finding.reason == ("stock rejects this node too: "
                                                        "Unrecognized attribute: future_knob for operator LSTM")
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


def _calling_a_function(nodes, output: str) -> onnx.ModelProto:
    """A model whose graph calls local.lstm_fn, a function of ``nodes`` from X [6, 2, 4] to ``output``."""
    fn = helper.make_function("local", "lstm_fn", ["X"], [output], nodes, opset_imports=[helper.make_opsetid("", 17)])
    graph = helper.make_graph([helper.make_node("lstm_fn", ["X"], ["out"], domain="local")], "main",
                              [helper.make_tensor_value_info("X", TensorProto.FLOAT, [6, 2, 4])],
                              [helper.make_tensor_value_info("out", TensorProto.FLOAT, [1, 2, 5])])
    model = helper.make_model(graph, functions=[fn], opset_imports=[helper.make_opsetid("", 17),
                                                                    helper.make_opsetid("local", 1)])
    model.ir_version = IR_VERSION
    return model


def _lstm_nodes_with_constant_weights(spec, rng, x="X", y_h="Y_h"):
    """An LSTM whose weights are Constant nodes (as they must be inside functions)."""
    (layer,) = random_layers(spec, rng)
    consts = [helper.make_node("Constant", [], [name], value=numpy_helper.from_array(arr, name))
              for name, arr in (("W", layer.W), ("R", layer.R), ("B", layer.B))]
    return consts + [helper.make_node("LSTM", [x, "W", "R", "B"], ["", y_h], hidden_size=spec.hidden_size)]


def test_lstm_inside_function_is_rewritten():
    rng = np.random.default_rng(3)
    spec = LstmSpec(input_size=4, hidden_size=5)
    model = _calling_a_function(_lstm_nodes_with_constant_weights(spec, rng), "Y_h")
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


# --- issue 11: never a wrong or broken model ---------------------------------------------------

def _stock_and_ours(model, out, feeds):
    return run(model, feeds, fused=False), run(out, feeds)


def test_initializers_that_are_inputs_stay_overridable():
    """keep_initializers_as_inputs: a caller may feed W; packing it would silently ignore that."""
    rng = np.random.default_rng(5)
    spec = LstmSpec(input_size=3, hidden_size=4)
    model = stock_model(spec, random_layers(spec, rng))
    for init in model.graph.initializer:
        model.graph.input.append(helper.make_tensor_value_info(init.name, init.data_type, list(init.dims)))
    report = Report()
    out = optimize(model, report=report)
    (finding,) = report.findings
    assert not finding.rewritten and "l0_W" in finding.reason and "also a graph input" in finding.reason
    feeds = make_feeds(spec, 5, 2, rng)
    feeds["l0_W"] = rng.standard_normal((1, 16, 3)).astype(np.float32)  # the override stock honours
    ref, got = _stock_and_ours(model, out, feeds)
    assert max_abs(ref, got) == 0.0

    report = Report()
    frozen = optimize(model, report=report, freeze_inputs=True)  # explicit: pack them anyway
    assert report.all_rewritten
    assert not {"l0_W", "l0_R", "l0_B"} & {i.name for i in frozen.graph.input}  # feeding them is an error now
    del feeds["l0_W"]
    assert max_abs(run(model, feeds, fused=False), run(frozen, feeds)) <= 1e-5


def _with_zero_state(spec, state_shape, how="initializer", index=6):
    """A one-layer model whose initial_c (or initial_h) is zeros of `state_shape`."""
    rng = np.random.default_rng(0)
    model = stock_model(spec, random_layers(spec, rng), opset=17)
    node = next(n for n in model.graph.node if n.op_type == "LSTM")
    while len(node.input) <= index:
        node.input.append("")
    if how == "initializer":
        model.graph.initializer.append(numpy_helper.from_array(np.zeros(state_shape, np.float32), "zero_state"))
    else:  # how torch's TorchScript exporter spells it: Expand(0, Concat(D, Shape(X)[1], H))
        dims = [numpy_helper.from_array(np.array([d], np.int64), f"dim{k}") for k, d in enumerate(state_shape)]
        model.graph.initializer.extend([*dims, numpy_helper.from_array(np.array(0, np.float32), "zero"),
                                        numpy_helper.from_array(np.array([1], np.int64), "one")])
        model.graph.node.insert(0, helper.make_node("Shape", ["X"], ["x_shape"]))
        model.graph.node.insert(1, helper.make_node("Gather", ["x_shape", "one"], ["batch"], axis=0))
        model.graph.node.insert(2, helper.make_node("Concat", ["dim0", "batch", "dim2"], ["state_shape"], axis=0))
        model.graph.node.insert(3, helper.make_node("Expand", ["zero", "state_shape"], ["zero_state"]))
    node.input[index] = "zero_state"
    return model


@pytest.mark.parametrize("how", ["initializer", "expand"])
def test_zero_state_of_wrong_size_is_refused(how):
    """torch's export of nn.LSTM(proj_size=4): initial_c zeros of [1, B, 16] for H=4; stock refuses it
    (initial_c must have shape ...), so dropping it would make a model that runs and is wrong."""
    spec = LstmSpec(input_size=3, hidden_size=4)
    model = _with_zero_state(spec, [1, 3, 16], how)
    model.graph.input[0].type.tensor_type.shape.dim[1].dim_value = 3
    report = Report()
    out = optimize(model, report=report)
    (finding,) = report.findings
    assert not finding.rewritten
    assert "initial_c is zeros of shape [1, 3, 16], not [1, 3, 4]" in finding.reason
    assert [n.op_type for n in out.graph.node].count("LSTM") == 1


@pytest.mark.parametrize("how", ["initializer", "expand"])
def test_zero_state_of_right_size_is_dropped(how):
    spec = LstmSpec(input_size=3, hidden_size=4)
    model = _with_zero_state(spec, [1, 2, 4], how)
    model.graph.input[0].type.tensor_type.shape.dim[1].dim_value = 2
    report = Report()
    out = optimize(model, report=report)
    assert report.all_rewritten
    fused = next(n for n in out.graph.node if n.domain == "lstm_ort")
    assert len(fused.input) <= 5  # no initial_c: dropped
    feeds = make_feeds(spec, 5, 2, np.random.default_rng(1))
    assert max_abs(*_stock_and_ours(model, out, feeds)) <= 1e-5


def test_zero_state_of_unknown_batch_passes_through():
    """A zero state whose batch is not known to be X's is kept: the kernel checks it per call, as stock does."""
    spec = LstmSpec(input_size=3, hidden_size=4)
    model = _with_zero_state(spec, [1, 2, 4], "initializer")  # X's batch is symbolic
    report = Report()
    out = optimize(model, report=report)
    assert report.all_rewritten
    fused = next(n for n in out.graph.node if n.domain == "lstm_ort")
    assert fused.input[5] == "zero_state"
    feeds = make_feeds(spec, 5, 2, np.random.default_rng(1))
    assert max_abs(*_stock_and_ours(model, out, feeds)) <= 1e-5


@pytest.mark.parametrize("zero_shape", [(), (1, 1, 4)])
@pytest.mark.parametrize("batch_from", ["X's batch", "X's time"])
def test_zero_state_sized_in_the_graph_is_dropped_only_when_it_is_xs_batch(batch_from, zero_shape):
    """Expand(0, Concat(D, Shape(X)[k], H)) with X's batch symbolic, the state declared with
    unknown dims as onnxruntime's quantize_dynamic leaves it: read symbolically, k = 1 is [D, B, H]
    and the state is dropped; k = 0 (X's time) is not provably that and passes through for the
    kernel to check per call."""
    spec = LstmSpec(input_size=3, hidden_size=4)
    model = _with_zero_state(spec, [1, 2, 4], "expand")  # X: [T, B, 3], both symbolic
    model.graph.value_info.append(helper.make_tensor_value_info("zero_state", TensorProto.FLOAT,
                                                                ["unk__0", "unk__1", 4]))
    next(t for t in model.graph.initializer if t.name == "zero").CopyFrom(  # Expand broadcasts it
        numpy_helper.from_array(np.zeros(zero_shape, np.float32), "zero"))
    if batch_from == "X's time":
        next(t for t in model.graph.initializer if t.name == "one").CopyFrom(
            numpy_helper.from_array(np.array([0], np.int64), "one"))
    report = Report()
    out = optimize(model, report=report)
    assert report.all_rewritten
    fused = next(n for n in out.graph.node if n.domain == "lstm_ort")
    dropped = len(fused.input) <= 5 or fused.input[5] == ""
    assert dropped == (batch_from == "X's batch")
    for B in (2, 3):
        feeds = make_feeds(spec, B if batch_from == "X's time" else 5, B, np.random.default_rng(B))
        assert max_abs(*_stock_and_ours(model, out, feeds)) <= 1e-5


def test_zero_state_folded_to_a_constant_is_read_by_its_own_shape():
    """A zero state folded to a constant keeps the declaration made before folding ('unk__0' in
    onnxruntime's quantize_dynamic output); the constant's own shape decides."""
    spec = LstmSpec(input_size=3, hidden_size=4)
    model = _with_zero_state(spec, [1, 2, 4], "initializer")
    model.graph.input[0].type.tensor_type.shape.dim[1].dim_value = 2
    model.graph.value_info.append(helper.make_tensor_value_info("zero_state", TensorProto.FLOAT, ["unk__0", 2, 4]))
    report = Report()
    out = optimize(model, report=report)
    assert report.all_rewritten
    fused = next(n for n in out.graph.node if n.domain == "lstm_ort")
    assert len(fused.input) <= 5 or fused.input[5] == ""
    feeds = make_feeds(spec, 5, 2, np.random.default_rng(1))
    assert max_abs(*_stock_and_ours(model, out, feeds)) <= 1e-5


def test_input_forget_non_zero_is_true_as_in_stock():
    """Stock runs input_forget=2 as input_forget=1; FusedLSTM accepts only 0/1."""
    rng = np.random.default_rng(2)
    spec = LstmSpec(input_size=3, hidden_size=4)
    model = stock_model(spec, random_layers(spec, rng))
    model.graph.node[0].attribute.append(helper.make_attribute("input_forget", 2))
    report = Report()
    out = optimize(model, report=report)
    assert report.all_rewritten
    fused = next(n for n in out.graph.node if n.domain == "lstm_ort")
    assert {a.name: a.i for a in fused.attribute}["input_forget"] == 1
    feeds = make_feeds(spec, 5, 2, rng)
    assert max_abs(*_stock_and_ours(model, out, feeds)) <= 1e-5


@pytest.mark.parametrize("attr,value,message", [
    ("activations", ["Sigmoid", "Swish", "Tanh"], "Swish"),
    ("direction", "sideways", "sideways"),
    ("clip", -1.0, "clip"),
    ("hidden_size", 3.0, "hidden_size"),  # a float where stock reads an int
])
def test_attributes_stock_rejects_are_left(attr, value, message):
    spec = LstmSpec(input_size=2, hidden_size=3)
    model = stock_model(spec, random_layers(spec, np.random.default_rng(0)))
    node = model.graph.node[0]
    kept = [a for a in node.attribute if a.name != attr]
    del node.attribute[:]
    node.attribute.extend([*kept, helper.make_attribute(attr, value)])
    report = Report()
    out = optimize(model, report=report, fold_constants=False)
    (finding,) = report.findings
    assert not finding.rewritten and finding.reason.startswith("stock rejects this node too: ")
    assert message in finding.reason
    assert [n.op_type for n in out.graph.node].count("LSTM") == 1 and "lstm_ort" not in {o.domain for o in out.opset_import}


def test_sequence_lens_of_int64_is_left():
    spec = LstmSpec(input_size=2, hidden_size=3)
    model = stock_model(spec, random_layers(spec, np.random.default_rng(0)), seq_lens=True)
    model.graph.input[1].type.tensor_type.elem_type = TensorProto.INT64
    report = Report()
    optimize(model, report=report)
    assert report.findings[0].reason.startswith("stock rejects this node too: ")


@pytest.mark.parametrize("name,shape,message", [
    ("l0_R", (1, 12, 2), "R has shape [1, 12, 2], not [1, 12, 3]"),
    ("l0_B", (1, 12), "B has shape [1, 12], not [1, 24]"),
    ("l0_B", (24,), "B has shape [24], not [1, 24]"),
    ("l0_P", (1, 3), "P has shape [1, 3], not [1, 9]"),
])
def test_wrong_weight_shapes_are_refused(name, shape, message):
    """R/B/P of the wrong shape: a refusal with the reason, not a packing crash."""
    spec = LstmSpec(input_size=2, hidden_size=3, peepholes=True)

    def edit(model):
        for k, init in enumerate(model.graph.initializer):
            if init.name == name:
                model.graph.initializer[k].CopyFrom(numpy_helper.from_array(np.zeros(shape, np.float32), name))

    model = stock_model(spec, random_layers(spec, np.random.default_rng(0)))
    edit(model)
    report = Report()
    optimize(model, report=report)
    (finding,) = report.findings
    assert not finding.rewritten and message in finding.reason


def _all_node_names(model):
    from lstm_ort.runtime.model_io import iter_graphs

    return [[n.name for n in g.node] for g in iter_graphs(model)]


def test_new_names_are_unique_in_the_whole_model():
    """An LSTM named enc beside a node enc_fused, a value named like the packed weights, and an
    LSTM in a function beside a node named like its weights' Constant: all names stay unique."""
    rng = np.random.default_rng(6)
    spec = LstmSpec(input_size=4, hidden_size=5)
    model = stock_model(spec, random_layers(spec, rng))
    for node in model.graph.node:
        if node.op_type == "LSTM":
            node.name = "enc"
        if node.op_type == "Identity":
            node.name = "enc_fused"
    model.graph.node.append(helper.make_node("Identity", ["Y_h"], ["enc_fused_W"], name="enc_fused_W_const"))
    model.graph.output.append(helper.make_tensor_value_info("enc_fused_W", TensorProto.FLOAT, None))
    out = optimize(model)
    for names in _all_node_names(out):
        assert len(names) == len(set(names)), names
    feeds = make_feeds(spec, 5, 2, rng)
    assert max_abs(*_stock_and_ours(model, out, feeds)) <= 1e-5

    nodes = _lstm_nodes_with_constant_weights(spec, rng)
    nodes[-1].name = "inner"
    nodes.append(helper.make_node("Identity", ["Y_h"], ["Y_h2"], name="inner_fused_W_const"))
    fmodel = _calling_a_function(nodes, "Y_h2")
    report = Report()
    out = optimize(fmodel, report=report, fold_constants=False)
    assert report.all_rewritten
    for names in _all_node_names(out):
        assert len(names) == len(set(names)), names
    feeds = {"X": rng.standard_normal((6, 2, 4)).astype(np.float32)}
    assert max_abs(*_stock_and_ours(fmodel, out, feeds)) <= 1e-5


def test_new_names_in_a_subgraph_avoid_the_outer_graph():
    """A name reused in a subgraph breaks single assignment: the If branch's new constants must
    avoid names of the main graph."""
    rng = np.random.default_rng(7)
    spec = LstmSpec(input_size=4, hidden_size=5)
    inner = stock_model(spec, random_layers(spec, rng), outputs=("Y_h",))
    then_graph = inner.graph
    then_graph.ClearField("input")
    for node in then_graph.node:
        if node.op_type == "LSTM":
            node.name = "enc"
    else_graph = helper.make_graph([helper.make_node("Identity", ["enc_fused_W"], ["Y_h_else"])], "else", [],
                                   [helper.make_tensor_value_info("Y_h_else", TensorProto.FLOAT, None)])
    graph = helper.make_graph(
        [helper.make_node("If", ["cond"], ["out"], then_branch=then_graph, else_branch=else_graph)], "main",
        [helper.make_tensor_value_info("cond", TensorProto.BOOL, []),
         helper.make_tensor_value_info("X", TensorProto.FLOAT, ["T", 2, 4])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(np.zeros((1, 2, 5), np.float32), "enc_fused_W")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = IR_VERSION
    report = Report()
    out = optimize(model, report=report)
    assert report.all_rewritten
    onnx.checker.check_model(out, full_check=True)
    feeds = {"cond": np.array(True), "X": rng.standard_normal((6, 2, 4)).astype(np.float32)}
    assert max_abs(*_stock_and_ours(model, out, feeds)) <= 1e-5


# tests/test_rule_opsets.py runs the rule on these at every opset from the first one given to 21.
OPSET_MODELS = {  # name: (builder(opset), first opset it can be written in)
    "single_lstm": (lambda o: stock_model(LstmSpec(input_size=5, hidden_size=6), random_layers(
        LstmSpec(input_size=5, hidden_size=6), np.random.default_rng(o)), opset=o), 9),
}
