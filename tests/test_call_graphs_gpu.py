"""Whole short calls replayed as CUDA graphs (custom_ops/cuda/launch_graphs.h, CallGraphPays):
calls that repeat their buffers replay the graph captured on the second sighting. Each call,
replayed or not, matches the same node launched directly (call_graphs=0) bit for bit and stock
within the usual bounds, with new values in the same bound buffers, and with (h, c) carried
from call to call through buffers onnxruntime allocates."""

import numpy as np
import onnxruntime as ort
import pytest

from lstm_ort.builders import LstmSpec, fused_model, random_layers
from lstm_ort.runtime import native
from lstm_ort.runtime.nodes import NodeShape
from lstm_ort.runtime.session import InferenceSession
from lstm_ort.testing import CUDA, factored_layers, make_feeds, max_abs, run_stock
from lstm_ort.verify import PRECISION_TOLERANCES

pytestmark = pytest.mark.gpu

TOL = 2e-5
CALLS = 6

# (T, B, I, H, L, direction, strategy, precision, low-rank ranks, what the plan says): one case per
# backend a short call can plan on, and a factored node.
CASES = [
    (2, 1, 16, 64, 2, "forward", "auto", "fp32", None, "cluster"),
    (1, 4, 16, 64, 1, "forward", "auto", "fp32", None, "v1 splitk"),  # one step (OneStepStrategy)
    (1, 16, 16, 64, 2, "forward", "auto", "fp32", None, "wavefront"),
    (3, 16, 24, 200, 1, "forward", "persistent", "fp32", None, "persistent ("),
    (5, 8, 8, 96, 3, "forward", "wavefront", "fp32", None, "wavefront"),
    (4, 4, 12, 48, 2, "bidirectional", "tiled", "fp32", None, "v1 tiled"),
    (2, 5, 12, 48, 1, "reverse", "splitk", "fp32", None, "v1 splitk"),
    (2, 256, 32, 128, 1, "forward", "auto", "tf32", None, "tensor cores, tf32"),
    (1, 300, 64, 256, 2, "forward", "auto", "auto", None, "v1 cuBLAS"),
    (6, 7, 20, 33, 2, "bidirectional", "auto", "fp32", (4, 5), None),  # factored weights: low rank
]


def session(model, strategy: str, precision: str, graphs: bool):
    so = ort.SessionOptions()
    so.add_session_config_entry("lstm_ort.strategy", strategy)
    return InferenceSession(model.SerializeToString(), so, providers=CUDA, precision=precision,
                            debug={"call_graphs": "1" if graphs else "0"})


def bound(sess, spec, T, B):
    """A binding of device buffers for every input and output, and the input buffers by name."""
    feeds = make_feeds(spec, T, B, np.random.default_rng(0), initial_states=True)
    binding = sess.io_binding()
    values = {name: ort.OrtValue.ortvalue_from_numpy(v, "cuda", 0) for name, v in feeds.items()}
    for name, value in values.items():
        binding.bind_ortvalue_input(name, value)
    D, LD, H = spec.num_directions, spec.num_layers * spec.num_directions, spec.hidden_size
    for name, shape in (("Y", (T, D, B, H)), ("Y_h", (LD, B, H)), ("Y_c", (LD, B, H))):
        binding.bind_ortvalue_output(name, ort.OrtValue.ortvalue_from_shape_and_type(shape, np.float32, "cuda", 0))
    return binding, values


@pytest.mark.parametrize("T,B,I,H,L,direction,strategy,precision,ranks,backend", CASES)
def test_bound_calls_replay_new_inputs(T, B, I, H, L, direction, strategy, precision, ranks, backend, rng):
    spec = LstmSpec(input_size=I, hidden_size=H, num_layers=L, direction=direction)
    if backend:  # the case runs on the backend it is here for
        shape = NodeShape(L, spec.num_directions, I, H, "float32")
        assert backend in native.describe(shape, T, B, strategy, precision)
    layers = random_layers(spec, rng)
    if ranks:
        layers = factored_layers(layers, *ranks)
    model = fused_model(spec, layers, initial_states=True)
    graphed, direct = (session(model, strategy, precision, g) for g in (True, False))
    (gb, gv), (db, dv) = bound(graphed, spec, T, B), bound(direct, spec, T, B)
    tol = PRECISION_TOLERANCES[precision].atol if precision in ("tf32", "auto") else TOL
    before = native.cuda_graph_counts()
    for _ in range(CALLS):
        feeds = make_feeds(spec, T, B, rng, initial_states=True)
        for values in (gv, dv):
            for name, value in values.items():
                value.update_inplace(feeds[name])
        graphed.run_with_iobinding(gb)
        direct.run_with_iobinding(db)
        got, want = gb.copy_outputs_to_cpu(), db.copy_outputs_to_cpu()
        assert all(np.array_equal(g, w) for g, w in zip(got, want)), "replayed differs from launched directly"
        if not ranks:
            assert max_abs(got, run_stock(spec, layers, feeds, initial_states=True)) <= tol
    captures, replays = (a - b for a, b in zip(native.cuda_graph_counts(), before))
    assert captures == 1 and replays == CALLS - 2, (captures, replays)  # direct, captured, then replayed


def test_carried_states_replay(rng):
    """A stream of T=1 calls, each one's Y_h and Y_c the next one's initial states, through two
    sets of output buffers in turn (as a server that keeps its states on the device does; two
    keys, so two graphs): every call matches stock fed the same states, and from the fifth call on
    every call is replayed."""
    spec = LstmSpec(input_size=20, hidden_size=128, num_layers=2)
    layers = random_layers(spec, rng)
    sess = session(fused_model(spec, layers, initial_states=True), "auto", "fp32", True)
    feeds = make_feeds(spec, 1, 4, rng, initial_states=True)
    x_buffer = ort.OrtValue.ortvalue_from_numpy(feeds["X"], "cuda", 0)
    shapes = {"Y": (1, 1, 4, 128), "Y_h": (2, 4, 128), "Y_c": (2, 4, 128)}
    sets = [{name: ort.OrtValue.ortvalue_from_shape_and_type(shape, np.float32, "cuda", 0)
             for name, shape in shapes.items()} for _ in range(2)]
    states = {"Y_h": ort.OrtValue.ortvalue_from_numpy(feeds["initial_h"], "cuda", 0),
              "Y_c": ort.OrtValue.ortvalue_from_numpy(feeds["initial_c"], "cuda", 0)}
    before = native.cuda_graph_counts()
    for k in range(12):
        x = rng.standard_normal((1, 4, 20)).astype(np.float32)
        x_buffer.update_inplace(x)
        h0, c0 = states["Y_h"].numpy(), states["Y_c"].numpy()
        binding = sess.io_binding()
        binding.bind_ortvalue_input("X", x_buffer)
        binding.bind_ortvalue_input("initial_h", states["Y_h"])
        binding.bind_ortvalue_input("initial_c", states["Y_c"])
        for name, value in sets[k % 2].items():
            binding.bind_ortvalue_output(name, value)
        sess.run_with_iobinding(binding)
        want = run_stock(spec, layers, {"X": x, "initial_h": h0, "initial_c": c0}, initial_states=True)
        assert max_abs(binding.copy_outputs_to_cpu(), want) <= TOL
        states = sets[k % 2]
    captures, replays = (a - b for a, b in zip(native.cuda_graph_counts(), before))
    # calls 0 and 1 launch directly, but call 0 reads the first states' buffers: three keys, the
    # last two captured on calls 3 and 4 (their second sightings), replayed from call 5 on
    assert captures == 2 and replays == 12 - 5, (captures, replays)


def test_lengths_on_the_host_launch_directly(rng):
    """Calls with sequence_lens (read on the host) are not captured (CallGraphPays), though their
    buffers repeat as those of the calls above do."""
    spec = LstmSpec(input_size=8, hidden_size=32, num_layers=1)
    layers = random_layers(spec, rng)
    sess = session(fused_model(spec, layers, seq_lens=True), "auto", "fp32", True)
    feeds = make_feeds(spec, 3, 2, rng, seq_lens=True)
    binding = sess.io_binding()
    binding.bind_ortvalue_input("X", ort.OrtValue.ortvalue_from_numpy(feeds["X"], "cuda", 0))
    binding.bind_cpu_input("sequence_lens", feeds["sequence_lens"])
    for name, shape in (("Y", (3, 1, 2, 32)), ("Y_h", (1, 2, 32)), ("Y_c", (1, 2, 32))):
        binding.bind_ortvalue_output(name, ort.OrtValue.ortvalue_from_shape_and_type(shape, np.float32, "cuda", 0))
    before = native.cuda_graph_counts()
    for _ in range(4):
        sess.run_with_iobinding(binding)
    assert native.cuda_graph_counts() == before
    assert max_abs(binding.copy_outputs_to_cpu(), run_stock(spec, layers, feeds, seq_lens=True)) <= TOL


def test_concurrent_callers_of_one_session(rng):
    """Threads calling one session at once, each replaying its own graphs: every thread's every
    call matches the same call alone (scratch on the call's stream, captures on a stream of the
    thread's own: cuda_ops.cc, launch_graphs.h)."""
    import threading

    spec = LstmSpec(input_size=16, hidden_size=96, num_layers=2)
    layers = random_layers(spec, rng)
    model = fused_model(spec, layers, initial_states=True)
    sess, alone = session(model, "auto", "fp32", True), session(model, "auto", "fp32", False)
    work = [[make_feeds(spec, 2, 8, rng, initial_states=True) for _ in range(12)] for _ in range(4)]
    want = [[alone.run(None, feeds) for feeds in calls] for calls in work]
    got = [[None] * 12 for _ in work]

    def caller(k):
        binding, values = bound(sess, spec, 2, 8)
        for i, feeds in enumerate(work[k]):
            for name, value in values.items():
                value.update_inplace(feeds[name])
            sess.run_with_iobinding(binding)
            got[k][i] = binding.copy_outputs_to_cpu()

    before = native.cuda_graph_counts()
    threads = [threading.Thread(target=caller, args=(k,)) for k in range(len(work))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for k in range(len(work)):
        for g, w in zip(got[k], want[k]):
            assert all(np.array_equal(a, b) for a, b in zip(g, w))
    assert native.cuda_graph_counts()[1] > before[1]  # the threads' calls replayed
