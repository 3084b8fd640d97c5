"""The tensor-core step (custom_ops/cuda/mma_step/) on the CUDA EP: forced on through its debug key in
strict mode (a fallback fails the call, so the outputs are the step's), every precision mode within
its bound of stock's FP32 LSTM: wavefront stacks, bidirectional and reverse layers, ragged lengths,
initial states, its tiles and overlapped launches, float16 models; and `auto` takes it inside its rule
(heuristics.h, PrefersMmaStep) and says so."""

import numpy as np
import pytest

from lstm_ort.builders import LstmSpec, random_layers
from lstm_ort.ops.identity import PRECISIONS
from lstm_ort.testing import CUDA, make_feeds, max_abs, run_fused, run_stock
from lstm_ort.verify import PRECISION_TOLERANCES

pytestmark = pytest.mark.gpu

FP32_TOL = 2e-5
FP16_MODEL_TOL = 3.9e-3


def bound(precision: str, dtype=np.float32) -> float:
    b = PRECISION_TOLERANCES[precision].atol if precision in PRECISION_TOLERANCES else FP32_TOL
    return max(b, FP16_MODEL_TOL) if dtype == np.float16 else b


# (direction, L, H, B, T): H a multiple of 32 and B >= 16, the shapes the step serves.
SHAPES = [("forward", 3, 64, 40, 20), ("bidirectional", 2, 96, 20, 12), ("reverse", 1, 128, 33, 9),
          ("forward", 4, 256, 64, 10)]


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("direction,L,H,B,T", SHAPES)
def test_forced_step_within_its_bound(direction, L, H, B, T, precision, rng):
    extras = (L + B) % 2 == 1
    spec = LstmSpec(input_size=24, hidden_size=H, num_layers=L, direction=direction, peepholes=extras)
    layers = random_layers(spec, rng)
    feeds = make_feeds(spec, T, B, rng, seq_lens=True, initial_states=extras)
    kw = dict(seq_lens=True, initial_states=extras)
    got = run_fused(spec, layers, feeds, providers=CUDA, precision=precision,
                    debug={"mma_step": "1", "strict": "1"}, **kw)
    err = max_abs(got, run_stock(spec, layers, feeds, **kw))
    assert err <= bound(precision), f"{precision}: {err:.2e} > {bound(precision):.0e}"


@pytest.mark.parametrize("tile", ["32x64", "32x64k2", "64x64", "64x64k2", "64x128", "128x128", "64x128k2"])
@pytest.mark.parametrize("precision,pdl", [("fp32", "0"), ("tf32", "1"), ("bf16", "0")])
@pytest.mark.parametrize("resident", ["1", "0"])  # at these sizes every tile's weights fit on chip
def test_every_tile_and_overlap(tile, precision, pdl, resident, rng):
    spec = LstmSpec(input_size=16, hidden_size=64, num_layers=3, direction="forward")
    layers = random_layers(spec, rng)
    feeds = make_feeds(spec, 8, 40, rng, seq_lens=True, initial_states=True)
    kw = dict(seq_lens=True, initial_states=True)
    debug = {"mma_step": "1", "mma_step_tile": tile, "mma_step_pdl": pdl, "mma_step_resident": resident, "strict": "1"}
    got = run_fused(spec, layers, feeds, providers=CUDA, precision=precision, debug=debug, **kw)
    assert max_abs(got, run_stock(spec, layers, feeds, **kw)) <= bound(precision)


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_float16_models(precision, rng):
    spec = LstmSpec(input_size=16, hidden_size=64, num_layers=2, direction="forward", peepholes=True)
    layers = random_layers(spec, rng)
    for lw in layers:  # the fp32 network on the same fp16-rounded values (test_gpu_parity.test_float16)
        for name in ("W", "R", "B", "P"):
            setattr(lw, name, getattr(lw, name).astype(np.float16).astype(np.float32))
    feeds = make_feeds(spec, 10, 24, rng, np.float16, seq_lens=True, initial_states=True)
    kw = dict(seq_lens=True, initial_states=True)
    got = run_fused(spec, layers, feeds, np.float16, CUDA, precision=precision, debug={"mma_step": "1", "strict": "1"},
                    **kw)
    assert all(g.dtype == np.float16 for g in got)
    ref = run_stock(spec, layers, {k: v.astype(np.float32) if v.dtype == np.float16 else v for k, v in feeds.items()},
                    **kw)
    assert max_abs(got, ref) <= bound(precision, np.float16)


@pytest.mark.xfail(strict=True, reason="measured on the H100: with |h0| = 1e5 the tensor-core step's tf32 error "
                   "against FP32 was 0.13 on this draw; stock's TF32 default and ours agree (1.9e-2 each) on another "
                   "(seed 1 of .gpu/hbig.py) while our other tf32 path stays at 1.7e-4: the scaled-h path is not yet "
                   "shown to be as accurate as stock's TF32 beyond fp16's range")
def test_initial_h_beyond_float16_in_tf32(rng):
    """tf32 runs on fp16 copies: an initial h of 1e5 is scaled by a power of two, not overflowed.
    At |h| = 1e5 the products' TF32 rounding moves gates near zero (1e5 x 1e-3), so tf32's bound
    against FP32 does not hold for stock's TF32 either (0.13 here on the H100, tf32's bound 2e-3):
    the step is held to what stock onnxruntime's CUDA LSTM in its TF32 default gives."""
    spec = LstmSpec(input_size=16, hidden_size=64, num_layers=2, direction="forward")
    layers = random_layers(spec, rng)
    feeds = make_feeds(spec, 6, 32, rng, initial_states=True)
    feeds["initial_h"] = (feeds["initial_h"] * 1e5).astype(np.float32)
    got = run_fused(spec, layers, feeds, providers=CUDA, precision="tf32", debug={"mma_step": "1", "strict": "1"},
                    initial_states=True)
    assert all(np.isfinite(o).all() for o in got)
    fp32 = run_stock(spec, layers, feeds, initial_states=True)
    stock_tf32 = run_stock(spec, layers, feeds, providers=CUDA, initial_states=True)
    assert max_abs(got, fp32) <= max(bound("tf32"), 2 * max_abs(stock_tf32, fp32))


def test_auto_takes_the_step_inside_its_rule_and_says_so(rng):
    from lstm_ort.runtime import native
    from lstm_ort.runtime.nodes import NodeShape

    spec = LstmSpec(input_size=64, hidden_size=512, num_layers=4, direction="forward")
    shape = NodeShape(4, 1, 64, 512, "float32")
    assert "tensor-core step (fp16, 4 layers a launch" in native.describe(shape, 100, 64, "auto", "tf32")
    assert "tensor-core step" not in native.describe(shape, 100, 64, "auto", "fp32")  # 3xTF32 loses at B64
    # precision auto runs the seed's stack in tf32 (AutoRunsAsTf32), its weights resident on chip
    assert ("tensor-core step (fp16, 4 layers a launch, one cooperative launch for every interval, weights resident"
            in native.describe(shape, 100, 64, "auto", "auto"))
    assert "tensor-core step (3xtf32" in native.describe(shape, 100, 256, "auto", "fp32")
    layers = random_layers(spec, rng)
    feeds = make_feeds(spec, 12, 64, rng)
    got = run_fused(spec, layers, feeds, providers=CUDA, precision="tf32", debug={"strict": "1"})
    assert max_abs(got, run_stock(spec, layers, feeds)) <= bound("tf32")
