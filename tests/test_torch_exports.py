"""Real torch exports (both exporters, fixed and dynamic batch): every LSTM is rewritten into the
fewest FusedLSTM nodes (one per nn.LSTM; one per LSTMCell loop over time, a bidirectional pair
or a stack of loops included), zero initial states built from the input's shape are dropped, and
the optimized model equals the original on stock onnxruntime (<= 1e-5)."""

import functools
import importlib.util
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch (CPU build) drives the exporter fixtures")

from lstm_ort.verify import random_feeds  # noqa: E402
from lstm_ort.rewriter import Report, optimize  # noqa: E402
from lstm_ort.runtime.model_io import iter_graphs  # noqa: E402
from lstm_ort.runtime.nodes import fused_nodes  # noqa: E402
from lstm_ort.testing import max_abs, run  # noqa: E402

_spec = importlib.util.spec_from_file_location("export_fixtures",
                                               Path(__file__).parents[1] / "models" / "export_fixtures.py")
fixtures = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(fixtures)

CASES = [(n, e) for n in fixtures.NAMES for e in fixtures.EXPORTERS
         if (n, e) not in (("if_branch", "torchscript"), ("cells_scripted", "dynamo"))]
# Initial states the model takes as inputs stay; every other state is zeros built from x's shape.
GIVEN_STATES = ("initial_states", "cells_initial_states")
CELL_OPS = ("Sigmoid", "Tanh", "Split", "LSTM", "Loop")  # (a Gemm may be a classifier head)


@functools.lru_cache(maxsize=None)
def exported(name, exporter, dynamic_batch=False):
    """Each export once per run (the dynamo exporter takes seconds on an unrolled loop)."""
    return fixtures.export(name, exporter, dynamic_batch=dynamic_batch).SerializeToString()


def model_of(name, exporter, dynamic_batch=False):
    import onnx

    return onnx.load_from_string(exported(name, exporter, dynamic_batch))


def feeds_for(name, model, rng, batch=3):
    feeds = random_feeds(model, rng, dim=batch)  # the only symbolic dimension is the batch
    if "tokens" in feeds:
        feeds["tokens"] = np.random.default_rng(1).integers(0, 50, feeds["tokens"].shape).astype(np.int64)
    if name == "if_branch":  # take the branch that holds the LSTM
        feeds["X"] = np.abs(feeds["X"])
    return feeds


def check_rewritten(name, model):
    report = Report()
    out = optimize(model, report=report)
    assert report.lstm_count >= 1 and report.all_rewritten, report.table()
    fused = fused_nodes(out)
    assert len(fused) == 1, [n.name for n in fused]  # one nn.LSTM or cell loop -> one node, however many layers
    assert not [n for g in iter_graphs(out) for n in g.node if n.op_type in CELL_OPS], report.table()
    states = [v for v in list(fused[0].input)[4:6] if v]
    assert states if name in GIVEN_STATES else not states, f"initial states {states}"
    assert out.ir_version == model.ir_version
    return out


@pytest.mark.parametrize("name,exporter", CASES, ids=[f"{n}-{e}" for n, e in CASES])
def test_fixture_fully_rewritten_with_parity(name, exporter):
    model = model_of(name, exporter)
    out = check_rewritten(name, model)
    feeds = feeds_for(name, model, np.random.default_rng(0))
    assert max_abs(run(out, feeds), run(model, feeds, fused=False)) <= 1e-5


# Dynamo takes seconds per unrolled loop: its dynamic-batch cases are the nn.LSTM fixtures and the
# loops whose zero states differ in shape (one layer, stacked, bidirectional, time-major).
DYNAMIC = [(n, e) for n, e in CASES if n != "if_branch" and (e == "torchscript" or not n.startswith("cells_") or n in (
    "cells_forward", "cells_stacked", "cells_bidirectional", "cells_time_major", "cells_initial_states"))]


@pytest.mark.parametrize("name,exporter", DYNAMIC, ids=[f"{n}-{e}" for n, e in DYNAMIC])
def test_dynamic_batch_fixture_drops_zero_states(name, exporter):
    """With the batch left symbolic, the zero states are computed from Shape(x) at run time
    (ConstantOfShape or Expand, then a Slice per layer): proven zero and dropped all the same."""
    model = model_of(name, exporter, dynamic_batch=True)
    out = check_rewritten(name, model)
    for batch in (1, 5):
        feeds = feeds_for(name, model, np.random.default_rng(batch), batch)
        assert max_abs(run(out, feeds), run(model, feeds, fused=False)) <= 1e-5


@pytest.mark.parametrize("name,exporter", CASES, ids=[f"{n}-{e}" for n, e in CASES])
def test_cli_optimize_check_on_fixture(name, exporter, tmp_path, capsys):
    from lstm_ort.cli import EXIT_OK, main

    src, dst = tmp_path / "in.onnx", tmp_path / "out.onnx"
    src.write_bytes(exported(name, exporter))
    assert main(["optimize", str(src), "-o", str(dst), "--check", "--atol", "1e-5"]) == EXIT_OK
    text = capsys.readouterr().out
    assert "rewritten into 1 FusedLSTM nodes" in text and "--check: max-abs" in text and dst.is_file()
