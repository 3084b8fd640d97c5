"""Issue 36: `optimize --sequence-lens-input --check` (serving/batch/parity.py) on the machinery of the plain
--check: layout-1 twins, per-entry initial states and lengths, refusals instead of tracebacks; a
check that compared nothing fails; the low-rank error refuses values it cannot measure."""

import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from lstm_ort.builders import LstmSpec, random_layers, stock_model
from lstm_ort.cli import EXIT_INPUT, EXIT_OK, EXIT_PARITY, EXIT_USAGE, main


def _model(rng, **kw):
    spec = LstmSpec(4, 8, layout=kw.pop("layout", 0), num_layers=kw.pop("num_layers", 1))
    return stock_model(spec, random_layers(spec, rng), **kw)


def _last_step_slice(rng):
    """Y[-1] by Slice after the stack: not ragged-exact (the last padded step)."""
    model = _model(rng, outputs=("Y",), num_layers=2)
    g = model.graph
    g.node[-1].output[0] = "Y_all"
    g.initializer.extend([numpy_helper.from_array(np.array([v], np.int64), n)
                          for n, v in (("s", -1), ("e", 2**62), ("a", 0))])
    g.node.append(helper.make_node("Slice", ["Y_all", "s", "e", "a"], ["Y"]))
    return model


def _cumsum_before(rng):
    """A CumSum over time in front of the LSTM: no input reaches it per time step."""
    model = _model(rng, outputs=("Y",))
    g = model.graph
    g.input[0].name = "X_raw"
    g.initializer.append(numpy_helper.from_array(np.array(0, np.int64), "time"))
    g.node.insert(0, helper.make_node("CumSum", ["X_raw", "time"], ["X"]))
    return model


def _flatten_after(rng):
    """Transpose + Flatten after the LSTM: the output has no batch axis the analysis can follow."""
    model = _model(rng, outputs=("Y",))
    g = model.graph
    g.node[-1].output[0] = "Y_all"
    g.node.extend([helper.make_node("Transpose", ["Y_all"], ["Y_bt"], perm=[2, 0, 1, 3]),
                   helper.make_node("Flatten", ["Y_bt"], ["Y"], axis=1)])
    return model


def _invalid_graph(rng):
    """An Add of float and int64: stock onnxruntime refuses to load the model."""
    model = _model(rng, outputs=("Y", "Y_h"))
    g = model.graph
    g.initializer.append(numpy_helper.from_array(np.array([1], np.int64), "one"))
    g.node.append(helper.make_node("Add", ["Y_h", "one"], ["bad"]))
    g.output.append(helper.make_tensor_value_info("bad", TensorProto.FLOAT, None))
    return model


def _fixed(rng, param, value):
    """Dimension `param` ("T" or "B") a fixed number on every input and output."""
    model = _model(rng, initial_states=True)
    for vi in [*model.graph.input, *model.graph.output]:
        for dim in vi.type.tensor_type.shape.dim:
            if dim.dim_param == param:
                dim.dim_value = value
    return model


# case -> (model, exit code, what --check says)
CASES = {
    "layout 1": (lambda rng: _model(rng, layout=1), EXIT_OK, "each of its 3 entries run alone"),
    "initial_h/initial_c inputs": (lambda rng: _model(rng, initial_states=True, num_layers=2), EXIT_OK,
                                   "each of its 3 entries run alone"),
    "sequence_lens already": (lambda rng: _model(rng, seq_lens=True), EXIT_OK, "each of its 3 entries run alone"),
    "a fixed batch": (lambda rng: _fixed(rng, "B", 3), EXIT_OK, "each of its 3 entries run alone"),
    "a fixed time": (lambda rng: _fixed(rng, "T", 5), EXIT_OK, "the original's time dimension is fixed at 5"),
    "Slice of Y[-1]": (_last_step_slice, EXIT_OK, "entries alone not compared: not ragged-exact"),
    "CumSum before": (_cumsum_before, EXIT_OK, "no sequence input"),
    "Transpose + Flatten": (_flatten_after, EXIT_OK, "entries alone not compared: not ragged-exact"),
    "invalid graph": (_invalid_graph, EXIT_INPUT, "stock onnxruntime cannot run the original model"),
}


# Factored as for the CPU, where it pays wherever the rank saves work (for CUDA, without a batch
# size, --low-rank keeps every layer whole: tests/test_low_rank_cost.py).
LOW_RANK = ["--low-rank", "2", "--low-rank-device", "cpu"]


@pytest.mark.parametrize("low_rank", [[], LOW_RANK], ids=["plain", "low-rank"])
@pytest.mark.parametrize("case", list(CASES))
def test_ragged_check_ends_cleanly(case, low_rank, tmp_path, rng, capsys):
    build, code, says = CASES[case]
    src, dst = tmp_path / "m.onnx", tmp_path / "o.onnx"
    onnx.save(build(rng), str(src))
    got = main(["optimize", str(src), "-o", str(dst), "--sequence-lens-input", "--check", "--json", *low_rank])
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err
    doc = json.loads(captured.out)
    assert got == code, doc.get("error")
    if code == EXIT_OK:
        assert doc["check"]["passed"] and dst.is_file()
        assert says in doc["check"]["compared_with"], doc["check"]
    else:
        assert says in doc["error"] and not dst.exists() and not doc["written"]


def test_ragged_check_runs_each_entry_with_its_own_states(rng):
    """Entry b is run alone with its own initial states (random, different per entry): paired
    with another entry's, the check would fail on this correct model."""
    from lstm_ort.rewriter import optimize
    from lstm_ort.serving.batch.parity import ragged_parity
    from lstm_ort.verify import FLOAT32_TOLERANCE, random_feeds

    model = _model(rng, initial_states=True, num_layers=2)
    feeds = random_feeds(model, np.random.default_rng(0))
    assert not np.allclose(feeds["initial_h"][:, 0], feeds["initial_h"][:, 1])
    result = ragged_parity(model, optimize(model, sequence_lens_input=True), feeds, FLOAT32_TOLERANCE)
    assert result.passes(FLOAT32_TOLERANCE) and "each of its 3 entries run alone" in result.compared_with


def test_ragged_check_compares_each_entry(rng, monkeypatch):
    """The per-entry part is no formality: ours off by 1e-3 on the last step of one entry, in the
    run with distinct lengths only (the full-length run is right), fails the check."""
    from lstm_ort.rewriter import optimize
    from lstm_ort.serving.batch import parity as ragged
    from lstm_ort.verify import FLOAT32_TOLERANCE

    model = _model(rng, outputs=("Y", "Y_h"))
    optimized = optimize(model, sequence_lens_input=True)
    assert ragged.ragged_parity(model, optimized, None, FLOAT32_TOLERANCE).passes(FLOAT32_TOLERANCE)
    run = ragged.run_optimized

    def off_when_ragged(session, feeds, what=""):
        outs = run(session, feeds, what)
        lens = feeds["sequence_lens"]
        if len(set(lens.tolist())) > 1:
            outs[0][lens[1] - 1, :, 1] += 1e-3  # Y of entry 1 at its last real step
        return outs

    monkeypatch.setattr(ragged, "run_optimized", off_when_ragged)
    result = ragged.ragged_parity(model, optimized, None, FLOAT32_TOLERANCE)
    assert not result.passes(FLOAT32_TOLERANCE) and abs(result.max_abs - 1e-3) < 1e-5


def test_check_that_compared_nothing_fails(tmp_path, rng, capsys):
    """An empty batch gives empty outputs: nothing compared is not a pass (and stock onnxruntime's
    LSTM aborts the process on an empty batch, so it is never fed one)."""
    src, dst = tmp_path / "m.onnx", tmp_path / "o.onnx"
    onnx.save(_model(rng), str(src))
    for extra in ([], ["--sequence-lens-input"]):
        assert main(["optimize", str(src), "-o", str(dst), "--check", "--shape", "X=5,0,4", *extra]) == EXIT_INPUT
        err = capsys.readouterr().err
        assert "nothing to compare" in err and not dst.exists()


def test_nothing_compared_is_never_a_pass():
    from lstm_ort.verify import CheckUnavailable, Comparison, Tolerance

    comparison = Comparison(Tolerance(0.0))
    comparison.add("Y", np.zeros((0, 3), np.float32), np.zeros((0, 3), np.float32))
    with pytest.raises(CheckUnavailable, match="nothing to compare"):
        comparison.result("stock onnxruntime")


@pytest.fixture
def low_rank_model(tmp_path, rng):
    path = tmp_path / "m.onnx"
    onnx.save(_model(rng), str(path))
    return path


@pytest.mark.parametrize("value", [np.nan, np.inf])
def test_non_finite_calibration_is_refused(value, low_rank_model, tmp_path, capsys):
    cal, dst = tmp_path / "cal.npz", tmp_path / "o.onnx"
    x = np.zeros((2, 5, 3, 4), np.float32)
    x[1, 2, 0, 3] = value
    np.savez(cal, X=x)
    assert main(["optimize", str(low_rank_model), "-o", str(dst), *LOW_RANK, "--calibration", str(cal),
                 "--max-error", "0.001"]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert f"X holds {value}" in err and "[1, 2, 0, 3]" in err and not dst.exists()


def test_non_finite_error_is_refused(tmp_path, rng, capsys):
    """Finite calibration values the model overflows on: no error figure can be measured there."""
    spec = LstmSpec(4, 8, activations=["Sigmoid", "Relu", "Relu"])
    src, dst, cal = tmp_path / "m.onnx", tmp_path / "o.onnx", tmp_path / "cal.npz"
    onnx.save(stock_model(spec, random_layers(spec, rng)), str(src))
    np.savez(cal, X=np.full((1, 5, 3, 4), 3e38, np.float32))
    assert main(["optimize", str(src), "-o", str(dst), *LOW_RANK, "--calibration", str(cal)]) == EXIT_PARITY
    err = capsys.readouterr().err
    assert "not finite" in err and "nothing written" in err and not dst.exists()


@pytest.mark.parametrize("array,words", [
    (np.zeros((2, 5, 3, 5), np.float32), "X has shape [2, 5, 3, 5]"),
    (np.zeros((2, 5, 3, 4), np.complex64), "complex64"),
    (np.full((2, 5, 3, 4), 1e300), "does not fit float32"),
], ids=["width", "complex", "float64 beyond float32"])
def test_calibration_that_cannot_feed_the_model_is_a_usage_error(array, words, low_rank_model, tmp_path, capsys):
    cal, dst = tmp_path / "cal.npz", tmp_path / "o.onnx"
    np.savez(cal, X=array)
    assert main(["optimize", str(low_rank_model), "-o", str(dst), *LOW_RANK, "--calibration",
                 str(cal)]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert words in err and "Traceback" not in err and not dst.exists()


def test_calibration_converted_where_exact(low_rank_model, tmp_path, rng, capsys):
    """float64 within float32's range and whole numbers feed a float32 model as they are."""
    cal, dst = tmp_path / "cal.npz", tmp_path / "o.onnx"
    np.savez(cal, X=rng.standard_normal((2, 5, 3, 4)))
    assert main(["optimize", str(low_rank_model), "-o", str(dst), *LOW_RANK, "--calibration",
                 str(cal)]) == EXIT_OK
    np.savez(cal, X=rng.integers(-3, 3, (2, 5, 3, 4)))
    assert main(["optimize", str(low_rank_model), "-o", str(dst), *LOW_RANK, "--calibration",
                 str(cal)]) == EXIT_OK


# ---- real shapes: the corpus entries built here (no download) ----

@pytest.mark.parametrize("name,says", [
    ("paddle weight chain, -1 dims", "each of its 3 entries run alone"),
    ("tf2onnx Keras LSTM with Transpose glue", "each of its 2 entries run alone"),  # states through Unsqueeze
    ("cell in a scan, ifco gates, gemm", "each of its 4 entries run alone"),  # states found in the optimized model
    ("cell in a loop, ifco gates, concat", "each of its 4 entries run alone"),
    ("cell in a scan x3 stacked, iofc gates, matmul", "where input h0_0 holds the batch entries is unknown"),
    ("g2p_id decoder (tf2onnx)", "not ragged-exact"),
])
def test_ragged_check_on_corpus_models(name, says, corpus, tmp_path, capsys):
    entry = next(e for e in corpus.ENTRIES if e.name == name)
    try:
        model = entry.build()
    except corpus.Unavailable as e:
        pytest.skip(str(e))
    src, dst = tmp_path / "m.onnx", tmp_path / "o.onnx"
    onnx.save(model, str(src))
    shapes = [a for k, v in entry.shapes.items() for a in ("--shape", f"{k}={','.join(map(str, v))}")]
    assert main(["optimize", str(src), "-o", str(dst), "--sequence-lens-input", "--check", "--json", *shapes]) == EXIT_OK
    doc = json.loads(capsys.readouterr().out)
    assert doc["check"]["passed"] and says in doc["check"]["compared_with"], doc["check"]
