"""optimize --precision int8: float32 weights become int8 per output channel, with onnxruntime's
DynamicQuantizeLSTM arithmetic, and the error this costs is measured and bounded as for
--low-rank (rewriter/int8_weights.py)."""

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from lstm_ort.builders import LstmSpec, dynamic_quantize_model, random_layers, stock_model
from lstm_ort.cli import EXIT_OK, EXIT_PARITY, EXIT_USAGE, main
from lstm_ort.ops.packing import PackedWeights, unpack_int8_layers
from lstm_ort.rewriter import Report, optimize
from lstm_ort.rewriter.int8_weights import quantize_rows
from lstm_ort.rewriter.low_rank import ErrorBoundExceeded
from lstm_ort.runtime.session import InferenceSession
from lstm_ort.testing import make_feeds, max_abs

CPU = ["CPUExecutionProvider"]
SPEC = LstmSpec(input_size=37, hidden_size=45, num_layers=2, direction="bidirectional")


def _model(seed=0, seq_lens=True):
    return stock_model(SPEC, random_layers(SPEC, np.random.default_rng(seed)), seq_lens=seq_lens)


def _fused_node(model):
    (node,) = [n for n in model.graph.node if n.domain == "lstm_ort"]
    return node


def _initializer(model, name):
    return onnx.numpy_helper.to_array([i for i in model.graph.initializer if i.name == name][0])


def test_rows_take_their_own_scale():
    w = np.array([[0.5, -1.0, 0.25], [0.0, 0.0, 0.0], [2.0, 1.0, -0.01]], np.float32)
    levels, scale = quantize_rows(w)
    assert scale.tolist() == pytest.approx([1 / 127, 1.0, 2 / 127])
    assert levels.tolist() == [[64, -127, 32], [0, 0, 0], [127, 64, -1]]


def test_int8_nodes_are_stocks_dynamic_quantize_lstm_on_their_weights():
    """The quantized node computes what stock's DynamicQuantizeLSTM computes on the same int8 weights
    and per-channel scales (one thread), within the figures the report gives against float."""
    report = Report()
    model = _model()
    out = optimize(model, precision="int8", report=report)
    node = _fused_node(out)
    assert _initializer(out, node.input[1]).dtype == np.int8 and node.input[8]
    assert not [a for a in node.attribute if a.name == "precision"]
    assert [f.precision for f in report.findings] == ["int8"]
    assert report.int8.quantized[0].blocks == 4 and report.int8.quantized[0].weight_error < 0.01
    (Y,) = [f for f in report.int8.outputs if f.name == "Y"]
    assert 0 < Y.max_abs < 0.02 and report.int8.nodes

    packed = PackedWeights(_initializer(out, node.input[1]), _initializer(out, node.input[2]), None,
                           scales=_initializer(out, node.input[8]))
    layers = unpack_int8_layers(packed, 2, 2, SPEC.input_size, SPEC.hidden_size)
    stock = dynamic_quantize_model(SPEC, layers, per_channel=True, seq_lens=True)
    feeds = make_feeds(SPEC, 8, 3, np.random.default_rng(1), seq_lens=True)
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    ref = ort.InferenceSession(stock.SerializeToString(), options, providers=CPU).run(None, feeds)
    ours = InferenceSession(out.SerializeToString(), providers=CPU).run(None, feeds)
    assert max_abs(ours, ref) <= 1e-5
    float_ref = ort.InferenceSession(model.SerializeToString(), providers=CPU).run(None, feeds)
    assert max_abs(ours, float_ref) < 0.05


def test_an_error_beyond_max_error_refuses():
    with pytest.raises(ErrorBoundExceeded, match="int8 error: max-abs"):
        optimize(_model(), precision="int8", max_error=1e-6)


def test_float16_and_factored_nodes_stay_float_with_the_reason():
    report = Report()
    optimize(stock_model(SPEC, random_layers(SPEC, np.random.default_rng(2)), np.float16), precision="int8",
             report=report)
    assert not report.int8.quantized and "W is not a float32 constant" in report.int8.skipped[0]
    with pytest.raises(ValueError, match="choose one"):
        optimize(_model(), precision="int8", low_rank=4)


def test_cli_measures_on_calibration_and_refuses_beyond_max_error(tmp_path):
    src, dst = tmp_path / "in.onnx", tmp_path / "out.onnx"
    onnx.save(_model(seq_lens=False), src)
    cal = tmp_path / "cal.npz"
    np.savez(cal, X=np.random.default_rng(3).standard_normal((2, 6, 4, SPEC.input_size)).astype(np.float32))
    assert main(["optimize", str(src), "-o", str(dst), "--precision", "int8", "--check", "--calibration", str(cal),
                 "--shape", "X=6,4,37"]) == EXIT_OK
    assert _initializer(onnx.load(dst), _fused_node(onnx.load(dst)).input[1]).dtype == np.int8
    dst.unlink()
    assert main(["optimize", str(src), "-o", str(dst), "--precision", "int8", "--max-error", "1e-7"]) == EXIT_PARITY
    assert not dst.exists()
    assert main(["optimize", str(src), "-o", str(dst), "--precision", "int8", "--low-rank", "4"]) == EXIT_USAGE
    assert main(["optimize", str(src), "-o", str(dst), "--max-error", "0.1"]) == EXIT_USAGE
