"""The CPU kernel's runtime behaviour: thread counts from the session, weights packed at kernel
creation or (as graph inputs) per call, streaming T=1 calls, fp16 storage, and no memory growth
across runs."""

import subprocess
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import helper

from lstm_ort.builders import LstmSpec, fused_model, random_layers
from lstm_ort.testing import child_python, make_feeds, max_abs, run_stock

try:  # the project's modules are being moved; one place to update
    from lstm_ort.runtime.session import register
except ImportError:
    from lstm_ort.session import register

TOL = 1e-5


def session(model: onnx.ModelProto, threads: int) -> ort.InferenceSession:
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    register(so)
    return ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])


def run(sess, feeds):
    return sess.run(None, feeds)


# Shapes that take each threading path with 2 threads: batch split, unit split (B=1, large step),
# one direction per thread, the directions in turn with their units split (2 x 9 MiB of recurrent
# weights, beyond the shared cache), small (one thread), layout 1 and lengths; and calls of one
# step, whose step multiplies the input itself (LayerPlan::step_projects, decided for the cores
# whatever the pool): row groups, panels split, both directions, a stack.
THREAD_CASES = [
    dict(H=256, B=16, T=1, L=1, direction="forward"),
    dict(H=512, B=1, T=1, L=1, direction="forward"),
    dict(H=40, B=9, T=1, L=2, direction="bidirectional"),
    dict(H=128, B=8, T=20, L=1, direction="forward"),
    dict(H=256, B=1, T=9, L=2, direction="forward"),
    dict(H=200, B=2, T=7, L=1, direction="reverse"),
    dict(H=96, B=5, T=11, L=2, direction="bidirectional"),
    dict(H=768, B=3, T=4, L=1, direction="bidirectional"),
    dict(H=17, B=1, T=3, L=1, direction="forward"),
]


def case_id(case: dict) -> str:
    return "-".join(f"{k}{v}" for k, v in case.items())


def case_stack(case: dict, input_size: int, rng, layout: int = 0):
    """The spec, weights and feeds (with lengths and initial states) of a THREAD_CASES / STEP_PATHS case."""
    spec = LstmSpec(input_size=input_size, hidden_size=case["H"], num_layers=case["L"], direction=case["direction"],
                    layout=layout)
    layers = random_layers(spec, rng)
    return spec, layers, make_feeds(spec, case["T"], case["B"], rng, seq_lens=True, initial_states=True)


@pytest.mark.parametrize("case", THREAD_CASES, ids=case_id)
@pytest.mark.parametrize("layout", [0, 1])
def test_threads_one_and_two_agree(case, layout, rng):
    spec, layers, feeds = case_stack(case, 13, rng, layout)
    model = fused_model(spec, layers, seq_lens=True, initial_states=True)
    one = run(session(model, 1), feeds)
    two = run(session(model, 2), feeds)
    for a, b in zip(one, two):  # the same arithmetic per element, however the work is split
        np.testing.assert_array_equal(a, b)
    stock = run_stock(spec, layers, feeds, seq_lens=True, initial_states=True)
    assert max_abs(two, stock) <= TOL


def weights_as_inputs(model: onnx.ModelProto) -> onnx.ModelProto:
    """The same model with its packed weights as graph inputs (not constant at kernel creation)."""
    g = model.graph
    moved = [t for t in g.initializer if t.name.endswith("_packed")]
    for t in moved:
        g.input.append(helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)))
    kept = [t for t in g.initializer if not t.name.endswith("_packed")]
    del g.initializer[:]
    g.initializer.extend(kept)
    return model


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("peepholes", [False, True])
def test_weights_as_graph_inputs(threads, peepholes, rng):
    spec = LstmSpec(input_size=7, hidden_size=40, num_layers=2, direction="bidirectional", peepholes=peepholes)
    layers = random_layers(spec, rng)
    feeds = make_feeds(spec, 6, 3, rng)
    fused = fused_model(spec, layers)
    weights = {t.name: onnx.numpy_helper.to_array(t) for t in fused.graph.initializer}
    sess = session(weights_as_inputs(fused), threads)
    got = run(sess, {**feeds, **weights})
    assert max_abs(got, run_stock(spec, layers, feeds)) <= TOL
    # New weights through the same session: nothing packed on an earlier call is reused.
    layers2 = random_layers(spec, rng)
    weights2 = {t.name: onnx.numpy_helper.to_array(t) for t in fused_model(spec, layers2).graph.initializer}
    got2 = run(sess, {**feeds, **weights2})
    assert max_abs(got2, run_stock(spec, layers2, feeds)) <= TOL


@pytest.mark.parametrize("H,B", [(32, 1), (128, 1), (64, 4)])
def test_streaming_t1_matches_one_call(H, B, rng):
    """Forward T=1 calls that feed Y_h/Y_c back give what one call over the whole sequence gives."""
    T = 6
    spec = LstmSpec(input_size=11, hidden_size=H, num_layers=2)
    layers = random_layers(spec, rng)
    feeds = make_feeds(spec, T, B, rng, initial_states=True)
    whole = run(session(fused_model(spec, layers, initial_states=True), 2), feeds)
    sess = session(fused_model(spec, layers, initial_states=True), 2)
    h, c, ys = feeds["initial_h"], feeds["initial_c"], []
    for t in range(T):
        y, h, c = run(sess, {"X": feeds["X"][t:t + 1], "initial_h": h, "initial_c": c})
        ys.append(y)
    assert max_abs([np.concatenate(ys), h, c], whole) <= TOL


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
@pytest.mark.parametrize("H,B", [(48, 1), (256, 1), (64, 16)])
def test_t1_against_stock(direction, H, B, threads, rng):
    spec = LstmSpec(input_size=19, hidden_size=H, num_layers=2, direction=direction)
    layers = random_layers(spec, rng)
    feeds = make_feeds(spec, 1, B, rng, initial_states=True)
    got = run(session(fused_model(spec, layers, initial_states=True), threads), feeds)
    assert max_abs(got, run_stock(spec, layers, feeds, initial_states=True)) <= TOL


@pytest.mark.parametrize("threads", [1, 2])
def test_float16_storage_large(threads, rng):
    """fp16 storage through the threaded, prepacked path: close to the fp32 network on fp16-rounded values."""
    spec = LstmSpec(input_size=24, hidden_size=160, num_layers=2, direction="bidirectional")
    layers = random_layers(spec, rng)
    for lw in layers:
        for name in ("W", "R", "B"):
            setattr(lw, name, getattr(lw, name).astype(np.float16).astype(np.float32))
    feeds16 = make_feeds(spec, 12, 6, rng, np.float16)
    feeds32 = {k: v.astype(np.float32) for k, v in feeds16.items()}
    got = run(session(fused_model(spec, layers, np.float16), threads), feeds16)
    assert all(g.dtype == np.float16 for g in got)
    ref = run_stock(spec, layers, feeds32)
    assert max_abs([g.astype(np.float32) for g in got], ref) <= 5e-3


_LEAK_PROBE = """
import sys
import numpy as np
import onnxruntime as ort
from lstm_ort.builders import LstmSpec, fused_model, random_layers
from lstm_ort.runtime.session import register
from lstm_ort.testing import make_feeds

def rss_kib():
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))

rng = np.random.default_rng(0)
spec = LstmSpec(input_size=32, hidden_size=128, num_layers=2, direction="bidirectional")
so = ort.SessionOptions()
so.intra_op_num_threads = int(sys.argv[1])
register(so)
sess = ort.InferenceSession(fused_model(spec, random_layers(spec, rng), seq_lens=True).SerializeToString(), so,
                            providers=["CPUExecutionProvider"])
# Two shape classes: with the per-class choice of kernel (cpu_kernel auto) every candidate's weights
# are held while they are measured, one kernel's once the choice settles.
feeds = [make_feeds(spec, 20, 8, rng, seq_lens=True), make_feeds(spec, 9, 3, rng, seq_lens=True)]
for k in range(300):  # to a steady state: allocator arenas and ORT's pool threads touch their memory first
    sess.run(None, feeds[k % 2])
before = rss_kib()
for k in range(300):
    sess.run(None, feeds[k % 2])
print(rss_kib() - before)
"""


@pytest.mark.parametrize("cpu_kernel", ["fused", "auto"])
@pytest.mark.parametrize("threads", [1, 2])
def test_repeated_runs_do_not_grow_memory(threads, cpu_kernel, tmp_path):
    # In a process of its own: the suite's process also holds other tests' sessions, Ray's threads and
    # Python's garbage, whose memory moved this process-wide figure by up to 14 MB under load.
    if not Path("/proc/self/status").exists():
        pytest.skip("no /proc/self/status")
    argv, env = child_python(_LEAK_PROBE, str(threads), env={"LSTM_ORT_CPU_KERNEL": cpu_kernel})
    out = subprocess.run(argv, capture_output=True, text=True, cwd=tmp_path, timeout=300, env=env)
    assert out.returncode == 0, out.stderr[-2000:]
    grown = int(out.stdout.split()[-1])
    assert grown < 2048, f"resident memory grew by {grown} KiB over 300 runs"


# Shapes for the step's paths: lone row, few rows (weights streamed, whole strips), row tiles with
# k-blocks (H > 256, H not a multiple of 8 or of 256), uneven tiles (B = 14), both directions.
STEP_PATHS = [
    dict(H=72, B=1, T=5, L=2, direction="forward"),
    dict(H=300, B=8, T=4, L=1, direction="bidirectional"),
    dict(H=260, B=14, T=3, L=2, direction="reverse"),
    dict(H=40, B=64, T=6, L=1, direction="forward"),
]


@pytest.mark.parametrize("case", STEP_PATHS, ids=case_id)
@pytest.mark.parametrize("threads", [1, 2])
def test_zero_first_step_matches_zero_initial_states(case, threads, rng):
    """Without initial_h the first step skips the recurrent product; that must be exactly the result of
    zero initial states fed explicitly, and agree with stock."""
    spec, layers, feeds = case_stack(case, 23, rng)
    zeros = dict(feeds, initial_h=np.zeros_like(feeds["initial_h"]), initial_c=np.zeros_like(feeds["initial_c"]))
    given = run(session(fused_model(spec, layers, seq_lens=True, initial_states=True), threads), zeros)
    absent = run(session(fused_model(spec, layers, seq_lens=True), threads),
                 {k: v for k, v in feeds.items() if k in ("X", "sequence_lens")})
    for a, b in zip(given, absent):
        np.testing.assert_array_equal(a, b)
    assert max_abs(absent, run_stock(spec, layers, zeros, seq_lens=True, initial_states=True)) <= TOL


_SPLIT_PROBE = r"""
import sys
import numpy as np
import onnxruntime as ort
from lstm_ort.runtime.session import register
model, feeds, out = sys.argv[1:4]
so = ort.SessionOptions()
so.intra_op_num_threads = 2
register(so)
sess = ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])
got = sess.run(None, dict(np.load(feeds)))
np.savez(out, *got)
"""


@pytest.mark.parametrize("split", [1, 2, 3])
@pytest.mark.parametrize("direction", ["forward", "bidirectional"])
@pytest.mark.parametrize("planned", [2, 4])
def test_forced_splits_agree_with_one_thread(split, direction, planned, rng, tmp_path):
    """LSTM_ORT_CPU_SPLIT forces each way of spreading a recurrence over threads (one thread, batch
    rows, hidden-unit panels; with two directions on two threads, panels with the directions in
    turn), shapes where the plan would choose otherwise included: each is exact arithmetic. Planned
    for 4 threads on a pool of 2, a group's tasks run partly one after another, which the in-order
    claiming of (step, chunk) items must survive."""
    spec = LstmSpec(input_size=19, hidden_size=72, num_layers=2, direction=direction)
    layers = random_layers(spec, rng)
    # B = 12: every batch group keeps at least 3 rows. Tiles of 1 or 2 rows sum over k in two
    # interleaved chains (to hide the FMA latency), so a split into such groups matches larger tiles
    # only to rounding. (The planner splits by the cores, not by the session's threads, so a model's
    # results do not depend on intra_op_num_threads.)
    feeds = make_feeds(spec, 9, 12, rng, seq_lens=True, initial_states=True)
    model = fused_model(spec, layers, seq_lens=True, initial_states=True)
    onnx.save(model, tmp_path / "m.onnx")
    np.savez(tmp_path / "feeds.npz", **feeds)
    argv, env = child_python(_SPLIT_PROBE, "m.onnx", "feeds.npz", "out.npz",
                             env={"LSTM_ORT_CPU_SPLIT": str(split), "LSTM_ORT_CPU_THREADS": str(planned)})
    out = subprocess.run(argv, capture_output=True, text=True, cwd=tmp_path, env=env, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    forced = np.load(tmp_path / "out.npz")
    one = run(session(model, 1), feeds)
    for k, a in enumerate(one):
        np.testing.assert_array_equal(a, forced[f"arr_{k}"])
