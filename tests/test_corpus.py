"""The real-model corpus (models/corpus.py): third-party models from PyPI, production-size torch
exports with both exporters, hand-built graphs in other exporters' shapes. For every model: every
LSTM taken into the fewest FusedLSTM nodes, parity with
the original on stock onnxruntime over several inputs (streaming models over 50 chained calls),
and `optimize --check` exits 0."""

import importlib.util
import sys
import time
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from lstm_ort.rewriter import Report, optimize
from lstm_ort.runtime.model_io import iter_graphs
from lstm_ort.runtime.nodes import fused_nodes
from lstm_ort.runtime.session import InferenceSession
from lstm_ort.verify import max_abs

_spec = importlib.util.spec_from_file_location("corpus", Path(__file__).parents[1] / "models" / "corpus.py")
corpus = importlib.util.module_from_spec(_spec)
sys.modules["corpus"] = corpus  # dataclasses look their module up while the file runs
_spec.loader.exec_module(corpus)

CPU = ["CPUExecutionProvider"]
STREAM_CALLS = 50


@pytest.fixture(scope="module")
def built():
    """Each entry built once per run (exports and downloads are the slow part)."""
    cache = {}

    def get(entry):
        if entry.name not in cache:
            try:
                cache[entry.name] = entry.build()
            except corpus.Unavailable as e:
                cache[entry.name] = e
        if isinstance(cache[entry.name], corpus.Unavailable):
            pytest.skip(f"{entry.name}: {cache[entry.name]}")
        return cache[entry.name]
    return get


def lstm_nodes(model):
    return [n for g in iter_graphs(model) for n in g.node if (n.op_type == "LSTM" and n.domain in ("", "ai.onnx"))
            or (n.op_type == "DynamicQuantizeLSTM" and n.domain == "com.microsoft")]


@pytest.mark.parametrize("entry", corpus.ENTRIES, ids=[e.name for e in corpus.ENTRIES])
def test_every_lstm_rewritten_with_parity(entry, built):
    model = built(entry)
    report = Report()
    start = time.perf_counter()
    optimized = optimize(model, report=report)
    seconds = time.perf_counter() - start
    # Folding can drop LSTMs in branches whose condition is constant (silero's inner If): those
    # are gone, not left; every LSTM still there is rewritten.
    assert report.all_rewritten and report.lstm_count == entry.lstms, report.table()
    assert not lstm_nodes(optimized) and len(fused_nodes(optimized)) == entry.fused, report.table()
    options = ort.SessionOptions()
    if entry.stock_threads:
        options.intra_op_num_threads = entry.stock_threads
    stock = ort.InferenceSession(model.SerializeToString(), options, providers=CPU)
    ours = InferenceSession(optimized.SerializeToString(), providers=CPU)
    for ref, got in _runs(entry, stock, ours):
        # Chained calls grow the cell state (to ~50 on silero over 50 calls): the bound is on
        # max-abs over max(1, |reference|), i.e. absolute for unit-scale outputs.
        assert _relative(ref, got) <= entry.tol
        _assert_classes_agree(entry, ref, got)
    print(f"{entry.name}: optimize {seconds:.2f}s")


def _runs(entry, stock, ours):
    """(stock's outputs, ours) by name, for three draws of the entry's feeds; a streaming model's
    over STREAM_CALLS chained calls, each call's states feeding the next on both sides."""
    rng = np.random.default_rng(0)
    for _ in range(3):
        feeds = entry.feeds(rng)
        ref_feeds, our_feeds = dict(feeds), dict(feeds)
        for _ in range(STREAM_CALLS if entry.carry else 1):
            ref = dict(zip([o.name for o in stock.get_outputs()], stock.run(None, ref_feeds)))
            got = dict(zip([o.name for o in ours.get_outputs()], ours.run(None, our_feeds)))
            yield ref, got
            for out, inp in entry.carry.items():
                ref_feeds[inp], our_feeds[inp] = ref[out], got[out]


def _relative(ref: dict, got: dict) -> float:
    """max-abs over max(1, |reference|): absolute for unit-scale outputs."""
    scale = max(1.0, max(float(np.abs(v).max(initial=0)) for v in ref.values()))
    return max_abs(list(got.values()), list(ref.values())) / scale


def _assert_classes_agree(entry, ref: dict, got: dict) -> None:
    if entry.argmax_axis is not None:
        for name, value in ref.items():
            agree = (value.argmax(entry.argmax_axis) == got[name].argmax(entry.argmax_axis)).mean()
            assert agree >= 0.999, f"{name}: the class agrees with stock at {agree:.4%} of positions"


# precision bf16 on the CPU against stock's fp32 (docs/ops.md, "bf16 on the CPU"): 1e-2 of the
# outputs' scale for one call; streaming models over 50 chained calls carry the rounding of every
# step in their states (silero 8k 0.023, the g2p decoder 0.086 measured on random inputs).
BF16_RELATIVE = 1e-2
BF16_RELATIVE_CHAINED = 0.1
FLOAT_ENTRIES = [e for e in corpus.ENTRIES if not e.stock_threads]  # not the int8 (DynamicQuantizeLSTM) models


@pytest.mark.parametrize("entry", FLOAT_ENTRIES, ids=[e.name for e in FLOAT_ENTRIES])
def test_bf16_within_its_stated_error(entry, built):
    from lstm_ort.runtime.native import PrecisionRefused, decide_precision

    try:
        decide_precision("cpu", "bf16")
    except PrecisionRefused as e:
        pytest.skip(str(e))
    model = built(entry)
    stock = ort.InferenceSession(model.SerializeToString(), providers=CPU)
    ours = InferenceSession(optimize(model, precision="bf16").SerializeToString(), providers=CPU)
    bound = BF16_RELATIVE_CHAINED if entry.carry else BF16_RELATIVE
    for ref, got in _runs(entry, stock, ours):
        assert _relative(ref, got) <= bound
        _assert_classes_agree(entry, ref, got)


@pytest.mark.parametrize("entry", corpus.ENTRIES, ids=lambda e: e.name)
def test_optimize_check_passes(entry, built, tmp_path):
    """`lstm-ort optimize --check` on the model as a user would run it, production-size torch
    exports included: shapes for dims it cannot guess, streaming states chained over 50 calls."""
    from lstm_ort.cli import EXIT_OK, main

    src, dst = tmp_path / "in.onnx", tmp_path / "out.onnx"
    onnx.save(built(entry), str(src))
    args = [a for name, dims in entry.shapes.items() for a in ("--shape", f"{name}={','.join(map(str, dims))}")]
    args += [a for out, inp in entry.carry.items() for a in ("--carry", f"{out}={inp}")]
    np.savez(tmp_path / "inputs.npz", **entry.feeds(np.random.default_rng(1)))  # valid sr, state shapes
    args += ["--inputs", str(tmp_path / "inputs.npz")]
    assert main(["optimize", str(src), "-o", str(dst), "--check", "--json", *args]) == EXIT_OK
    assert dst.is_file()
