"""dynamic_quantize_lstm: onnxruntime's DynamicQuantizeLSTM becomes a FusedLSTM with int8 weights
(stacks one node), with stock's results on one thread; what stock rejects, or int8 cannot hold,
is left with the reason."""

import tempfile
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from lstm_ort.builders import LstmSpec, dynamic_quantize_model, random_int8_layers, random_layers, stock_model
from lstm_ort.ops.reference import FusedLSTM
from lstm_ort.rewriter import Report, optimize
from lstm_ort.runtime.session import InferenceSession
from lstm_ort.testing import make_feeds, max_abs

CPU = ["CPUExecutionProvider"]


def _stock(model, feeds):
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1  # the semantics FusedLSTM's int8 weights follow
    return ort.InferenceSession(model.SerializeToString(), options, providers=CPU).run(None, feeds)


def _ours(model, feeds):
    return InferenceSession(model.SerializeToString(), providers=CPU).run(None, feeds)


def _fused(model):
    return [n for n in model.graph.node if n.domain == "lstm_ort"]


@pytest.mark.parametrize("layers", [1, 2])
@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
def test_quantize_dynamic_output_is_one_node_with_stocks_results(direction, layers):
    from onnxruntime.quantization import QuantType, quantize_dynamic

    rng = np.random.default_rng(layers)
    spec = LstmSpec(input_size=13, hidden_size=19, num_layers=layers, direction=direction)
    with tempfile.TemporaryDirectory() as tmp:
        quantize_dynamic(stock_model(spec, random_layers(spec, rng), seq_lens=True), Path(tmp) / "q.onnx",
                         weight_type=QuantType.QInt8)
        model = onnx.load(str(Path(tmp) / "q.onnx"))
    report = Report()
    out = optimize(model, report=report)
    assert report.all_rewritten and report.lstm_count == layers, report.table()
    assert report.rules["dynamic_quantize_lstm"].hits == layers
    assert {f.precision for f in report.findings} == {"int8"}
    (node,) = _fused(out)
    assert not [n for n in out.graph.node if n.op_type == "DynamicQuantizeLSTM"]
    assert {a.name: helper.get_attribute_value(a) for a in node.attribute}.get("num_layers", 1) == layers
    feeds = make_feeds(spec, 7, 4, rng, seq_lens=True)
    assert max_abs(_ours(out, feeds), _stock(model, feeds)) <= 1e-5


@pytest.mark.parametrize("per_channel", [False, True])
@pytest.mark.parametrize("uint8_zero_point", [None, 128])
def test_every_weight_form_has_stocks_results(per_channel, uint8_zero_point):
    """Per-tensor and per-channel scales, int8 and uint8 (zero point 128) weights, with peepholes,
    clip, ragged lengths and initial states; the reference op agrees too."""
    rng = np.random.default_rng(3)
    spec = LstmSpec(input_size=13, hidden_size=20, num_layers=2, direction="bidirectional", clip=3.0, peepholes=True)
    model = dynamic_quantize_model(spec, random_int8_layers(spec, rng, per_channel=per_channel), seq_lens=True,
                                   initial_states=True, per_channel=per_channel, uint8_zero_point=uint8_zero_point)
    report = Report()
    out = optimize(model, report=report)
    assert report.all_rewritten and len(_fused(out)) == 1, report.table()
    feeds = make_feeds(spec, 9, 5, rng, seq_lens=True, initial_states=True)
    ours = _ours(out, feeds)
    assert max_abs(ours, _stock(model, feeds)) <= 1e-5
    assert max_abs(ours, ReferenceEvaluator(out, new_ops=[FusedLSTM]).run(None, feeds)) <= 1e-5


def _one_node(uint8_zero_point=None, per_channel=False):
    spec = LstmSpec(input_size=5, hidden_size=6)
    return dynamic_quantize_model(spec, random_int8_layers(spec, np.random.default_rng(0)), per_channel=per_channel,
                                  uint8_zero_point=uint8_zero_point)


def _replace_initializer(model, name, array):
    (init,) = [i for i in model.graph.initializer if i.name == name]
    init.CopyFrom(numpy_helper.from_array(array, name))


def _refusal(model):
    report = Report()
    out = optimize(model, report=report)
    (finding,) = report.findings
    assert not finding.rewritten
    assert [n.op_type for n in out.graph.node if n.op_type == "DynamicQuantizeLSTM"] == ["DynamicQuantizeLSTM"]
    return finding.reason


def test_uint8_weights_beyond_int8_are_left_with_the_reason():
    model = _one_node(uint8_zero_point=128)
    w = numpy_helper.to_array([i for i in model.graph.initializer if i.name == "l0_W_quantized"][0]).copy()
    w.flat[0] = 0  # 0 - 128 fits; the zero point 10 below leaves 250 - 10 = 240, beyond int8
    w.flat[1] = 250
    _replace_initializer(model, "l0_W_quantized", w)
    _replace_initializer(model, "l0_W_zero_point", np.full(1, 10, np.uint8))
    assert "beyond int8" in _refusal(model)


def test_per_channel_int8_zero_points_stock_rejects_are_left():
    model = _one_node(per_channel=True)
    zp = np.zeros((1, 24), np.int8)
    zp[0, 3] = 1
    _replace_initializer(model, "l0_W_zero_point", zp)
    assert "stock rejects this node too" in _refusal(model)


def test_weights_fed_at_run_time_are_left_with_the_reason():
    model = _one_node()
    init = [i for i in model.graph.initializer if i.name == "l0_R_quantized"][0]
    model.graph.initializer.remove(init)
    model.graph.input.append(helper.make_tensor_value_info("l0_R_quantized", onnx.TensorProto.INT8, [1, 6, 24]))
    assert "weight R (l0_R_quantized) is not a constant" in _refusal(model)


def test_zero_initial_states_of_stocks_shape_are_dropped():
    spec = LstmSpec(input_size=5, hidden_size=6)
    model = dynamic_quantize_model(spec, random_int8_layers(spec, np.random.default_rng(1)))
    node = [n for n in model.graph.node if n.op_type == "DynamicQuantizeLSTM"][0]
    zeros = numpy_helper.from_array(np.zeros((1, 2, 6), np.float32), "zero_state")
    model.graph.initializer.append(zeros)
    node.input[5] = node.input[6] = "zero_state"
    model.graph.input[0].type.tensor_type.shape.dim[1].dim_value = 2  # X [T, 2, 5]: the states' batch
    out = optimize(model)
    (fused,) = _fused(out)
    assert len(fused.input) < 5 or not any(fused.input[4:6])
    feeds = {"X": np.random.default_rng(2).standard_normal((4, 2, 5)).astype(np.float32)}
    assert max_abs(_ours(out, feeds), _stock(model, feeds)) <= 1e-5


# tests/test_rule_opsets.py: the rule writes no default-domain node of its own (its input is a
# com.microsoft node), so there is nothing to hold to each opset.
OPSET_MODELS = {}
