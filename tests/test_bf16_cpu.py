"""Precision bf16 on the CPU (docs/ops.md, "bf16 on the CPU"): bf16 weights and inputs to the
products, fp32 sums, cell and state, on AVX512-BF16 or AMX-BF16, chosen at run time; within its
bound (verify.PRECISION_TOLERANCES["bf16"]) of stock's fp32 on the feature grid, with each unit this
CPU has; refused with the reason where the CPU has neither."""

import subprocess

import numpy as np
import onnxruntime as ort
import pytest

from lstm_ort.builders import LstmSpec, fused_model, random_layers
from lstm_ort.runtime.native import PrecisionRefused, decide_precision, describe_cpu
from lstm_ort.runtime.nodes import NodeShape
from lstm_ort.runtime.session import InferenceSession
from lstm_ort.testing import (FEATURE_GRID, child_python, factored_layers, feature_spec, make_feeds, max_abs, run_fused,
                              run_stock)
from lstm_ort.verify import PRECISION_TOLERANCES

CPU = ["CPUExecutionProvider"]
BOUND = PRECISION_TOLERANCES["bf16"]


def _cpu_runs_bf16() -> bool:
    try:
        return decide_precision("cpu", "bf16").runs == "bf16"
    except PrecisionRefused:
        return False


needs_bf16 = pytest.mark.skipif(not _cpu_runs_bf16(), reason="this CPU has no AVX512-BF16 or AMX-BF16")


def _within(got, ref, bound=BOUND) -> float:
    """The largest excess of |got - ref| over the bound's relative part; the bound holds where it is
    at most bound.atol."""
    return max(bound.excess(r, np.abs(g.astype(np.float64) - r.astype(np.float64))) for g, r in zip(got, ref))


@needs_bf16
@pytest.mark.parametrize("direction,layout,seq_lens,states,peepholes,clip,input_forget,acts", FEATURE_GRID[::4])
def test_features_within_the_bound_of_stock_fp32(direction, layout, seq_lens, states, peepholes, clip, input_forget,
                                                  acts, rng):
    spec = feature_spec(direction, layout, peepholes=peepholes, clip=clip, input_forget=input_forget, acts=acts,
                        input_size=13, hidden_size=40, num_layers=2)
    layers = random_layers(spec, rng)
    feeds = make_feeds(spec, 9, 5, rng, seq_lens=seq_lens, initial_states=states)
    kw = dict(seq_lens=seq_lens, initial_states=states)
    ref = run_stock(spec, layers, feeds, **kw)
    got = run_fused(spec, layers, feeds, precision="bf16", **kw)
    assert _within(got, ref) <= BOUND.atol


@needs_bf16
@pytest.mark.parametrize("I,H,L,D,T,B", [(28, 200, 2, 2, 30, 8), (64, 256, 1, 1, 50, 33), (100, 129, 2, 1, 5, 1),
                                         (16, 64, 1, 2, 40, 17), (7, 9, 3, 1, 3, 2),
                                         # either side of the rows from which a step multiplies its input too
                                         (28, 200, 1, 2, 12, 3), (28, 200, 1, 2, 12, 4)])
def test_shapes_within_the_bound_and_bf16_really_ran(I, H, L, D, T, B, rng):
    """Tile shapes of both units (1-3 rows on vectors, AMX tiles of 16 rows and their tails, odd H and
    I padded to a tile's depth), within the bound; and not fp32 (bf16 rounding shows) where the
    precision decision runs bf16 at this size, else fp32's results bit for bit (a CPU whose bf16
    products run at half fp32's rate: Bf16PaysAtHalfRate, custom_ops/precision.h)."""
    spec = LstmSpec(input_size=I, hidden_size=H, num_layers=L, direction="bidirectional" if D == 2 else "forward")
    layers = random_layers(spec, rng)
    feeds = make_feeds(spec, T, B, rng, seq_lens=True, initial_states=True)
    kw = dict(seq_lens=True, initial_states=True)
    fp32 = run_fused(spec, layers, feeds, **kw)
    got = run_fused(spec, layers, feeds, precision="bf16", **kw)
    assert _within(got, run_stock(spec, layers, feeds, **kw)) <= BOUND.atol
    if decide_precision("cpu", "bf16", H, B).runs == "bf16":
        assert max_abs(got, fp32) > 1e-5  # bf16 products, not fp32's
        # From 4 rows (kMinRowsToMultiplyInputInSteps) every layer's steps multiply its input too.
        plan = describe_cpu(NodeShape(L, D, I, H, "float32"), T, B, precision="bf16")
        assert plan.count("input multiplied in the step") == (L if B >= 4 else 0), plan
    else:
        assert max_abs(got, fp32) == 0.0


@needs_bf16
def test_float16_storage_runs_bf16_products(rng):
    spec = LstmSpec(input_size=11, hidden_size=24, direction="bidirectional")
    layers = random_layers(spec, rng)
    feeds = make_feeds(spec, 6, 1, rng, dtype=np.float16)  # one row: bf16 on every bf16 unit
    fp32 = run_fused(spec, layers, feeds, np.float16)
    got = run_fused(spec, layers, feeds, np.float16, precision="bf16")
    assert all(o.dtype == np.float16 for o in got)
    assert 0 < max_abs(got, fp32) <= 5e-2


@needs_bf16
def test_amx_results_do_not_depend_on_the_threads(rng):
    """On AMX each row's sums run in one order whichever rows share a tile: a batch split over two
    threads gives the one-thread result bit for bit (docs/ops.md)."""
    if "AMX-BF16" not in decide_precision("cpu", "bf16").words:
        pytest.skip("the bf16 unit here is not AMX")
    spec = LstmSpec(input_size=20, hidden_size=48, num_layers=2)
    model = fused_model(spec, random_layers(spec, rng), seq_lens=True)
    feeds = make_feeds(spec, 30, 13, rng, seq_lens=True)  # 7.2M flops a layer: worth a second thread
    plan = describe_cpu(NodeShape(2, 1, 20, 48, "float32"), 30, 13, precision="bf16", threads=2)
    assert "batch rows in 2 groups" in plan  # the batch really splits on two threads
    outs = []
    for threads in (1, 2):
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        outs.append(InferenceSession(model, options, providers=CPU, precision="bf16").run(None, feeds))
    assert all(np.array_equal(a, b) for a, b in zip(*outs))


_UNIT_PROBE = """
import sys, numpy as np, onnxruntime as ort
from lstm_ort.runtime.session import InferenceSession
feeds = dict(np.load("feeds.npz"))
out = InferenceSession("m.onnx", providers=["CPUExecutionProvider"], precision="bf16").run(None, feeds)
np.savez("out.npz", *out)
"""


def _run_with(unit: str, model, feeds, folder):
    (folder / "m.onnx").write_bytes(model.SerializeToString())
    np.savez(folder / "feeds.npz", **feeds)
    argv, env = child_python(_UNIT_PROBE, env={"LSTM_ORT_CPU_BF16_ISA": unit})
    return subprocess.run(argv, capture_output=True, text=True, env=env, cwd=folder, timeout=300)


@needs_bf16
@pytest.mark.parametrize("unit", ["amx", "avx512bf16"])
def test_each_unit_within_the_bound(unit, tmp_path, rng):
    spec = LstmSpec(input_size=30, hidden_size=72, num_layers=2, direction="bidirectional")
    layers = random_layers(spec, rng)
    feeds = make_feeds(spec, 12, 20, rng, seq_lens=True)
    done = _run_with(unit, fused_model(spec, layers, seq_lens=True), feeds, tmp_path)
    if done.returncode != 0 and "lacks AMX-BF16" in done.stderr:
        pytest.skip("this CPU lacks AMX-BF16")
    assert done.returncode == 0, done.stderr[-2000:]
    got = [a for _, a in sorted(np.load(tmp_path / "out.npz").items())]
    assert _within(got, run_stock(spec, layers, feeds, seq_lens=True)) <= BOUND.atol


def test_refused_with_the_reason_where_the_cpu_has_no_bf16(tmp_path, rng):
    """LSTM_ORT_CPU_BF16_ISA=none: as on a CPU without bf16 units, a bf16 node is refused when the
    session is made, naming why and what runs it instead."""
    spec = LstmSpec(input_size=5, hidden_size=8)
    done = _run_with("none", fused_model(spec, random_layers(spec, rng)), make_feeds(spec, 3, 2, rng), tmp_path)
    assert done.returncode != 0
    assert "precision bf16 on the CPU needs AVX512-BF16 or AMX-BF16, which this CPU lacks" in done.stderr
    assert "lstm_ort.precision=fp32" in done.stderr


@needs_bf16
def test_the_plan_says_bf16():
    text = describe_cpu(NodeShape(1, 1, 16, 64, "float32"), 20, 1, precision="bf16")
    assert "fused: bf16 weights" in text and ("AMX-BF16" in text or "AVX512-BF16" in text)
    assert "fused: fp32 weights" in describe_cpu(NodeShape(1, 1, 16, 64, "float32"), 20, 8, precision="fp32")
    # At eight rows the plan says what the precision decision says for this CPU at that size.
    decision = decide_precision("cpu", "bf16", 64, 8)
    assert f"fused: {decision.runs} weights, {decision.words}" in describe_cpu(
        NodeShape(1, 1, 16, 64, "float32"), 20, 8, precision="bf16")


@needs_bf16
def test_half_rate_bf16_runs_each_call_in_its_faster_format(tmp_path, rng):
    """Where bf16 products run at half fp32's rate, one bf16 node runs a call of one row in bf16 and
    a call of eight rows in fp32 (fp32's results bit for bit), each packing its format when first
    needed; a unit named by LSTM_ORT_CPU_BF16_ISA runs bf16 at every size."""
    if decide_precision("cpu", "bf16", 64, 8).runs == "bf16":
        pytest.skip("this CPU runs bf16 at every size")
    spec = LstmSpec(input_size=16, hidden_size=64)
    layers = random_layers(spec, rng)
    model = fused_model(spec, layers)
    bf16 = InferenceSession(model, providers=CPU, precision="bf16")
    for B in (1, 8, 1):
        feeds = make_feeds(spec, 6, B, rng)
        got = bf16.run(None, feeds)
        fp32 = InferenceSession(model, providers=CPU).run(None, feeds)
        assert (max_abs(got, fp32) > 1e-5) == (B == 1)
        assert _within(got, run_stock(spec, layers, feeds)) <= BOUND.atol
    feeds = make_feeds(spec, 6, 8, rng)
    done = _run_with("avx512bf16", model, feeds, tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    forced = [a for _, a in sorted(np.load(tmp_path / "out.npz").items())]
    assert max_abs(forced, InferenceSession(model, providers=CPU).run(None, feeds)) > 1e-5


@needs_bf16
def test_factored_weights_keep_fp32(rng):
    """bf16 takes whole weights; a factored node in bf16 runs its fp32 path (docs/ops.md)."""
    spec = LstmSpec(input_size=12, hidden_size=16)
    model = fused_model(spec, factored_layers(random_layers(spec, rng), 4, 5))
    feeds = make_feeds(spec, 5, 3, rng)
    fp32 = InferenceSession(model, providers=CPU).run(None, feeds)
    got = InferenceSession(model, providers=CPU, precision="bf16").run(None, feeds)
    assert max_abs(got, fp32) == 0.0
