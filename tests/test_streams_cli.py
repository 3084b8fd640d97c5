"""`lstm-ort streams-bench`: the counters as a table (rich, or plain text without it) and as JSON."""

import json
import sys

import onnx
import pytest

from lstm_ort.builders import LstmSpec, fused_model, random_layers
from lstm_ort.cli import main
from lstm_ort.serving.streams.cli import print_table

ARGS = ["--carry", "Y_h=initial_h", "--carry", "Y_c=initial_c", "--chunk", "X=2,1,6", "--streams", "12",
        "--threads", "3", "--seconds", "0.3", "--warmup", "0.1"]


@pytest.fixture
def model_path(tmp_path, rng):
    spec = LstmSpec(6, 8)
    path = tmp_path / "m.onnx"
    onnx.save(fused_model(spec, random_layers(spec, rng), initial_states=True), path)
    return path


def test_streams_bench_table_and_json(model_path, tmp_path, capsys):
    out = tmp_path / "bench.json"
    assert main(["streams-bench", str(model_path), *ARGS, "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    for counter in ("open streams", "steps/s", "mean batch", "queue wait p50 / p99", "step latency p50 / p99"):
        assert counter in printed
    doc = json.loads(out.read_text())
    assert doc["streams"] == 12 and doc["batched"] is True and doc["fallback_reasons"] == []
    stats = doc["stats"]
    assert stats["steps"] > 0 and stats["open_streams"] == 12 and stats["steps_per_s"] > 0
    assert stats["queue_wait_p50_ms"] <= stats["queue_wait_p99_ms"]


def test_streams_bench_real_time(model_path, capsys):
    assert main(["streams-bench", str(model_path), *ARGS, "--interval-ms", "20"]) == 0
    assert "behind real time" in capsys.readouterr().out


@pytest.mark.parametrize("extra, code, message", [
    (["--streams", "0"], 2, "--streams must be >= 1"),
    (["--chunk", "nope=1,2"], 1, "not step inputs"),
    (["--value", "X=1"], 0, None),  # a fixed value for a batched input is allowed (every stream the same)
    (["--value", "X=1,2"], 1, "2 values for shape [2, 1, 6]"),
])
def test_streams_bench_bad_options(model_path, capsys, extra, code, message):
    assert main(["streams-bench", str(model_path), *ARGS, *extra]) == code
    if message:
        assert message in capsys.readouterr().err


@pytest.mark.parametrize("flag, value, bound", [
    ("--seconds", "nan", "a finite number > 0"), ("--seconds", "inf", "a finite number > 0"),
    ("--seconds", "0", "a finite number > 0"), ("--warmup", "nan", "a finite number >= 0"),
    ("--warmup", "-1", "a finite number >= 0"), ("--interval-ms", "nan", "a finite number > 0"),
    ("--interval-ms", "-inf", "a finite number > 0"), ("--max-wait-ms", "nan", "a finite number >= 0"),
    ("--max-wait-ms", "inf", "a finite number >= 0"), ("--max-wait-ms", "1e999", "a finite number >= 0"),
    ("--max-wait-ms", "-1", "a finite number >= 0"), ("--max-wait-ms", "soon", "a finite number >= 0"),
    ("--intra-op-threads", "-1", "an integer >= 0"), ("--intra-op-threads", "2.5", "an integer >= 0"),
])
def test_streams_bench_hostile_numbers_are_usage_errors(model_path, capsys, flag, value, bound):
    """Issue 45 row 10: refused before any session starts (NaN measured nothing, inf hung the worker)."""
    assert main(["streams-bench", str(model_path), *ARGS, f"{flag}={value}"]) == 2
    err = capsys.readouterr().err
    assert f"argument {flag}: must be {bound}" in err and repr(value) in err and "Traceback" not in err


def test_streams_bench_missing_model(tmp_path, capsys):
    assert main(["streams-bench", str(tmp_path / "none.onnx"), *ARGS]) == 1
    assert "none.onnx" in capsys.readouterr().err


def test_streams_bench_bad_carry(model_path, capsys):
    assert main(["streams-bench", str(model_path), *ARGS[4:], "--carry", "hn=h"]) == 1
    assert "no output 'hn'" in capsys.readouterr().err


def test_plain_table_without_rich(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "rich", None)
    monkeypatch.setitem(sys.modules, "rich.console", None)
    print_table("title", [("steps/s", "1,000"), ("mean batch", "4.0")])
    out = capsys.readouterr().out
    assert out.splitlines() == ["title", "  steps/s     1,000", "  mean batch  4.0"]
