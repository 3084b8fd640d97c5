"""A NaN in X or initial_h: FusedLSTM gives the IEEE result (NaN from that step on, for that batch
entry and direction); stock onnxruntime's CPU LSTM clamps gate pre-activations with min/max, which
turns a NaN into a finite number. docs/ops.md states the difference; this holds both to it."""

from pathlib import Path

import numpy as np
import pytest

from lstm_ort.builders import LstmSpec, random_layers, stock_model
from lstm_ort.rewriter import optimize
from lstm_ort.testing import make_feeds, run


@pytest.mark.parametrize("where", ["X", "initial_h"])
@pytest.mark.parametrize("direction", ["forward", "reverse"])
def test_nan_propagates_in_ours_not_in_stock(where, direction):
    spec = LstmSpec(input_size=3, hidden_size=4, direction=direction)
    model = stock_model(spec, random_layers(spec, np.random.default_rng(0)), initial_states=True)
    optimized = optimize(model)
    T, B = 5, 2
    feeds = make_feeds(spec, T, B, np.random.default_rng(1), initial_states=True)
    first = 0 if direction == "forward" else T - 1  # the step each direction takes first
    if where == "X":
        feeds["X"][first, 0, 0] = np.nan
    else:
        feeds["initial_h"][0, 0, 0] = np.nan
    (y, y_h, y_c), (ref, ref_h, _) = run(optimized, feeds), run(model, feeds, fused=False)
    assert np.isnan(y[:, 0, 0]).all() and np.isnan(y_h[0, 0]).all() and np.isnan(y_c[0, 0]).all()
    assert np.isfinite(y[:, 0, 1]).all()  # the other batch entry is untouched
    assert np.isfinite(ref).all() and np.isfinite(ref_h).all()  # stock's clamps hide the NaN
    np.testing.assert_allclose(y[:, 0, 1], ref[:, 0, 1], atol=1e-5)


def test_op_contract_documents_nan():
    text = (Path(__file__).parents[1] / "docs" / "ops.md").read_text()
    assert "## NaN" in text and "stock onnxruntime" in text.split("## NaN")[1].lower()
