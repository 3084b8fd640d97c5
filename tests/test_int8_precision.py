"""optimize --precision int8: float32 weights become int8 per output channel, with onnxruntime's
DynamicQuantizeLSTM arithmetic, and the error this costs is measured and bounded as for
--low-rank (rewriter/int8_weights.py)."""

import json

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


# --- issue 45 row 12: int8's own words, never NumPy's warnings or low rank's --------------------

def _with_weight(model, name: str, value: float, at: int = 3):
    out = onnx.ModelProto()
    out.CopyFrom(model)
    for i, t in enumerate(out.graph.initializer):
        if t.name == name:
            a = onnx.numpy_helper.to_array(t).copy()
            a.flat[at] = value
            out.graph.initializer[i].CopyFrom(onnx.numpy_helper.from_array(a, name))
    return out


@pytest.mark.parametrize("weight", ["l0_W", "l1_R"])
@pytest.mark.parametrize("value", [np.inf, -np.inf, np.nan])
def test_a_weight_int8_cannot_hold_leaves_the_node_float(tmp_path, capfd, weight, value):
    src, dst = tmp_path / "w.onnx", tmp_path / "o.onnx"
    onnx.save(_with_weight(_model(seq_lens=False), weight, value), src)
    assert main(["optimize", str(src), "-o", str(dst), "--precision", "int8"]) == EXIT_OK
    out, err = capfd.readouterr()
    part, layer = weight[-1], weight[1]
    assert f"left float: {part} of layer {layer} holds {value}, which int8 levels cannot hold" in out
    assert "RuntimeWarning" not in err and "low-rank" not in out + err and "factored" not in out + err
    assert _fused_node(onnx.load(dst)).input[1].endswith("W")  # the float weights, kept


def test_int8_not_finite_error_speaks_of_int8():
    from lstm_ort import low_rank_error
    from lstm_ort.low_rank_error import ErrorNotMeasured

    spec = LstmSpec(input_size=4, hidden_size=5)
    float_model = optimize(stock_model(spec, random_layers(spec, np.random.default_rng(0))))
    broken = _with_weight(float_model, _fused_node(float_model).input[1], np.nan, at=0)
    samples, _ = low_rank_error.samples_for(float_model)
    with pytest.raises(ErrorNotMeasured, match=r"^int8 error: not finite on output \S+: the int8 model's output "
                                               r"holds nan on sample 0 where the float model's is finite$"):
        low_rank_error.measure(float_model, broken, samples, changed=lambda *_: False, what="int8")


def test_check_says_what_int8_does(tmp_path, capsys):
    src = tmp_path / "m.onnx"
    onnx.save(_model(), src)
    assert main(["check", str(src), "--precision", "int8"]) == EXIT_OK
    out = capsys.readouterr().out
    assert "--precision int8: optimize makes the float32 weights of each rewritten node int8 per output channel" in out
    assert main(["check", str(src), "--precision", "int8", "--json"]) == EXIT_OK
    assert json.loads(capsys.readouterr().out)["int8"].startswith("--precision int8: optimize makes")
