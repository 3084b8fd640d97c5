"""Real torch exports (both exporters): every LSTM is rewritten into the fewest FusedLSTM nodes
(one per nn.LSTM), and the optimized model equals the original on stock onnxruntime (<= 1e-5)."""

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

CASES = [(n, e) for n in fixtures.NAMES for e in fixtures.EXPORTERS if (n, e) != ("if_branch", "torchscript")]


@pytest.mark.parametrize("name,exporter", CASES, ids=[f"{n}-{e}" for n, e in CASES])
def test_fixture_fully_rewritten_with_parity(name, exporter):
    model = fixtures.export(name, exporter)
    report = Report()
    out = optimize(model, report=report)
    assert report.lstm_count >= 1 and report.all_rewritten, report.table()
    fused = fused_nodes(out)
    assert len(fused) == 1, [n.name for n in fused]  # one nn.LSTM -> one node, however many layers
    assert not [n for g in iter_graphs(out) for n in g.node if n.op_type == "LSTM"]
    assert out.ir_version == model.ir_version
    feeds = random_feeds(model, np.random.default_rng(0))
    if "tokens" in feeds:
        feeds["tokens"] = np.random.default_rng(1).integers(0, 50, feeds["tokens"].shape).astype(np.int64)
    if name == "if_branch":  # take the branch that holds the LSTM
        feeds["X"] = np.abs(feeds["X"])
    assert max_abs(run(out, feeds), run(model, feeds, fused=False)) <= 1e-5


@pytest.mark.parametrize("name,exporter", CASES, ids=[f"{n}-{e}" for n, e in CASES])
def test_cli_optimize_check_on_fixture(name, exporter, tmp_path, capsys):
    import onnx

    from lstm_ort.cli import EXIT_OK, main

    src, dst = tmp_path / "in.onnx", tmp_path / "out.onnx"
    onnx.save(fixtures.export(name, exporter), str(src))
    assert main(["optimize", str(src), "-o", str(dst), "--check", "--atol", "1e-5"]) == EXIT_OK
    text = capsys.readouterr().out
    assert "rewritten into 1 FusedLSTM nodes" in text and "--check: max-abs" in text and dst.is_file()
