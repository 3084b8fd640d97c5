"""Precision modes on the CUDA EP: each mode within its bound (lstm_ort.verify.PRECISION_TOLERANCES;
fp32 the parity grid's 2e-5) of stock's FP32 LSTM, on shapes that take the tensor-core kernel and
shapes that do not, every strategy; long sequences (T=1000) held to the same bounds; and proof that
a reduced mode really runs reduced (its result differs from fp32's)."""

import dataclasses
import threading

import numpy as np
import pytest

from lstm_ort.builders import LstmSpec, fused_model, random_layers
from lstm_ort.ops.identity import PRECISIONS
from lstm_ort.runtime.session import InferenceSession
from lstm_ort.testing import (CUDA, DIRECTIONS, make_feeds, max_abs, run_fused, run_fused_strict, run_stock,
                              weights_as_graph_input)
from lstm_ort.verify import PRECISION_TOLERANCES

pytestmark = pytest.mark.gpu

FP32_TOL = 2e-5


def bound(precision: str) -> float:
    return PRECISION_TOLERANCES[precision].atol if precision in PRECISION_TOLERANCES else FP32_TOL


# (direction, L, H, B, T): B >= 16 takes half tensor cores, B >= 256 tf32 ones, B < 16 the FMA kernel;
# H1024 B32 takes v1's cuBLAS step on 16-bit weights in tf32 and auto, H512 B256 in every reduced mode.
SHAPES = [("forward", 3, 64, 16, 30), ("bidirectional", 2, 128, 33, 20), ("forward", 1, 256, 256, 10),
          ("reverse", 2, 40, 64, 25), ("forward", 4, 512, 16, 12), ("forward", 2, 96, 5, 20),
          ("forward", 2, 1024, 32, 10), ("bidirectional", 1, 512, 256, 9)]


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("strategy", ["auto", "persistent", "wavefront", "tiled"])
@pytest.mark.parametrize("direction,L,H,B,T", SHAPES)
def test_mode_within_its_bound(direction, L, H, B, T, strategy, precision, rng):
    extras = (L + B) % 2 == 1
    spec = LstmSpec(input_size=24, hidden_size=H, num_layers=L, direction=direction, peepholes=extras)
    layers = random_layers(spec, rng)
    feeds = make_feeds(spec, T, B, rng, seq_lens=extras, initial_states=extras)
    kw = dict(seq_lens=extras, initial_states=extras)
    got = run_fused_strict(spec, layers, feeds, strategy=strategy, precision=precision, **kw)
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
    fp32 = run_fused_strict(spec, layers, feeds, precision="fp32")
    reduced = run_fused_strict(spec, layers, feeds, precision=precision)
    assert max_abs(reduced, fp32) > 1e-6
    assert max_abs(reduced, fp32) <= bound(precision)


def test_describe_names_the_tensor_cores():
    from lstm_ort.runtime import native
    from lstm_ort.runtime.nodes import NodeShape

    shape = NodeShape(layers=2, directions=1, input_size=64, hidden_size=256, dtype="float32")
    assert "tensor cores, fp16" in native.describe(shape, 100, 64, "auto", "fp16")
    assert "tensor cores" not in native.describe(shape, 100, 64, "auto", "fp32")


@pytest.mark.parametrize("precision", ["tf32", "fp16", "bf16"])
@pytest.mark.parametrize("B", [1, 3, 8, 9, 17])
@pytest.mark.parametrize("direction", DIRECTIONS)
def test_gemm_step_on_half_weights(direction, B, precision, monkeypatch, rng):
    """v1's cuBLAS step in the reduced modes reads a 16-bit copy of R: streamed for 1-8 rows,
    cuBLAS's 16-bit GEMM (h in 16 bits too) above; ragged lengths (inactive rows keep their copy of
    h) and initial states, together on the cuBLAS cases. Forced on at H=301 (partial tiles and splits)."""
    monkeypatch.setenv("LSTM_ORT_GEMM_STEP", "1")
    kw = dict(seq_lens=B % 2 == 1, initial_states=B != 3)
    spec = LstmSpec(input_size=7, hidden_size=301, num_layers=2, direction=direction)
    layers = random_layers(spec, rng)
    feeds = make_feeds(spec, 12, B, rng, **kw)
    got = run_fused_strict(spec, layers, feeds, precision=precision, **kw)
    err = max_abs(got, run_stock(spec, layers, feeds, **kw))
    assert err <= bound(precision), f"{precision}: {err:.2e} > {bound(precision):.0e}"


@pytest.mark.parametrize("B", [2, 5])
def test_half_weights_keep_fp32_range(B, monkeypatch, rng):
    """One recurrent weight at 2^17, beyond fp16's 65504, the others fp16 values, and inputs exact in
    TF32: the fp16 copy's power-of-two scale (here 2^-3 on every weight) makes tf32's streamed step
    compute what fp32's does. Unscaled the copy would hold inf; a scale not removed would change
    every gate 8-fold. B >= 2, where fp32 streams too."""
    monkeypatch.setenv("LSTM_ORT_GEMM_STEP", "1")
    spec = LstmSpec(input_size=8, hidden_size=301, num_layers=1, direction="bidirectional")
    tf32_exact = lambda a: (a.view(np.uint32) & np.uint32(0xFFFFE000)).view(np.float32)  # noqa: E731
    layers = [dataclasses.replace(layer, W=tf32_exact(layer.W), R=layer.R.astype(np.float16).astype(np.float32))
              for layer in random_layers(spec, rng)]
    layers[0].R[:, 0, 0] = 2.0**17  # one unit's input gate, from one unit of h
    feeds = make_feeds(spec, 10, B, rng)
    feeds["X"] = tf32_exact(feeds["X"])
    tf32 = run_fused(spec, layers, feeds, providers=CUDA, precision="tf32")
    fp32 = run_fused(spec, layers, feeds, providers=CUDA, precision="fp32")
    assert all(np.isfinite(out).all() for out in tf32)
    assert max_abs(tf32, fp32) <= 1e-5


@pytest.mark.parametrize("precision", ["fp16", "bf16"])
def test_projection_copies_keep_inputs_beyond_fp16(precision, rng):
    """Inputs past float16's 65504 (x at 1e5, W at 1e-5 of its scale, so the gates stay unit-scale)
    through the reduced modes' bfloat16 copies of the projection (20,480 rows x 512 inputs x 4,096
    gates, past ProjectsWithBf16Copies's 2^35): finite, and within the mode's bound of stock's fp32."""
    spec = LstmSpec(input_size=512, hidden_size=1024, num_layers=1)
    layers = [dataclasses.replace(layer, W=layer.W * np.float32(1e-5)) for layer in random_layers(spec, rng)]
    feeds = make_feeds(spec, 80, 256, rng)
    feeds["X"] = feeds["X"] * np.float32(1e5)
    assert np.abs(feeds["X"]).max() > 65504
    got = run_fused(spec, layers, feeds, providers=CUDA, precision=precision)
    ref = run_stock(spec, layers, feeds, providers=CUDA)
    assert all(np.isfinite(out).all() for out in got)
    assert max_abs(got, ref) <= bound(precision)


def test_large_initial_h_stays_out_of_the_half_copy(monkeypatch, rng):
    """initial_h far beyond fp16's range, on cuBLAS's 16-bit step (B=9): the first step multiplies it
    as fp32 operands, as the fp32-weight path does, and the cell's h (|h| <= 1) fills the 16-bit copy
    from then on; a copy of initial_h itself would be inf."""
    monkeypatch.setenv("LSTM_ORT_GEMM_STEP", "1")
    spec = LstmSpec(input_size=7, hidden_size=301, num_layers=1, direction="bidirectional")
    layers = random_layers(spec, rng)
    feeds = make_feeds(spec, 10, 9, rng, initial_states=True)
    feeds["initial_h"] = feeds["initial_h"] * np.float32(1e5)
    half = run_fused(spec, layers, feeds, providers=CUDA, precision="tf32", initial_states=True)
    monkeypatch.setenv("LSTM_ORT_HALF_STEP_WEIGHTS", "0")
    fp32_weights = run_fused(spec, layers, feeds, providers=CUDA, precision="tf32", initial_states=True)
    assert all(np.isfinite(out).all() for out in half)
    assert max_abs(half, fp32_weights) <= bound("tf32")


def _exact_in(a: np.ndarray, mantissa_bits: int) -> np.ndarray:
    """a with its float32 mantissa cut to the format's bits (TF32 10, bfloat16 7): exact in it."""
    return (a.view(np.uint32) & np.uint32((0xFFFFFFFF << (23 - mantissa_bits)) & 0xFFFFFFFF)).view(np.float32)


def _tf32_exact(a: np.ndarray) -> np.ndarray:
    return _exact_in(a, 10)


@pytest.mark.parametrize("direction", DIRECTIONS)
def test_tf32_reads_kept_weights_as_stored_ones(direction, rng):
    """tf32 with a constant W reads the kept hi half, transposed to K-major (gemm/kept_split.h),
    where rows x layer input >= 512 x 1024 (both layers here: 640 rows of 1024 inputs); W fed at run
    time is read as stored. On W and X that TF32 holds exactly, both must agree to accumulation
    order: a misplaced row or direction of the transposed copy would be off by O(1)."""
    spec = LstmSpec(input_size=1024, hidden_size=512 if direction == "bidirectional" else 1024, num_layers=2,
                    direction=direction)
    layers = [dataclasses.replace(lw, W=_tf32_exact(lw.W)) for lw in random_layers(spec, rng)]
    feeds = make_feeds(spec, 40, 16, rng, seq_lens=True, initial_states=True)
    feeds["X"] = _tf32_exact(feeds["X"])
    kw = {"seq_lens": True, "initial_states": True}
    kept = InferenceSession(fused_model(spec, layers, **kw), providers=CUDA, precision="tf32").run(None, feeds)
    model, weights = weights_as_graph_input(fused_model(spec, layers, **kw))
    stored = InferenceSession(model, providers=CUDA, precision="tf32").run(None, {**feeds, **weights})
    assert max_abs(kept, stored) <= 1e-5
    assert max_abs(kept, run_stock(spec, layers, feeds, **kw)) <= bound("tf32")


@pytest.mark.parametrize("precision", ["fp16", "bf16"])
@pytest.mark.parametrize("direction", ["forward", "bidirectional"])
def test_reduced_modes_read_kept_bf16_copy_as_a_per_call_one(direction, precision, rng):
    """fp16 and bf16 with a constant W multiply a bfloat16 copy of W kept across calls
    (gemm/kept_split.h); W fed at run time is copied per call from 2^35 multiply-adds a direction
    (ProjectsWithBf16Copies: rows x layer input x 4H; here 8192 rows x 1024 x 4096 forward, 16384 x
    1024 x 2048 both ways, in both layers). The same rounding of the same W: a misplaced layer, row or
    direction of the kept copy would be off by O(1). Two calls: the first makes the copy, the second
    reads it."""
    H, T = (1024, 8) if direction == "forward" else (512, 16)
    spec = LstmSpec(input_size=1024, hidden_size=H, num_layers=2, direction=direction)
    layers = random_layers(spec, rng)
    feeds = make_feeds(spec, T, 1024, rng, initial_states=True)
    kept_session = InferenceSession(fused_model(spec, layers, initial_states=True), providers=CUDA,
                                    precision=precision)
    model, weights = weights_as_graph_input(fused_model(spec, layers, initial_states=True))
    stored = InferenceSession(model, providers=CUDA, precision=precision).run(None, {**feeds, **weights})
    expect = run_stock(spec, layers, feeds, initial_states=True)
    for _ in range(2):
        kept = kept_session.run(None, feeds)
        assert max_abs(kept, stored) <= 1e-5
        assert max_abs(kept, expect) <= bound(precision)


def _bf16_exact(a: np.ndarray) -> np.ndarray:
    return _exact_in(a, 7)


@pytest.mark.parametrize("precision", ["fp16", "bf16"])
@pytest.mark.parametrize("shape", [(1, "bidirectional", 37, 301, 7, 5), (1, "forward", 1, 64, 3, 1),
                                   (2, "bidirectional", 37, 301, 7, 5), (3, "forward", 28, 200, 1, 5)])
def test_reduced_modes_read_kept_bf16_copy_at_small_sizes(shape, precision, rng):
    """Far below the 2^35 multiply-adds a per-call copy of W needs, a constant W is still multiplied
    as its kept bfloat16 copy (ProjectsWithBf16Copies with the copy kept); W fed at run time is
    multiplied by cuBLAS on the fp32 operands. On W and X that bfloat16 holds exactly, a first layer's
    two products are exact and must agree to accumulation order: a misplaced row or direction of
    the kept copy, at odd widths where I differs from H, would be off by O(1). A deeper layer's
    input (h) is rounded by each product its own way, so a stack is held to the mode's bound of
    stock's fp32, which a misplaced layer of the copy would also miss by O(1)."""
    L, direction, I, H, T, B = shape
    spec = LstmSpec(input_size=I, hidden_size=H, num_layers=L, direction=direction)
    layers = [dataclasses.replace(lw, W=_bf16_exact(lw.W)) for lw in random_layers(spec, rng)]
    feeds = make_feeds(spec, T, B, rng, seq_lens=True, initial_states=True)
    feeds["X"] = _bf16_exact(feeds["X"])
    kw = {"seq_lens": True, "initial_states": True}
    kept_session = InferenceSession(fused_model(spec, layers, **kw), providers=CUDA, precision=precision)
    model, weights = weights_as_graph_input(fused_model(spec, layers, **kw))
    stored = InferenceSession(model, providers=CUDA, precision=precision).run(None, {**feeds, **weights})
    expect = run_stock(spec, layers, feeds, **kw)
    for _ in range(2):  # the first call makes the copy, the second reads it
        kept = kept_session.run(None, feeds)
        if L == 1:
            assert max_abs(kept, stored) <= 1e-4
        assert max_abs(kept, expect) <= bound(precision)
        assert max_abs(stored, expect) <= bound(precision)


def test_kept_halves_made_as_calls_ask(rng):
    """auto runs tf32 at B >= 256 (the kept hi half only) and fp32 below (3xTF32 from 1024 rows:
    hi and lo): lo is made by the first call that needs it, after hi, and on a fresh session by
    two threads at once; every call stays within its mode's bound of stock FP32."""
    spec = LstmSpec(input_size=1024, hidden_size=128, num_layers=2, direction="bidirectional")
    layers = random_layers(spec, rng)
    model = fused_model(spec, layers)
    cases = []
    for T, B, mode in ((4, 256, "tf32"), (40, 32, "fp32"), (2, 512, "tf32")):
        feeds = make_feeds(spec, T, B, rng)
        cases.append((feeds, run_stock(spec, layers, feeds), bound(mode)))
    sess = InferenceSession(model, providers=CUDA, precision="auto")
    for feeds, expect, tol in cases + cases:
        assert max_abs(sess.run(None, feeds), expect) <= tol
    fresh = InferenceSession(model, providers=CUDA, precision="auto")
    excess = []

    def work(feeds, expect, tol):
        excess.extend(max_abs(fresh.run(None, feeds), expect) - tol for _ in range(5))

    threads = [threading.Thread(target=work, args=case) for case in cases[:2]]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(excess) == 10 and max(excess) <= 0, excess
