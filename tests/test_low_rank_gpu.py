"""FusedLSTM with factored weights on the CUDA EP (custom_ops/cuda/low_rank/) against our CPU
kernel on the same factored model: shapes, directions, layouts, lengths, states, cell features,
float16, and which parts are factored; at full rank against the unfactored op on CUDA. Both
recurrences run: the persistent one (the default where it plans) and the per-step one
(LSTM_ORT_LOW_RANK_STEPWISE=1)."""

import numpy as np
import pytest

from lstm_ort.builders import LstmSpec, fused_model, random_layers, stock_model
from lstm_ort.rewriter import optimize
from lstm_ort.rewriter.low_rank import LowRank
from lstm_ort.testing import CPU, CUDA, factored_layers, feature_spec, make_feeds, max_abs, run

pytestmark = pytest.mark.gpu

TOL = 2e-5  # as the whole-weight GPU parity: the fast default cell is a few ulp from the CPU's


@pytest.fixture(params=["persistent", "stepwise"])
def recurrence(request, monkeypatch):
    """Which factored recurrence runs; the op reads the knob at every call."""
    if request.param == "stepwise":
        monkeypatch.setenv("LSTM_ORT_LOW_RANK_STEPWISE", "1")
    else:
        monkeypatch.delenv("LSTM_ORT_LOW_RANK_STEPWISE", raising=False)
    return request.param


def check(spec, layers, T, B, rng, *, dtype=np.float32, tol=TOL, **kw):
    model = fused_model(spec, layers, dtype, **kw)
    feeds = make_feeds(spec, T, B, rng, dtype=dtype, **kw)
    got, want = run(model, feeds, providers=CUDA), run(model, feeds, providers=CPU)
    assert max_abs(got, want) <= tol, f"CUDA vs CPU: {max_abs(got, want)}"


# (direction, layout, T, B, I, H, L, rank_input, rank_recurrent, lengths and initial states)
SHAPES = [
    ("forward", 0, 7, 3, 5, 17, 1, 2, 3, False),
    ("forward", 1, 7, 3, 5, 17, 2, 2, 3, True),
    ("reverse", 0, 10, 16, 40, 64, 2, 8, 16, True),
    ("bidirectional", 0, 9, 5, 24, 33, 3, 6, 7, True),
    ("bidirectional", 1, 9, 5, 24, 33, 2, 0, 7, False),   # recurrent factors only
    ("bidirectional", 0, 6, 17, 48, 40, 2, 12, 0, True),  # input factors only: a whole recurrence
    ("forward", 0, 1, 1, 8, 128, 1, 4, 32, False),
    ("forward", 0, 100, 64, 512, 512, 2, 128, 128, False),
    ("bidirectional", 1, 50, 65, 256, 256, 1, 64, 64, True),
    ("forward", 0, 30, 130, 16, 301, 2, 5, 37, True),     # odd rank and H: partial tiles of both phases
    ("bidirectional", 0, 20, 4, 32, 1024, 1, 256, 256, True),
]


@pytest.mark.parametrize("direction,layout,T,B,I,H,L,rx,rh,extras", SHAPES)
def test_cuda_matches_cpu(direction, layout, T, B, I, H, L, rx, rh, extras, rng, recurrence):
    spec = LstmSpec(input_size=I, hidden_size=H, num_layers=L, direction=direction, layout=layout)
    layers = factored_layers(random_layers(spec, rng), rx, rh)
    check(spec, layers, T, B, rng, seq_lens=extras, initial_states=extras)


def test_mixed_parts(rng, recurrence):
    """Some (layer, direction) parts factored, others whole, in one node."""
    spec = LstmSpec(input_size=20, hidden_size=24, num_layers=2, direction="bidirectional")
    layers = factored_layers(random_layers(spec, rng), 5, 6)
    layers[0].W_factors[1] = None
    layers[1].R_factors = [None, layers[1].R_factors[1]]
    check(spec, layers, 8, 6, rng, seq_lens=True, initial_states=True)


@pytest.mark.parametrize("peepholes,clip,input_forget,acts", [(True, None, 0, False), (False, 0.4, 1, False),
                                                               (True, 0.4, 0, True), (False, None, 1, True)])
@pytest.mark.parametrize("direction", ["forward", "bidirectional"])
def test_cell_features(direction, peepholes, clip, input_forget, acts, rng, recurrence):
    spec = feature_spec(direction, peepholes=peepholes, clip=clip, input_forget=input_forget, acts=acts, input_size=6,
                        hidden_size=33, num_layers=2)
    check(spec, factored_layers(random_layers(spec, rng), 3, 5), 9, 5, rng, seq_lens=True, initial_states=True)


@pytest.mark.parametrize("layout", [0, 1])
def test_float16(layout, rng, recurrence):
    spec = LstmSpec(input_size=16, hidden_size=48, num_layers=2, direction="bidirectional", layout=layout)
    check(spec, factored_layers(random_layers(spec, rng), 4, 12), 12, 7, rng, dtype=np.float16, tol=4e-3,
          seq_lens=True, initial_states=True)


def test_full_rank_factors_match_the_unfactored_op_on_cuda(rng, recurrence):
    spec = LstmSpec(input_size=24, hidden_size=16, num_layers=2, direction="bidirectional")
    layers = random_layers(spec, rng)
    feeds = make_feeds(spec, 12, 5, rng, seq_lens=True)
    whole = run(fused_model(spec, layers, seq_lens=True), feeds, providers=CUDA)
    factored = run(fused_model(spec, factored_layers(layers, 10_000, 10_000), seq_lens=True), feeds, providers=CUDA)
    assert max_abs(factored, whole) <= TOL


def test_optimized_low_rank_model_on_cuda(rng):
    """optimize --low-rank's output runs on the CUDA EP as on the CPU. Factored as for the CPU (at
    H=128 B=8 factoring does not pay on CUDA, and --low-rank for CUDA keeps the layers whole):
    this is the kernel's test, not the cost rule's."""
    spec = LstmSpec(input_size=64, hidden_size=128, num_layers=2)
    model = optimize(stock_model(spec, random_layers(spec, rng)), low_rank=LowRank(rank=32, device="cpu"))
    assert any(a.name == "rank_input" for n in model.graph.node for a in n.attribute)
    feeds = make_feeds(spec, 20, 8, rng)
    assert max_abs(run(model, feeds, providers=CUDA), run(model, feeds, providers=CPU)) <= TOL
