"""`lstm-ort streams-bench`: the counters as a table (rich, or plain text without it) and as JSON."""

import json
import sys

import onnx
import pytest

from lstm_ort.builders import LstmSpec, fused_model, random_layers, stock_model
from lstm_ort.cli import main
from lstm_ort.serving.streams.cli import print_table

ARGS = ["--carry", "Y_h=initial_h", "--carry", "Y_c=initial_c", "--chunk", "X=2,1,6", "--streams", "12",
        "--threads", "3", "--seconds", "0.3", "--warmup", "0.1"]


def lstm_file(tmp_path, rng, build, name):
    spec = LstmSpec(6, 8)
    path = tmp_path / name
    onnx.save(build(spec, random_layers(spec, rng), initial_states=True), path)
    return path


@pytest.fixture
def model_path(tmp_path, rng):
    return lstm_file(tmp_path, rng, fused_model, "m.onnx")


def test_streams_bench_table_and_json(model_path, tmp_path, capsys):
    out = tmp_path / "bench.json"
    assert main(["streams-bench", str(model_path), *ARGS, "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    for counter in ("open streams", "steps/s", "mean batch", "queue wait p50 / p99", "step latency p50 / p99"):
        assert counter in printed
    doc = json.loads(out.read_text())
    assert doc["streams"] == 12 and doc["batched"] is True and doc["fallback_reasons"] == []
    assert list(doc["specialized"]) == ["0"] and "folding removed no node" in doc["specialized"]["0"]
    assert doc["cuda_graphs"] == {"0": {"calls": 0, "why_not": "the engine keeps its states on the host"}}
    stats = doc["stats"]
    assert stats["steps"] > 0 and stats["open_streams"] == 12 and stats["steps_per_s"] > 0
    assert stats["queue_wait_p50_ms"] <= stats["queue_wait_p99_ms"]


def test_streams_bench_real_time(model_path, capsys):
    assert main(["streams-bench", str(model_path), *ARGS, "--interval-ms", "20"]) == 0
    assert "behind real time" in capsys.readouterr().out


@pytest.mark.parametrize("extra, code, message", [
    (["--streams", "0"], 2, "argument --streams: must be an integer >= 1"),
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


# -- the comparison: the batcher against one run per stream per step, client-measured ---------------
QUICK = ["--carry", "Y_h=initial_h", "--carry", "Y_c=initial_c", "--chunk", "X=2,1,6", "--streams", "6",
         "--clients", "2", "--seconds", "0.2", "--warmup", "0.05"]


@pytest.fixture
def original_path(tmp_path, rng):
    """An original export (ONNX LSTM): streams-bench optimizes it and runs stock on it."""
    return lstm_file(tmp_path, rng, stock_model, "original.onnx")


def run_json(args, tmp_path, capsys):
    out = tmp_path / "out.json"
    code = main(["streams-bench", *args, "--json", str(out)])
    captured = capsys.readouterr()
    return code, (json.loads(out.read_text()) if out.exists() else None), captured


def test_three_systems_on_an_original_export(original_path, tmp_path, capsys):
    code, doc, captured = run_json([str(original_path), *QUICK, "--repeats", "2"], tmp_path, capsys)
    assert code == 0, captured.err
    assert [r["system"] for r in doc["summary"]] == ["batcher", "run ours", "run stock"]
    assert len(doc["phases"]) == 6 and doc["notes"] == []
    for phase in doc["phases"]:
        assert phase["steps"] > 0 and phase["measured_steps"] > 0 and phase["failed"] == 0
        assert 0 < phase["latency_p50_ms"] <= phase["latency_p99_ms"] <= phase["latency_p999_ms"]
        assert (phase["counters"] is not None) == (phase["system"] == "batcher")
    batcher = doc["summary"][0]
    assert batcher["counters"]["steps"] > 0 and doc["summary"][1]["batcher_speedup"] > 0
    for column in ("steps/s", "p50 ms", "p99 ms", "p99.9 ms", "run stock", "run ours"):
        assert column in captured.out


def test_an_optimized_model_runs_without_stock(model_path, tmp_path, capsys):
    code, doc, captured = run_json([str(model_path), *QUICK], tmp_path, capsys)
    assert code == 0
    assert [r["system"] for r in doc["summary"]] == ["batcher", "run ours"]
    assert "no stock baseline" in captured.err and doc["notes"]


def test_optimized_given_beside_the_original(original_path, model_path, tmp_path, capsys):
    """--optimized FILE: the batcher and ours run it, stock the original (here a model of other
    weights: the two need not be the same model to be timed)."""
    code, doc, _ = run_json([str(original_path), "--optimized", str(model_path), *QUICK, "--systems", "stock,batcher"],
                            tmp_path, capsys)
    assert code == 0 and doc["optimized"] == str(model_path)
    assert [r["system"] for r in doc["summary"]] == ["run stock", "batcher"]


@pytest.mark.parametrize("pattern", ["open", "async"])
def test_open_loop(model_path, tmp_path, capsys, pattern):
    code, doc, captured = run_json([str(model_path), *QUICK, "--pattern", pattern, "--period-ms", "10"], tmp_path,
                                   capsys)
    assert code == 0 and doc["pattern"] == pattern and doc["period_ms"] == 10
    for phase in doc["phases"]:  # 6 streams, a chunk each 10 ms, 0.2 s measured
        assert 0 < phase["ticks"] <= 6 * 0.2 / 0.01 + 6 and 0 <= phase["late"] <= phase["ticks"]
        assert phase["measured_steps"] == phase["ticks"]
    assert "behind real time" in captured.out and "late: chunks sent more than 1 ms" in captured.out


def test_stacked_rounds_and_a_ladder(model_path, tmp_path, capsys):
    code, doc, _ = run_json([str(model_path), *QUICK, "--stacked", "--ladder", "2,4"], tmp_path, capsys)
    assert code == 0 and doc["pattern"] == "rounds" and doc["stacked"] and doc["ladder"] == [2, 4]
    assert sorted({(r["streams"], r["system"]) for r in doc["summary"]}) == [
        (2, "batcher"), (2, "run ours"), (4, "batcher"), (4, "run ours")]


def test_plot(model_path, tmp_path, capsys):
    pytest.importorskip("matplotlib", reason="the bench extra draws the plot")
    png = tmp_path / "latency.png"
    assert main(["streams-bench", str(model_path), *QUICK, "--ladder", "2,4", "--plot", str(png)]) == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_plot_without_matplotlib_is_refused_first(model_path, tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    assert main(["streams-bench", str(model_path), *QUICK, "--plot", str(tmp_path / "p.png")]) == 2
    err = capsys.readouterr().err
    assert "pip install 'lstm-ort[bench]'" in err and "streams-bench:" in err


@pytest.mark.parametrize("extra, message", [
    (["--stacked", "--pattern", "open"], "--stacked goes with --pattern rounds"),
    (["--systems", "batcher,gpu"], "argument --systems"), (["--systems", "ours,ours"], "argument --systems"),
    (["--pattern", "sideways"], "argument --pattern"),
])
def test_bad_combinations_are_usage_errors(model_path, capsys, extra, message):
    assert main(["streams-bench", str(model_path), *QUICK, *extra]) == 2
    assert message in capsys.readouterr().err


def test_outputs_never_overwrite_the_model(model_path, capsys):
    assert main(["streams-bench", str(model_path), *QUICK, "--json", str(model_path)]) == 2
    assert "is the model" in capsys.readouterr().err


@pytest.mark.parametrize("flag, value", [
    ("--clients", "0"), ("--clients", "-2"), ("--threads", "1.5"), ("--streams", "nan"), ("--streams", "-1"),
    ("--period-ms", "nan"), ("--period-ms", "inf"), ("--period-ms", "0"), ("--period-ms", "-5"),
    ("--interval-ms", "-inf"), ("--repeats", "0"), ("--repeats", "inf"), ("--ladder", "0,4"), ("--ladder", "4,nan"),
    ("--ladder", ""), ("--ladder", "4,-1"), ("--seed", "-1"), ("--max-batch", "0"), ("--workers", "0"),
    ("--workers", "nan"), ("--value", "X=nan"), ("--value", "X=inf"), ("--chunk", "X=2,-1,6"),
])
def test_every_number_is_checked(model_path, capsys, flag, value):
    """NaN, infinity, negatives and zero counts: usage errors (exit 2) naming the option, before any session."""
    assert main(["streams-bench", str(model_path), *QUICK, f"{flag}={value}"]) == 2
    err = capsys.readouterr().err
    assert f"argument {flag}" in err and "Traceback" not in err
