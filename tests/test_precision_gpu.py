"""Precision modes on the CUDA EP: each mode within its bound (lstm_ort.verify.PRECISION_TOLERANCES;
fp32 the parity grid's 2e-5) of stock's FP32 LSTM, on shapes that take the tensor-core kernel and
shapes that do not, every strategy; long sequences (T=1000) held to the same bounds; and proof that
a reduced mode really runs reduced (its result differs from fp32's)."""

import numpy as np
import pytest

from lstm_ort.builders import LstmSpec, random_layers
from lstm_ort.ops.identity import PRECISIONS
from lstm_ort.testing import CUDA, make_feeds, max_abs, run_fused, run_stock
from lstm_ort.verify import PRECISION_TOLERANCES

pytestmark = pytest.mark.gpu

FP32_TOL = 2e-5


def bound(precision: str) -> float:
    return PRECISION_TOLERANCES[precision].atol if precision in PRECISION_TOLERANCES else FP32_TOL


# (direction, L, H, B, T): B >= 16 takes half tensor cores, B >= 256 tf32 ones, B < 16 the FMA kernel.
SHAPES = [("forward", 3, 64, 16, 30), ("bidirectional", 2, 128, 33, 20), ("forward", 1, 256, 256, 10),
          ("reverse", 2, 40, 64, 25), ("forward", 4, 512, 16, 12), ("forward", 2, 96, 5, 20)]


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("strategy", ["auto", "persistent", "wavefront", "tiled"])
@pytest.mark.parametrize("direction,L,H,B,T", SHAPES)
def test_mode_within_its_bound(direction, L, H, B, T, strategy, precision, rng):
    extras = (L + B) % 2 == 1
    spec = LstmSpec(input_size=24, hidden_size=H, num_layers=L, direction=direction, peepholes=extras)
    layers = random_layers(spec, rng)
    feeds = make_feeds(spec, T, B, rng, seq_lens=extras, initial_states=extras)
    kw = dict(seq_lens=extras, initial_states=extras)
    got = run_fused(spec, layers, feeds, providers=CUDA, strategy=strategy, precision=precision, **kw)
    err = max_abs(got, run_stock(spec, layers, feeds, **kw))
    assert err <= bound(precision), f"{precision}: {err:.2e} > {bound(precision):.0e}"


@pytest.mark.parametrize("precision", PRECISIONS)
def test_long_sequence_within_its_bound(precision, rng, record_property):
    """T=1000 on unit-scale inputs: rounding errors of a reduced mode must not grow past its bound."""
    spec = LstmSpec(input_size=64, hidden_size=256, num_layers=2, direction="forward")
    layers = random_layers(spec, rng)
    feeds = make_feeds(spec, 1000, 32, rng)
    got = run_fused(spec, layers, feeds, providers=CUDA, precision=precision)
    ref = run_stock(spec, layers, feeds, providers=CUDA)  # stock CUDA runs use_tf32=0 here: FP32
    err = max_abs(got, ref)
    rel = err / max(float(np.abs(ref[0]).max()), 1e-30)
    record_property("max_abs", err)
    record_property("relative", rel)
    print(f"T=1000 {precision}: max-abs {err:.2e}, relative {rel:.2e}")
    assert err <= bound(precision), f"{precision}: {err:.2e}"


@pytest.mark.parametrize("precision,batch", [("tf32", 256), ("fp16", 16), ("bf16", 16)])
def test_reduced_mode_runs_reduced(precision, batch, rng):
    """Where a mode takes tensor cores, its result is not fp32's: the attribute reaches the kernel."""
    spec = LstmSpec(input_size=32, hidden_size=128, num_layers=2)
    layers = random_layers(spec, rng)
    feeds = make_feeds(spec, 20, batch, rng)
    fp32 = run_fused(spec, layers, feeds, providers=CUDA, precision="fp32")
    reduced = run_fused(spec, layers, feeds, providers=CUDA, precision=precision)
    assert max_abs(reduced, fp32) > 1e-6
    assert max_abs(reduced, fp32) <= bound(precision)


def test_describe_names_the_tensor_cores():
    from lstm_ort.runtime import native
    from lstm_ort.runtime.nodes import NodeShape

    shape = NodeShape(layers=2, directions=1, input_size=64, hidden_size=256, dtype="float32")
    assert "tensor cores, fp16" in native.describe(shape, 100, 64, "auto", "fp16")
    assert "tensor cores" not in native.describe(shape, 100, 64, "auto", "fp32")
