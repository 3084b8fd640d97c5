"""`lstm-ort batch` and `lstm-ort optimize --sequence-lens-input`: files in and out, stats, exit codes."""

import json

import numpy as np
import onnx
import pytest

from lstm_ort.builders import LstmSpec, random_layers, stock_model
from lstm_ort.cli import main


@pytest.fixture
def models(tmp_path, rng):
    spec = LstmSpec(4, 6, num_layers=2, direction="bidirectional")
    onnx.save(stock_model(spec, random_layers(spec, rng)), tmp_path / "m.onnx")
    assert main(["optimize", str(tmp_path / "m.onnx"), "-o", str(tmp_path / "o.onnx"), "--sequence-lens-input",
                 "--check", "--json"]) == 0
    return tmp_path / "m.onnx", tmp_path / "o.onnx"


def test_npz_round_trip_and_json(models, tmp_path, rng, capsys):
    _, opt = models
    seqs = {f"s{k}": rng.standard_normal((n, 4)).astype(np.float32) for k, n in enumerate([3, 9, 1, 0, 5])}
    np.savez(tmp_path / "in.npz", **seqs)
    capsys.readouterr()
    assert main(["batch", str(opt), str(tmp_path / "in.npz"), "-o", str(tmp_path / "out.npz"), "--json",
                 "--no-progress", "--buckets", "2,6", "--outputs", "Y"]) == 0
    stats = json.loads(capsys.readouterr().out)
    assert stats["sequences"] == 5 and stats["real_tokens"] == 18 and stats["boundaries"] == [2, 6, 9]
    with np.load(tmp_path / "out.npz") as out:
        assert sorted(out.files) == sorted(seqs) and out["s1"].shape == (9, 2, 6) and out["s3"].shape == (0, 2, 6)
    assert main(["batch", str(opt), str(tmp_path / "in.npz"), "-o", str(tmp_path / "all.npz")]) == 0
    assert "bucket <=" in capsys.readouterr().out
    with np.load(tmp_path / "all.npz") as out:
        assert out["s0/Y_h"].shape == (4, 6)


def test_parquet_round_trip(models, tmp_path, rng):
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    _, opt = models
    seqs = [rng.standard_normal((n, 4)).astype(np.float32) for n in (2, 5, 1)]
    pq.write_table(pa.table({"id": [7, 8, 9], "x": pa.array([s.tolist() for s in seqs], pa.list_(pa.list_(pa.float32())))}),
                   tmp_path / "in.parquet")
    assert main(["batch", str(opt), str(tmp_path / "in.parquet"), "-o", str(tmp_path / "out.parquet"),
                 "--no-progress", "--max-batch-tokens", "8"]) == 0
    table = pq.read_table(tmp_path / "out.parquet")
    assert table.column("id").to_pylist() == [7, 8, 9]
    assert [len(y) for y in table.column("Y").to_pylist()] == [2, 5, 1]
    assert len(table.column("Y_h").to_pylist()[0]) == 4 * 6


def test_errors_are_messages_with_exit_codes(models, tmp_path, capsys):
    stock, opt = models
    np.savez(tmp_path / "in.npz", a=np.zeros((3, 4), np.float32))
    (tmp_path / "bad.npz").write_bytes(b"not a zip")
    cases = [
        (["batch", str(opt), str(tmp_path / "nope.npz"), "-o", str(tmp_path / "o.npz")], 1, "no such file"),
        (["batch", str(opt), str(tmp_path / "bad.npz"), "-o", str(tmp_path / "o.npz")], 1, "not a readable .npz"),
        (["batch", str(tmp_path / "none.onnx"), str(tmp_path / "in.npz"), "-o", str(tmp_path / "o.npz")], 1, "no such file"),
        (["batch", str(opt), str(tmp_path / "in.npz"), "-o", str(tmp_path / "o.txt")], 2, "expected a .npz or .parquet"),
        (["batch", str(opt), str(tmp_path / "in.npz"), "-o", str(tmp_path / "o.npz"), "--buckets", "x"], 2, "--buckets"),
        (["batch", str(stock), str(tmp_path / "in.npz"), "-o", str(tmp_path / "o.npz")], 2, "not ragged-exact"),
    ]
    for argv, code, words in cases:
        capsys.readouterr()
        assert main(argv) == code, argv
        err = capsys.readouterr().err
        assert words in err and "Traceback" not in err
    np.savez(tmp_path / "wide.npz", a=np.zeros((3, 5), np.float32))
    assert main(["batch", str(opt), str(tmp_path / "wide.npz"), "-o", str(tmp_path / "o.npz"), "--no-progress"]) == 1
    assert "sequence 'a': shape" in capsys.readouterr().err
