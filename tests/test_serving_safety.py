"""Issue 36: `lstm-ort batch` and the serving API keep optimize's promises: never over the input,
files written whole with the umask's mode or not at all (errors, SIGINT, SIGTERM), values
converted only where exact, clear errors and the documented exit codes."""

import os
import signal
import textwrap

import numpy as np
import onnx
import pytest

from lstm_ort.builders import LstmSpec, random_layers, stock_model
from lstm_ort.cli import EXIT_INPUT, EXIT_OK, EXIT_USAGE, main
from lstm_ort.rewriter import optimize
from lstm_ort.testing import child_when_ready


@pytest.fixture
def model(tmp_path, rng):
    spec = LstmSpec(4, 8)
    path = tmp_path / "m.opt.onnx"
    onnx.save(optimize(stock_model(spec, random_layers(spec, rng)), sequence_lens_input=True), str(path))
    return path


@pytest.fixture
def seqs(rng):
    return {name: rng.standard_normal((n, 4)).astype(np.float32) for name, n in (("a", 3), ("b", 5), ("c", 1))}


def _save(path, seqs):
    if path.suffix == ".npz":
        np.savez(path, **seqs)
    else:
        pa, pq = pytest.importorskip("pyarrow"), pytest.importorskip("pyarrow.parquet")
        pq.write_table(pa.table({"x": pa.array([s.tolist() for s in seqs.values()],
                                               pa.list_(pa.list_(pa.float32())))}), path)
    return path


def _leftovers(folder):
    return sorted(p.name for p in folder.iterdir() if p.name.startswith(".") or ".tmp" in p.name)


# --- data loss: -o naming the input ------------------------------------------------------------

@pytest.mark.parametrize("suffix", [".npz", ".parquet"])
@pytest.mark.parametrize("spelling", ["same", "dot", "dotdot", "symlink"])
def test_batch_output_naming_its_input_is_refused(spelling, suffix, model, seqs, tmp_path, capsys):
    src = _save(tmp_path / f"in{suffix}", seqs)
    before = src.read_bytes()
    (tmp_path / "sub").mkdir()
    output = {"same": str(src), "dot": f"./{src.name}", "dotdot": str(tmp_path / "sub" / ".." / src.name),
              "symlink": str(tmp_path / f"link{suffix}")}[spelling]
    if spelling == "symlink":
        os.symlink(src, output)
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        assert main(["batch", str(model), str(src), "-o", output, "--no-progress"]) == EXIT_USAGE
    finally:
        os.chdir(cwd)
    err = capsys.readouterr().err
    assert "is the input" in err and "Traceback" not in err
    assert src.read_bytes() == before and not _leftovers(tmp_path)


def test_batch_output_naming_the_model_is_refused(model, seqs, tmp_path, capsys):
    renamed = tmp_path / "model.npz"  # onnxruntime reads a model whatever its name
    renamed.write_bytes(model.read_bytes())
    src = _save(tmp_path / "in.npz", seqs)
    assert main(["batch", str(renamed), str(src), "-o", str(renamed), "--no-progress"]) == EXIT_USAGE
    assert "is the model" in capsys.readouterr().err
    assert renamed.read_bytes() == model.read_bytes()


# --- files: mode, failures, signals -----------------------------------------------------------

@pytest.mark.parametrize("suffix", [".npz", ".parquet"])
@pytest.mark.parametrize("umask,mode", [(0o022, 0o644), (0o077, 0o600), (0o002, 0o664)])
def test_batch_outputs_follow_the_umask(umask, mode, suffix, model, seqs, tmp_path):
    src = _save(tmp_path / f"in{suffix}", seqs)
    dst = tmp_path / f"out{suffix}"
    old = os.umask(umask)
    try:
        assert main(["batch", str(model), str(src), "-o", str(dst), "--no-progress"]) == EXIT_OK
    finally:
        os.umask(old)
    assert oct(dst.stat().st_mode & 0o777) == oct(mode)


def test_batch_failed_write_leaves_nothing(model, seqs, tmp_path, monkeypatch, capsys):
    src = _save(tmp_path / "in.npz", seqs)
    out = tmp_path / "out"
    out.mkdir()

    def half_then_full(path, **arrays):
        with open(path, "wb") as f:
            f.write(b"\0" * 4096)
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(np, "savez", half_then_full)
    assert main(["batch", str(model), str(src), "-o", str(out / "o.npz"), "--no-progress"]) == EXIT_INPUT
    assert "No space left on device" in capsys.readouterr().err
    assert list(out.iterdir()) == []


_SLOW = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    import numpy as np
    import lstm_ort.serving.batch.batcher as batcher
    from lstm_ort.cli import main
    ready, phase = Path(sys.argv[1]), sys.argv[2]
    if phase == "run":
        def slow_run(self, *a, **k):
            ready.write_text("running")
            time.sleep(60)
        batcher.BucketingBatcher.run = slow_run
    else:
        def slow_savez(path, **arrays):
            with open(path, "wb") as f:
                f.write(b"\\0" * (1 << 20))
                f.flush()
                ready.write_text("writing")
                time.sleep(60)
        np.savez = slow_savez
    sys.exit(main(sys.argv[3:]))
""")


@pytest.mark.parametrize("signum,code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)], ids=["SIGINT", "SIGTERM"])
@pytest.mark.parametrize("phase", ["run", "write"])
def test_batch_signal_ends_cleanly(signum, code, phase, model, seqs, tmp_path):
    src = _save(tmp_path / "in.npz", seqs)
    out, ready = tmp_path / "out", tmp_path / "ready"
    out.mkdir()
    proc = child_when_ready(_SLOW, str(ready), phase, "batch", str(model), str(src), "-o", str(out / "o.npz"),
                            "--no-progress", ready=ready, cwd=tmp_path)
    if phase == "write":
        assert _leftovers(out)  # the partial file is there, in its private folder
    proc.send_signal(signum)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == code, err
    assert "Traceback" not in err
    said = [line for line in err.splitlines() if line.startswith("lstm-ort:")]
    assert len(said) == 1 and ("interrupted" if signum == signal.SIGINT else "terminated") in said[0], err
    assert list(out.iterdir()) == [], "a partial output was left"


# --- values converted only where exact --------------------------------------------------------

@pytest.mark.parametrize("bad,words", [
    (np.full((5, 4), 1 + 2j, np.complex64), "complex64"),
    (np.full((5, 4), 1e39), "value 1e+39 at [0, 0] does not fit float32"),
    (np.full((5, 4), 2**40 + 1, np.int64), "value 1099511627777 at [0, 0] does not fit float32"),
], ids=["complex", "float64 beyond float32", "int64 not representable"])
def test_batch_refuses_values_it_cannot_convert_exactly(bad, words, model, seqs, tmp_path, capsys):
    src = tmp_path / "in.npz"
    np.savez(src, **dict(seqs, b=bad))
    dst = tmp_path / "o.npz"
    assert main(["batch", str(model), str(src), "-o", str(dst), "--no-progress"]) == EXIT_INPUT
    err = capsys.readouterr().err
    assert "sequence 'b'" in err and words in err and "Traceback" not in err and not dst.exists()


def test_batch_converts_exact_values(model, seqs, tmp_path, rng):
    """float64 within float32's range, and integers float32 holds exactly, feed the model as if
    they had been float32."""
    ints = {k: rng.integers(-4, 4, v.shape) for k, v in seqs.items()}
    for name, given, want in (("f64", {k: v.astype(np.float64) for k, v in seqs.items()}, seqs),
                              ("int", ints, {k: v.astype(np.float32) for k, v in ints.items()})):
        np.savez(tmp_path / f"{name}.npz", **given)
        np.savez(tmp_path / f"{name}_f32.npz", **want)
        for src in (name, f"{name}_f32"):
            assert main(["batch", str(model), str(tmp_path / f"{src}.npz"), "-o", str(tmp_path / f"{src}.out.npz"),
                         "--no-progress"]) == EXIT_OK
        with np.load(tmp_path / f"{name}.out.npz") as got, np.load(tmp_path / f"{name}_f32.out.npz") as want_out:
            assert sorted(got.files) == sorted(want_out.files)
            for key in got.files:
                np.testing.assert_array_equal(got[key], want_out[key])


def test_batcher_names_the_sequence_that_cannot_convert(model, seqs):
    from lstm_ort.serving import BucketingBatcher, SequenceError

    with pytest.raises(SequenceError, match="sequence 1: complex64 values"):
        BucketingBatcher(str(model)).run([seqs["a"], seqs["b"] * 1j])


@pytest.mark.parametrize("where", ["feature", "step"])
def test_parquet_null_inside_a_sequence_is_refused(where, model, tmp_path, capsys):
    pa, pq = pytest.importorskip("pyarrow"), pytest.importorskip("pyarrow.parquet")
    rows = [[[0.1, 0.2, 0.3, 0.4]] * 2, [[0.5, 0.6, 0.7, 0.8]] * 3]
    rows[1] = [list(r) for r in rows[1]]
    if where == "feature":
        rows[1][2][1] = None
    else:
        rows[1][1] = None
    src = tmp_path / "in.parquet"
    pq.write_table(pa.table({"x": pa.array(rows, pa.list_(pa.list_(pa.float32())))}), src)
    assert main(["batch", str(model), str(src), "-o", str(tmp_path / "o.parquet"), "--no-progress"]) == EXIT_INPUT
    err = capsys.readouterr().err
    step = 2 if where == "feature" else 1
    assert f"sequence 1 holds a null at step {step}" in err and "Traceback" not in err
    assert not (tmp_path / "o.parquet").exists()


def test_run_with_no_output_names_is_a_clear_error(model, seqs):
    from lstm_ort.serving import BucketingBatcher

    with pytest.raises(ValueError, match="output_names is empty"):
        BucketingBatcher(str(model)).run(list(seqs.values()), output_names=[])


@pytest.mark.parametrize("values,dtype,fits", [
    ([[0, 1], [2, -3]], np.float32, True), ([2**24 + 1], np.float32, False), ([2.0, -7.0], np.int64, True),
    ([2.5], np.int64, False), ([np.nan], np.int64, False), ([np.inf], np.int32, False), ([1e300], np.float32, False),
    ([np.nan, np.inf, 1e-300], np.float32, True), ([70000.0], np.float16, False), ([1, 0], np.bool_, True),
    ([2], np.bool_, False), ([300], np.uint8, False), ([-1], np.uint8, False), ([1 + 0j], np.float32, False),
    (["1"], np.float32, False)])
def test_cast_exactly(values, dtype, fits):
    from lstm_ort.verify import cast_exactly

    a = np.array(values)
    if fits:
        got = cast_exactly(a, dtype)
        assert got.dtype == dtype and np.array_equal(got, a.astype(dtype), equal_nan=a.dtype.kind == "f")
    else:
        with pytest.raises(ValueError, match="do not convert|does not fit"):
            cast_exactly(a, dtype)


# --- exit codes -------------------------------------------------------------------------------

@pytest.mark.parametrize("args,words", [
    (["--outputs", "nope"], "--outputs: no model output 'nope' (outputs: Y, Y_h, Y_c)"),
    (["--outputs", ","], "--outputs names no output"),
    (["--providers", "bogus"], "--providers: unknown execution provider 'bogus'"),
    (["--providers", "cpu,bogus"], "unknown execution provider 'bogus'"),
])
def test_bad_options_are_usage_errors(args, words, model, seqs, tmp_path, capsys):
    src = _save(tmp_path / "in.npz", seqs)
    assert main(["batch", str(model), str(src), "-o", str(tmp_path / "o.npz"), "--no-progress", *args]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert words in err and str(src) not in err and not (tmp_path / "o.npz").exists()


def test_providers_are_validated_against_onnxruntime(model):
    import onnxruntime as ort

    from lstm_ort.serving import BucketingBatcher

    with pytest.raises(ValueError, match="available here: " + ", ".join(ort.get_available_providers())):
        BucketingBatcher(str(model), providers=["bogus"])
    missing = [p for p in ort.get_all_providers() if p not in ort.get_available_providers()]
    with pytest.raises(ValueError, match="not available in this onnxruntime"):
        BucketingBatcher(str(model), providers=[missing[0]])
    assert BucketingBatcher(str(model), providers=[missing[0], "cpu"]).session.get_providers() == \
        ["CPUExecutionProvider"]


def test_available_and_unavailable_providers_note_the_fallback(model, seqs, tmp_path, capsys):
    import onnxruntime as ort

    missing = next(p for p in ort.get_all_providers() if p not in ort.get_available_providers())
    src = _save(tmp_path / "in.npz", seqs)
    assert main(["batch", str(model), str(src), "-o", str(tmp_path / "o.npz"), "--no-progress", "--providers",
                 f"{missing},cpu"]) == EXIT_OK
    assert f"{missing} is not available here" in capsys.readouterr().err


# --- Ray: output columns as the CLI names them --------------------------------------------------

def test_ray_predictor_renames_clashing_output_columns(model, seqs, tmp_path):
    pytest.importorskip("ray", reason="Ray is not installed (pip install 'lstm-ort[serving]')")
    pa, pq = pytest.importorskip("pyarrow"), pytest.importorskip("pyarrow.parquet")
    from lstm_ort.serving.batch.ray import LstmOrtPredictor

    table = pa.table({"x": pa.array([s.tolist() for s in seqs.values()], pa.list_(pa.list_(pa.float32()))),
                      "Y": ["kept", "as", "is"]})
    out = LstmOrtPredictor(str(model), "x", output_names=["Y", "Y_h"])(table)
    assert out.column_names == ["x", "Y", "Y_out", "Y_h"]
    assert out.column("Y").to_pylist() == ["kept", "as", "is"]
    pq.write_table(table, tmp_path / "in.parquet")
    assert main(["batch", str(model), str(tmp_path / "in.parquet"), "-o", str(tmp_path / "o.parquet"),
                 "--no-progress", "--outputs", "Y,Y_h", "--column", "x"]) == EXIT_OK
    cli = pq.read_table(tmp_path / "o.parquet")
    assert cli.column_names == out.column_names
    assert cli.column("Y_out").to_pylist() == out.column("Y_out").to_pylist()
