"""cell_loop: a Scan or Loop over time whose body is one cell becomes one FusedLSTM over the whole
sequence (the loop is gone), with the same outputs; loops it cannot prove equal are refused."""


import numpy as np
import onnx
import pytest

from lstm_ort.builders import looped_cell_model
from lstm_ort.rewriter import Report, optimize
from lstm_ort.testing import max_abs, run


def feeds(rng, T=7, B=3, I=5, H=6):
    return {"X": rng.standard_normal((T, B, I)).astype(np.float32),
            "h0": rng.standard_normal((B, H)).astype(np.float32), "c0": rng.standard_normal((B, H)).astype(np.float32)}


CASES = [("scan", False, "ifco", "matmul"), ("scan", True, "iofc", "gemm"), ("loop", False, "ifco", "concat"),
         ("loop", False, "ocfi", "slices")]


@pytest.mark.parametrize("loop,reverse,gate_order,form", CASES)
def test_loop_becomes_one_fused_node(loop, reverse, gate_order, form):
    rng = np.random.default_rng(len(gate_order + form) + reverse)
    model = looped_cell_model(5, 6, rng, loop=loop, reverse=reverse, gate_order=gate_order, form=form)
    report = Report()
    out = optimize(model, report=report)
    assert report.all_rewritten and report.rules["cell_loop"].hits == 1, report.table()
    assert [n.op_type for n in out.graph.node if n.op_type in ("Scan", "Loop", "FusedLSTM")] == ["FusedLSTM"]
    for T in (1, 7):
        f = feeds(rng, T=T)
        assert max_abs(run(out, f), run(model, f, fused=False)) <= 1e-5


def test_loop_with_a_fixed_trip_count_other_than_the_length_is_refused():
    rng = np.random.default_rng(0)
    model = looped_cell_model(5, 6, rng, loop="loop")
    trip = next(n for n in model.graph.node if n.op_type == "Gather")
    model.graph.node.remove(trip)
    model.graph.initializer.append(onnx.numpy_helper.from_array(np.array(4, np.int64), "T"))
    model.graph.node.remove(next(n for n in model.graph.node if n.op_type == "Shape"))
    report = Report()
    out = optimize(model, report=report)
    assert any("trip count is not the sequence's length" in f.reason for f in report.findings), report.table()
    assert [n.op_type for n in out.graph.node if n.op_type in ("Loop", "FusedLSTM")] == ["Loop"]
    f = feeds(rng)
    # The loop stays; the cell in its body may still become a one-step FusedLSTM (unrolled_cell).
    assert max_abs(run(out, f), run(model, f, fused=False)) <= 1e-5


def test_scan_that_scans_out_c_is_refused():
    rng = np.random.default_rng(1)
    model = looped_cell_model(5, 6, rng, loop="scan")
    body = model.graph.node[0].attribute[0].g
    next(n for n in body.node if n.output[0] == "y_t").input[0] = "c_out"
    report = Report()
    optimize(model, report=report)
    assert any("scans out values other than h" in f.reason for f in report.findings), report.table()


def test_stacked_scans_become_one_multi_layer_node():
    rng = np.random.default_rng(2)
    model = looped_cell_model(5, 6, rng, loop="scan", layers=3, gate_order="iofc")
    report = Report()
    out = optimize(model, report=report)
    assert report.all_rewritten and report.rules["cell_loop"].hits == 3 and report.rules["stack_lstm"].hits == 1
    [fused] = [n for n in out.graph.node if n.op_type == "FusedLSTM"]
    assert onnx.helper.get_attribute_value(next(a for a in fused.attribute if a.name == "num_layers")) == 3
    f = {"X": rng.standard_normal((6, 2, 5)).astype(np.float32),
         **{f"{s}_{k}": rng.standard_normal((2, 6)).astype(np.float32) for s in ("h0", "c0") for k in range(3)}}
    assert max_abs(run(out, f), run(model, f, fused=False)) <= 1e-5


@pytest.mark.parametrize("in_axis,out_axis", [(1, 1), (1, 0), (0, 1), (-2, -2)])
@pytest.mark.parametrize("reverse", [False, True])
def test_scan_over_axis_1(in_axis, out_axis, reverse):
    """A Scan over a batch-major sequence ([B, T, I], scan axis 1): a layout-1 FusedLSTM, its output
    transposed where the Scan stacks h' on the other axis."""
    rng = np.random.default_rng(7)
    T, B, I, H = 5, 3, 4, 6
    model = looped_cell_model(I, H, rng, loop="scan", reverse=reverse)
    scan = model.graph.node[0]
    scan.attribute.extend([onnx.helper.make_attribute("scan_input_axes", [in_axis]),
                           onnx.helper.make_attribute("scan_output_axes", [out_axis])])
    dims = lambda axis: [T, "B"] if axis % 3 == 0 else ["B", T]  # noqa: E731
    model.graph.input[0].CopyFrom(onnx.helper.make_tensor_value_info("X", onnx.TensorProto.FLOAT, [*dims(in_axis), I]))
    model.graph.output[0].CopyFrom(onnx.helper.make_tensor_value_info("Y", onnx.TensorProto.FLOAT,
                                                                      [*dims(out_axis), H]))
    report = Report()
    out = optimize(model, report=report)
    assert report.all_rewritten and report.rules["cell_loop"].hits == 1, report.table()
    assert [n.op_type for n in out.graph.node if n.op_type in ("Scan", "FusedLSTM")] == ["FusedLSTM"]
    f = feeds(rng, T=T, B=B, I=I, H=H)
    if in_axis % 3 == 1:
        f["X"] = np.ascontiguousarray(f["X"].transpose(1, 0, 2))
    assert max_abs(run(out, f), run(model, f, fused=False)) <= 1e-5


def test_loop_carrying_a_sequence_of_h_and_an_unchanged_value():
    """Loops carrying more than h and c: torch.jit.script's list of outputs (a sequence h' is
    appended to, read by ConcatFromSequence) and a value passed on unchanged."""
    from onnx import TensorProto, helper

    rng = np.random.default_rng(8)
    model = looped_cell_model(5, 6, rng, loop="loop")
    loop = next(n for n in model.graph.node if n.op_type == "Loop")
    body = loop.attribute[0].g
    body.input.extend([helper.make_tensor_sequence_value_info("seq_in", TensorProto.FLOAT, None),
                       helper.make_tensor_value_info("kept_in", TensorProto.FLOAT, [2])])
    body.node.extend([helper.make_node("SequenceInsert", ["seq_in", "h_out"], ["seq_out"]),
                      helper.make_node("Identity", ["kept_in"], ["kept_out"])])
    y_t = body.output.pop()
    body.output.extend([helper.make_tensor_sequence_value_info("seq_out", TensorProto.FLOAT, None),
                        helper.make_tensor_value_info("kept_out", TensorProto.FLOAT, [2]), y_t])
    loop.input.extend(["seq0", "kept"])
    scanned = loop.output.pop()
    loop.output.extend(["seq_T", "kept_T", scanned])
    model.graph.node.insert(0, helper.make_node("SequenceEmpty", [], ["seq0"], dtype=TensorProto.FLOAT))
    model.graph.node.append(helper.make_node("ConcatFromSequence", ["seq_T"], ["Y_list"], axis=0, new_axis=1))
    model.graph.input.append(helper.make_tensor_value_info("kept", TensorProto.FLOAT, [2]))
    model.graph.output.extend([helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in ("Y_list", "kept_T")])
    report = Report()
    out = optimize(model, report=report)
    assert report.all_rewritten and report.rules["cell_loop"].hits == 1, report.table()
    assert not [n for n in out.graph.node if n.op_type in ("Loop", "ConcatFromSequence", "SequenceEmpty")]
    f = {**feeds(rng), "kept": rng.standard_normal(2).astype(np.float32)}
    assert max_abs(run(out, f), run(model, f, fused=False)) <= 1e-5


def test_loop_carrying_a_value_it_changes_is_refused():
    from onnx import TensorProto, helper

    rng = np.random.default_rng(9)
    model = looped_cell_model(5, 6, rng, loop="loop")
    loop = next(n for n in model.graph.node if n.op_type == "Loop")
    body = loop.attribute[0].g
    body.input.append(helper.make_tensor_value_info("count_in", TensorProto.FLOAT, [1]))
    body.node.append(helper.make_node("Neg", ["count_in"], ["count_out"]))
    y_t = body.output.pop()
    body.output.extend([helper.make_tensor_value_info("count_out", TensorProto.FLOAT, [1]), y_t])
    loop.input.append("count")
    scanned = loop.output.pop()
    loop.output.extend(["count_T", scanned])
    model.graph.input.append(helper.make_tensor_value_info("count", TensorProto.FLOAT, [1]))
    report = Report()
    optimize(model, report=report)
    assert "the loop carries a value other than h, c" in report.findings[0].reason, report.table()


# tests/test_rule_opsets.py runs the rule on these at every opset from the first one given to 21.
OPSET_MODELS = {  # name: (builder(opset), first opset it can be written in)
    "scan": (lambda o: looped_cell_model(5, 6, np.random.default_rng(o), loop="scan", opset=o), 9),
    "loop": (lambda o: looped_cell_model(5, 6, np.random.default_rng(o), loop="loop", form="concat", opset=o),
             11),  # Loop's Gather of the iteration: opset 11
}
