"""The lstm-ort command line: optimize with --check, check, --json, and its refusals."""

import json
import subprocess
import sys

import numpy as np
import onnx
import pytest

from lstm_ort.builders import LstmSpec, random_layers, stock_model
from lstm_ort.cli import EXIT_INPUT, EXIT_OK, EXIT_USAGE, main


@pytest.fixture
def model_path(tmp_path):
    spec = LstmSpec(input_size=4, hidden_size=5, num_layers=2, direction="bidirectional")
    path = tmp_path / "m.onnx"
    onnx.save(stock_model(spec, random_layers(spec, np.random.default_rng(0))), str(path))
    return path


def test_optimize_with_check_writes(model_path, tmp_path, capsys):
    out = tmp_path / "out.onnx"
    assert main(["optimize", str(model_path), "-o", str(out), "--check"]) == EXIT_OK
    text = capsys.readouterr().out
    assert "2 of 2 LSTM nodes rewritten into 1 FusedLSTM nodes" in text and "--check: max-abs" in text
    assert [n.op_type for n in onnx.load(str(out)).graph.node if n.domain == "lstm_ort"] == ["FusedLSTM"]


def test_check_json_writes_nothing(model_path, tmp_path, capsys):
    assert main(["check", str(model_path), "--json"]) == EXIT_OK
    report = json.loads(capsys.readouterr().out)
    assert report["lstms"] == 2 and report["all_rewritten"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.onnx"]


def test_never_overwrites_input(model_path):
    before = model_path.read_bytes()
    assert main(["optimize", str(model_path), "-o", str(model_path)]) == EXIT_USAGE
    assert model_path.read_bytes() == before


@pytest.mark.parametrize("content", [b"not a model at all", b""])
def test_not_a_model(tmp_path, content, capsys):
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(content)
    assert main(["check", str(bad)]) == EXIT_INPUT
    assert "not an ONNX model" in capsys.readouterr().err


def test_truncated_model(model_path, tmp_path, capsys):
    cut = tmp_path / "cut.onnx"
    cut.write_bytes(model_path.read_bytes()[:200])
    out = tmp_path / "out.onnx"
    assert main(["optimize", str(cut), "-o", str(out)]) == EXIT_INPUT
    assert not out.exists()


def test_unsupported_ir_version(model_path, tmp_path, capsys):
    m = onnx.load(str(model_path))
    m.ir_version = 99
    p = tmp_path / "ir99.onnx"
    onnx.save(m, str(p))
    assert main(["check", str(p)]) == EXIT_INPUT
    assert "unsupported IR version 99" in capsys.readouterr().err


def test_entry_point_runs(model_path):
    done = subprocess.run([sys.executable, "-m", "lstm_ort.cli", "check", str(model_path)], capture_output=True,
                          text=True)
    assert done.returncode == 0 and "rewritten" in done.stdout


def test_external_data_model(tmp_path, capsys):
    spec = LstmSpec(input_size=4, hidden_size=5, num_layers=2)
    src = tmp_path / "ext.onnx"
    onnx.save(stock_model(spec, random_layers(spec, np.random.default_rng(0))), str(src),
              save_as_external_data=True, all_tensors_to_one_file=True, location="ext.onnx.data", size_threshold=0)
    out = tmp_path / "out.onnx"
    assert main(["optimize", str(src), "-o", str(out), "--check"]) == EXIT_OK
    assert "2 of 2 LSTM nodes rewritten into 1 FusedLSTM nodes" in capsys.readouterr().out


def test_check_takes_shapes_and_minus_one_dims(tmp_path, capsys):
    spec = LstmSpec(input_size=4, hidden_size=5)
    model = stock_model(spec, random_layers(spec, np.random.default_rng(0)))
    for d, v in zip(model.graph.input[0].type.tensor_type.shape.dim, (-1, -1, 4)):  # as Paddle writes them
        d.Clear()
        d.dim_value = v
    src, dst = tmp_path / "m.onnx", tmp_path / "o.onnx"
    onnx.save(model, str(src))
    assert main(["optimize", str(src), "-o", str(dst), "--check", "--json", "--shape", "X=11,2,4"]) == EXIT_OK
    doc = json.loads(capsys.readouterr().out)
    assert doc["check"]["passed"] and doc["check_feeds"]["X"] == [11, 2, 4]
    assert main(["optimize", str(src), "-o", str(dst), "--check", "--json"]) == EXIT_OK  # -1 dims default to 3
    assert json.loads(capsys.readouterr().out)["check_feeds"]["X"] == [3, 3, 4]


@pytest.mark.parametrize("bad", [["--shape", "X=2,x"], ["--shape", "=1"], ["--carry", "Y_h"], ["--calls", "0"]])
def test_bad_check_options_are_usage_errors(model_path, tmp_path, bad):
    assert main(["optimize", str(model_path), "-o", str(tmp_path / "o.onnx"), "--check", *bad]) == EXIT_USAGE


def test_check_chains_streaming_states(tmp_path, capsys):
    from lstm_ort.builders import unrolled_cell_model

    src, dst = tmp_path / "cell.onnx", tmp_path / "o.onnx"
    onnx.save(unrolled_cell_model(6, 8, np.random.default_rng(0)), str(src))
    args = ["optimize", str(src), "-o", str(dst), "--check", "--json", "--carry", "h_out=h", "--carry", "c_out=c"]
    assert main(args) == EXIT_OK
    doc = json.loads(capsys.readouterr().out)
    assert doc["check"]["passed"] and "50 chained calls" in doc["check"]["compared_with"]
    assert main([*args[:-4], "--carry", "nope=h"]) == EXIT_USAGE  # names no output of the model
    assert "--carry nope=h: 'nope' is none of the model's outputs" in json.loads(capsys.readouterr().out)["error"]
