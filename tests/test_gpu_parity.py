"""FusedLSTM on the CUDA EP: the parity grid against stock onnxruntime (CUDA where stock's cuDNN
path takes the case, CPU otherwise) and against our own CPU kernel, for every strategy (forced
through the lstm_ort.strategy session option, in strict mode: a case runs the forced strategy, or
its plan names the fallback and strict mode refuses it; lstm_ort.testing.run_fused_strict)."""

import dataclasses
import threading

import numpy as np
import onnxruntime as ort
import pytest

from lstm_ort.builders import LstmSpec, random_layers
from lstm_ort.ops.identity import TUNABLE_STRATEGIES
from lstm_ort.testing import (CPU, CUDA, DIRECTIONS, FEATURE_GRID, SHAPE_GRID, feature_spec, make_feeds,
                              max_abs, run_fused, run_fused_strict, run_stock, weights_as_graph_input)
from lstm_ort.verify import PRECISION_TOLERANCES

pytestmark = pytest.mark.gpu

TOL = 2e-5
STRATEGIES = list(TUNABLE_STRATEGIES)


def stock_cuda_applies(spec: LstmSpec) -> bool:
    """Stock's CUDA LSTM (cuDNN) takes layout 0 with default activations, no clip, no peepholes."""
    return (spec.layout == 0 and spec.activations is None and spec.clip is None and not spec.input_forget
            and not spec.peepholes)


def check_gpu(spec, T, B, rng, strategy, *, seq_lens=False, initial_states=False, dtype=np.float32):
    layers = random_layers(spec, rng)
    feeds = make_feeds(spec, T, B, rng, seq_lens=seq_lens, initial_states=initial_states)
    kw = dict(seq_lens=seq_lens, initial_states=initial_states)
    # Strict: the outputs are the forced strategy's, or its plan names why not (lstm_ort.testing).
    got = run_fused_strict(spec, layers, feeds, dtype, strategy=strategy, **kw)
    ours_cpu = run_fused(spec, layers, feeds, providers=CPU, **kw)
    assert max_abs(got, ours_cpu) <= TOL, f"vs our CPU kernel: {max_abs(got, ours_cpu)}"
    stock = run_stock(spec, layers, feeds, **kw)
    assert max_abs(got, stock) <= TOL, f"vs stock CPU: {max_abs(got, stock)}"
    if stock_cuda_applies(spec):
        stock_gpu = run_stock(spec, layers, feeds, providers=CUDA, **kw)
        assert max_abs(got, stock_gpu) <= TOL, f"vs stock CUDA: {max_abs(got, stock_gpu)}"


@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("direction,layout,T,B,H,L", SHAPE_GRID)
def test_shapes(direction, layout, T, B, H, L, strategy, rng):
    extras = (T + B + H) % 2 == 1
    spec = LstmSpec(input_size=5, hidden_size=H, num_layers=L, direction=direction, layout=layout)
    check_gpu(spec, T, B, rng, strategy, seq_lens=extras, initial_states=extras)


FEATURES = FEATURE_GRID[::3]  # every third case: CUDA sessions are slower to create


@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("direction,layout,seq_lens,initial_states,peepholes,clip,input_forget,acts", FEATURES)
def test_features(direction, layout, seq_lens, initial_states, peepholes, clip, input_forget, acts, strategy,
                  rng):
    spec = feature_spec(direction, layout, peepholes=peepholes, clip=clip, input_forget=input_forget, acts=acts,
                        input_size=6, hidden_size=33, num_layers=2)
    check_gpu(spec, 9, 5, rng, strategy, seq_lens=seq_lens, initial_states=initial_states)


@pytest.mark.parametrize("strategy", ["auto", "splitk", "tiled"])
@pytest.mark.parametrize("direction,layout,seq_lens,initial_states,peepholes,clip,input_forget,acts", FEATURE_GRID[::4])
def test_one_step_features(direction, layout, seq_lens, initial_states, peepholes, clip, input_forget, acts, strategy,
                           rng):
    """A call of one step: v1's split-K step multiplies layer 0's input itself (CallPlan::
    step_projects), and the FMA steps write Y_h / Y_c at their last step (StepArgs::final_step),
    with every cell feature, both layouts and sequences of length 0 and 1."""
    spec = feature_spec(direction, layout, peepholes=peepholes, clip=clip, input_forget=input_forget, acts=acts,
                        input_size=6, hidden_size=33, num_layers=2)
    layers = random_layers(spec, rng)
    feeds = make_feeds(spec, 1, 5, rng, initial_states=initial_states)
    if seq_lens:
        feeds["sequence_lens"] = np.array([1, 0, 1, 0, 1], np.int32)
    kw = dict(seq_lens=seq_lens, initial_states=initial_states)
    got = run_fused_strict(spec, layers, feeds, strategy=strategy, **kw)
    assert max_abs(got, run_stock(spec, layers, feeds, **kw)) <= TOL
    assert max_abs(got, run_fused(spec, layers, feeds, providers=CPU, **kw)) <= TOL


@pytest.mark.parametrize("outputs", [("Y_h",), ("Y_c",), ("Y",), ("Y", "Y_c")])
@pytest.mark.parametrize("H,B", [(64, 1), (128, 16), (200, 3)])
def test_one_step_outputs_as_asked(outputs, H, B, rng):
    """The one-step path writes just the outputs bound (a null Y_h or Y_c is not written), as a
    call asking for all three gives them; X of I != H."""
    spec = LstmSpec(input_size=H // 2 + 3, hidden_size=H, num_layers=1)
    layers = random_layers(spec, rng)
    feeds = make_feeds(spec, 1, B, rng, initial_states=True)
    every = dict(zip(("Y", "Y_h", "Y_c"), run_fused(spec, layers, feeds, providers=CUDA, initial_states=True)))
    some = run_fused(spec, layers, feeds, providers=CUDA, initial_states=True, outputs=outputs)
    assert max_abs(some, [every[name] for name in outputs]) == 0.0
    assert max_abs([every[name] for name in outputs],
                   [dict(zip(("Y", "Y_h", "Y_c"), run_stock(spec, layers, feeds, initial_states=True)))[name]
                    for name in outputs]) <= TOL


@pytest.mark.parametrize("direction", DIRECTIONS)
def test_one_step_float16(direction, rng):
    """fp16 storage at T = 1 on split-K: the input product read as fp16 in the step."""
    spec = LstmSpec(input_size=24, hidden_size=64, num_layers=2, direction=direction)
    layers = random_layers(spec, rng)
    for lw in layers:
        for name in ("W", "R", "B"):
            setattr(lw, name, getattr(lw, name).astype(np.float16).astype(np.float32))
    feeds16 = make_feeds(spec, 1, 6, rng, np.float16, initial_states=True)
    feeds32 = {k: v.astype(np.float32) for k, v in feeds16.items()}
    got = run_fused(spec, layers, feeds16, np.float16, providers=CUDA, strategy="splitk", initial_states=True)
    assert max_abs(got, run_stock(spec, layers, feeds32, initial_states=True)) <= 5e-3


@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("L,T,H,B,direction", [(2, 50, 512, 64, "forward"), (1, 30, 1024, 4, "bidirectional"),
                                               (2, 20, 256, 8, "reverse"), (1, 10, 1100, 3, "forward")])
def test_reference_sizes(L, T, H, B, direction, strategy, rng):
    spec = LstmSpec(input_size=H, hidden_size=H, num_layers=L, direction=direction)
    check_gpu(spec, T, B, rng, strategy, seq_lens=True)


@pytest.mark.parametrize("precision", ["fp32", "tf32", "fp16"])
@pytest.mark.parametrize("L,T,H,B", [(3, 9, 33, 5), (4, 12, 256, 64), (5, 10, 64, 300)])
@pytest.mark.parametrize("direction", ["forward", "reverse"])
def test_y_relays_the_outputs_between_layers(direction, L, T, H, B, precision, rng):
    """Where Y is bound (one direction, time-major), the layers hand their outputs on through it
    instead of a scratch buffer (call_plan.h, YRelaysLayers): the final states come out as where Y
    is not asked for (the buffer), ragged lengths included; fp32's outputs as our CPU kernel's."""
    spec = LstmSpec(input_size=7, hidden_size=H, num_layers=L, direction=direction)
    layers = random_layers(spec, rng)
    feeds = make_feeds(spec, T, B, rng, seq_lens=True)
    relayed = run_fused(spec, layers, feeds, providers=CUDA, precision=precision, seq_lens=True)
    buffered = run_fused(spec, layers, feeds, providers=CUDA, precision=precision, seq_lens=True,
                         outputs=("Y_h", "Y_c"))
    assert max_abs(relayed[1:], buffered) <= 1e-6
    if precision == "fp32":
        assert max_abs(relayed, run_fused(spec, layers, feeds, providers=CPU, seq_lens=True)) <= TOL


@pytest.mark.parametrize("strategy", ["persistent", "cluster"])
@pytest.mark.parametrize("outputs", [("Y", "Y_h", "Y_c"), ("Y_h", "Y_c")])
def test_refused_launches_run_their_layers_on_v1(strategy, outputs, rng):
    """A launch the device refuses (debug key refuse_launches) leaves its layers to v1, which takes
    the first one's projection as the launcher made it: with ragged lengths the launcher has zeroed
    its output by then, and that is the buffer (or Y) its input came from. The outputs are our CPU
    kernel's; strict mode names the refusal."""
    spec = LstmSpec(input_size=7, hidden_size=33, num_layers=3)
    layers = random_layers(spec, rng)
    feeds = make_feeds(spec, 9, 5, rng, seq_lens=True)
    kw = dict(seq_lens=True, outputs=outputs)
    got = run_fused(spec, layers, feeds, providers=CUDA, strategy=strategy, debug={"refuse_launches": "1"}, **kw)
    assert max_abs(got, run_fused(spec, layers, feeds, providers=CPU, **kw)) <= TOL
    with pytest.raises(Exception, match="the device refused the"):
        run_fused(spec, layers, feeds, providers=CUDA, strategy=strategy,
                  debug={"refuse_launches": "1", "strict": "1"}, **kw)


@pytest.mark.parametrize("B", [1, 2, 3, 8, 16, 17])
@pytest.mark.parametrize("direction", DIRECTIONS)
def test_gemm_step(B, direction, monkeypatch, rng):
    """v1's cuBLAS step, forced through its developer knob: the weight-streaming product for B 2-16
    (K split over blocks, a partial last column tile and split at H=301) and cuBLAS otherwise; with
    initial states, and without them, when the first step skips the product."""
    monkeypatch.setenv("LSTM_ORT_GEMM_STEP", "1")
    spec = LstmSpec(input_size=7, hidden_size=301, num_layers=2, direction=direction)
    check_gpu(spec, 12, B, rng, "auto", seq_lens=B % 2 == 1, initial_states=B % 2 == 0)


# (T, B, I, initial states, precision): B 1 on cuBLAS's GEMV and 17 on its GEMM, where one step
# multiplies [x h0] with [W; R] in one GEMM (I <= 3H), or x alone (no initial_h), or, at I > 3H,
# after the projection; B 6 on the weight-streaming step; T 3 on the step loop without a graph.
SHORT_GEMM_CALLS = [(1, 1, 7, True, "fp32"), (1, 17, 7, True, "fp32"), (1, 17, 7, True, "tf32"),
                    (1, 17, 7, False, "fp32"), (1, 17, 130, True, "fp32"), (1, 6, 7, True, "fp32"),
                    (3, 6, 7, True, "fp32")]


@pytest.mark.parametrize("outputs", [("Y", "Y_h", "Y_c"), ("Y_h",), ("Y_c",)])
@pytest.mark.parametrize("layout", [0, 1])
@pytest.mark.parametrize("T,B,I,initial_states,precision", SHORT_GEMM_CALLS)
def test_gemm_step_short_calls(T, B, I, initial_states, precision, layout, outputs, monkeypatch, rng):
    """Calls too short for the cuBLAS step loop's graph (launch_graphs.h kMinStepsForStepGraph):
    the cell of the last step writes Y_h / Y_c itself (StepArgs::final_step), in either layout, just
    the outputs bound, with sequences of length 0 (zeros, as stock gives); a call of one step stages
    [x h0] with the initial states (state_kernels.cuh StatesPrelude::stage) for its one GEMM."""
    monkeypatch.setenv("LSTM_ORT_GEMM_STEP", "1")
    spec = LstmSpec(input_size=I, hidden_size=40, num_layers=2, direction="bidirectional", layout=layout)
    layers = random_layers(spec, rng)
    feeds = make_feeds(spec, T, B, rng, initial_states=initial_states)
    feeds["sequence_lens"] = (T - np.arange(B) % (T + 1)).astype(np.int32)
    kw = dict(seq_lens=True, initial_states=initial_states)
    got = run_fused(spec, layers, feeds, providers=CUDA, outputs=outputs, precision=precision, **kw)
    stock = dict(zip(("Y", "Y_h", "Y_c"), run_stock(spec, layers, feeds, **kw)))  # stock's layout 1 gives all three
    tol = TOL if precision == "fp32" else PRECISION_TOLERANCES[precision].atol
    assert max_abs(got, [stock[name] for name in outputs]) <= tol
    if precision == "fp32":
        assert max_abs(got, run_fused(spec, layers, feeds, providers=CPU, outputs=outputs, **kw)) <= TOL


# (L, B, I, H, precision, forced through LSTM_ORT_GEMM_STEP): the one-step rule's own shapes under auto (tf32), then
# small stacks forced onto the cuBLAS step in fp32 and tf32, B 1 on its GEMV; layer 0 at I > 3H
# projects apart while the layers above still stage.
STACKED_ONE_STEP_CALLS = [(3, 9, 512, 512, "auto", False), (2, 4, 300, 768, "auto", False),
                          (3, 17, 7, 40, "fp32", True), (2, 1, 130, 40, "fp32", True), (3, 9, 40, 40, "tf32", True)]


@pytest.mark.parametrize("outputs", [("Y", "Y_h", "Y_c"), ("Y_h", "Y_c")])
@pytest.mark.parametrize("layout,initial_states", [(0, True), (1, False)])
@pytest.mark.parametrize("L,B,I,H,precision,forced", STACKED_ONE_STEP_CALLS)
def test_one_step_stacks_stage_every_layer(L, B, I, H, precision, forced, layout, initial_states, outputs,
                                           monkeypatch, rng):
    """A one-step call of a one-direction stack on the cuBLAS step: each layer above the first runs
    one GEMM of its [x h0] with [W; R] too (heuristics.h UpperLayersStageRows), x staged from the
    layer below's output: Y where Y is bound (it relays), else the buffer between layers, which the
    layer then overwrites. Sequences of length 0 included; as stock gives, and in fp32 as our CPU
    kernel."""
    from lstm_ort.runtime import native
    from lstm_ort.runtime.nodes import NodeShape

    if forced:
        monkeypatch.setenv("LSTM_ORT_GEMM_STEP", "1")
    else:
        text = native.describe(NodeShape(L, 1, I, H, "float32"), 1, B, "auto", precision)
        assert f"layer {L - 1}: v1 cuBLAS (one GEMM of [x h] with [W; R]" in text, text
    spec = LstmSpec(input_size=I, hidden_size=H, num_layers=L, layout=layout)
    layers = random_layers(spec, rng)
    feeds = make_feeds(spec, 1, B, rng, initial_states=initial_states)
    feeds["sequence_lens"] = (np.arange(B) % 3 != 1).astype(np.int32)
    kw = dict(seq_lens=True, initial_states=initial_states)
    got = run_fused(spec, layers, feeds, providers=CUDA, outputs=outputs, precision=precision, **kw)
    stock = dict(zip(("Y", "Y_h", "Y_c"), run_stock(spec, layers, feeds, **kw)))
    tol = TOL if precision == "fp32" else PRECISION_TOLERANCES["tf32"].atol
    assert max_abs(got, [stock[name] for name in outputs]) <= tol
    if precision == "fp32":
        assert max_abs(got, run_fused(spec, layers, feeds, providers=CPU, outputs=outputs, **kw)) <= TOL


@pytest.mark.parametrize("precision", ["fp32", "tf32"])
@pytest.mark.parametrize("direction", DIRECTIONS)
def test_gemm_step_graph_replays_new_inputs(direction, precision, monkeypatch, rng):
    """v1's cuBLAS steps are replayed as a CUDA graph when a call repeats the buffers of an earlier
    one (launch_graphs.h; captured on the second sighting). Calls into the same bound buffers with
    new X, new sequence lengths below the longest and new initial states each match stock, as do
    calls of another length in between (another graph) and with the outputs bound elsewhere."""
    from lstm_ort.builders import fused_model
    from lstm_ort.runtime.session import InferenceSession

    monkeypatch.setenv("LSTM_ORT_GEMM_STEP", "1")
    spec = LstmSpec(input_size=24, hidden_size=96, num_layers=2, direction=direction)
    layers = random_layers(spec, rng)
    kw = {"seq_lens": True, "initial_states": True}
    sess = InferenceSession(fused_model(spec, layers, **kw).SerializeToString(), providers=CUDA, precision=precision)
    tol = TOL if precision == "fp32" else PRECISION_TOLERANCES[precision].atol
    bound = {}

    def bind(T):
        feeds = make_feeds(spec, T, 16, rng, **kw)
        binding = sess.io_binding()
        values = {name: ort.OrtValue.ortvalue_from_numpy(v, "cuda", 0) for name, v in feeds.items()
                  if name != "sequence_lens"}
        for name, value in values.items():
            binding.bind_ortvalue_input(name, value)
        D, LD, H = spec.num_directions, spec.num_layers * spec.num_directions, spec.hidden_size
        for name, shape in (("Y", (T, D, 16, H)), ("Y_h", (LD, 16, H)), ("Y_c", (LD, 16, H))):
            binding.bind_ortvalue_output(name, ort.OrtValue.ortvalue_from_shape_and_type(shape, np.float32, "cuda", 0))
        return binding, values

    for T in (12, 12, 12, 7, 12, 7, 12):
        if T not in bound:
            bound[T] = bind(T)
        binding, values = bound[T]
        feeds = make_feeds(spec, T, 16, rng, **kw)
        feeds["sequence_lens"][0] = T  # the longest stays T: one step count, one graph per length
        for name, value in values.items():
            value.update_inplace(feeds[name])
        binding.bind_cpu_input("sequence_lens", feeds["sequence_lens"])
        sess.run_with_iobinding(binding)
        assert max_abs(binding.copy_outputs_to_cpu(), run_stock(spec, layers, feeds, **kw)) <= tol


CLUSTER_CASES = [  # (H, B, cluster size, slices; None for the planner's): partial last blocks, every batch variant
    (1, 1, None, None), (7, 3, None, None), (32, 8, None, None), (64, 2, 1, None), (100, 5, 4, None),
    (128, 1, 4, None), (128, 1, 8, None), (128, 4, 16, None), (200, 1, None, None), (256, 1, None, None),
    (256, 8, None, None), (40, 3, 16, 8), (64, 1, 4, 4), (24, 6, 1, 4),
]


@pytest.mark.parametrize("H,B,cluster,slices", CLUSTER_CASES)
@pytest.mark.parametrize("direction", DIRECTIONS)
def test_cluster_kernel(H, B, cluster, slices, direction, monkeypatch, rng):
    """The cluster kernel at every size it plans, cluster sizes and slices per column forced through
    the debug overrides' environment aliases (read when a kernel is made): ragged lengths and
    initial states on alternate cases, peepholes always."""
    if cluster:
        monkeypatch.setenv("LSTM_ORT_CLUSTER_SIZE", str(cluster))
    if slices:
        monkeypatch.setenv("LSTM_ORT_CLUSTER_SLICES", str(slices))
    spec = LstmSpec(input_size=9, hidden_size=H, num_layers=2, direction=direction, peepholes=True)
    extras = (H + B) % 2 == 1
    check_gpu(spec, 17, B, rng, "cluster", seq_lens=extras, initial_states=not extras)


@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("direction", DIRECTIONS)
@pytest.mark.parametrize("layout", [0, 1])
def test_split_tf32_projection(direction, layout, strategy, rng):
    """T*B >= 1024: fp32 input projections run as three TF32 GEMMs on split halves; still FP32-accurate."""
    spec = LstmSpec(input_size=24, hidden_size=64, num_layers=2, direction=direction, layout=layout, peepholes=True)
    check_gpu(spec, 40, 32, rng, strategy, seq_lens=True, initial_states=True)


@pytest.mark.parametrize("strategy", ["tiled", "wavefront"])
def test_split_tf32_projection_in_chunks(strategy, rng):
    """T*B = 16640 > 16384: the split input runs through the GEMMs in two row chunks."""
    spec = LstmSpec(input_size=8, hidden_size=16, num_layers=2)
    check_gpu(spec, 130, 128, rng, strategy, seq_lens=True)


@pytest.mark.parametrize("direction", DIRECTIONS)
def test_kept_split_weights_across_calls_and_threads(direction, rng):
    """A constant W is split for 3xTF32 once per session and kept (gemm/kept_split.h): calls of
    sizes that split (T*B = 1280, and 40 x 16 rows of a 256-wide input) and that do not (32 rows),
    in turns and from two threads at once on a fresh session (the first fill), each match stock."""
    from lstm_ort.builders import fused_model
    from lstm_ort.runtime.session import InferenceSession

    spec = LstmSpec(input_size=1024, hidden_size=128, num_layers=2, direction=direction, peepholes=True)
    layers = random_layers(spec, rng)
    model = fused_model(spec, layers, seq_lens=True, initial_states=True).SerializeToString()
    cases = []
    for T, B in ((40, 32), (4, 8), (20, 64), (40, 16)):
        feeds = make_feeds(spec, T, B, rng, seq_lens=True, initial_states=True)
        cases.append((feeds, run_stock(spec, layers, feeds, seq_lens=True, initial_states=True)))
    sess = InferenceSession(model, providers=CUDA)
    for feeds, expect in cases + cases:
        assert max_abs(sess.run(None, feeds), expect) <= TOL
    fresh = InferenceSession(model, providers=CUDA)
    errors = []

    def work(feeds, expect):
        errors.extend(max_abs(fresh.run(None, feeds), expect) for _ in range(5))

    threads = [threading.Thread(target=work, args=case) for case in (cases[0], cases[2])]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(errors) == 10 and max(errors) <= TOL, errors


@pytest.mark.parametrize("direction", DIRECTIONS)
def test_split_weights_given_as_graph_input(direction, rng):
    """W fed at run time is no constant: each call splits its input rows itself (nothing kept),
    and a changed W gives the changed answer."""
    from lstm_ort.builders import fused_model
    from lstm_ort.runtime.session import InferenceSession

    spec = LstmSpec(input_size=24, hidden_size=64, num_layers=2, direction=direction)
    layers = random_layers(spec, rng)
    model, weights = weights_as_graph_input(fused_model(spec, layers))
    sess = InferenceSession(model.SerializeToString(), providers=CUDA)
    feeds = make_feeds(spec, 40, 32, rng)
    assert max_abs(sess.run(None, {**feeds, **weights}), run_stock(spec, layers, feeds)) <= TOL
    # New W and R, the same biases (they stay initializers of the model).
    other = [dataclasses.replace(lw, W=o.W, R=o.R) for lw, o in zip(layers, random_layers(spec, rng))]
    _, other_weights = weights_as_graph_input(fused_model(spec, other))
    assert max_abs(sess.run(None, {**feeds, **other_weights}), run_stock(spec, other, feeds)) <= TOL


@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("direction", DIRECTIONS)
def test_float16(direction, strategy, rng):
    """fp16 storage, fp32 math: within 5e-3 of the fp32 network on the same fp16-rounded values."""
    spec = LstmSpec(input_size=16, hidden_size=128, num_layers=3, direction=direction, peepholes=True)
    layers = random_layers(spec, rng)
    for lw in layers:
        for name in ("W", "R", "B", "P"):
            setattr(lw, name, getattr(lw, name).astype(np.float16).astype(np.float32))
    feeds16 = make_feeds(spec, 40, 16, rng, np.float16, seq_lens=True, initial_states=True)
    feeds32 = {k: (v.astype(np.float32) if v.dtype == np.float16 else v) for k, v in feeds16.items()}
    kw = dict(seq_lens=True, initial_states=True)
    got = run_fused(spec, layers, feeds16, np.float16, providers=CUDA, strategy=strategy, **kw)
    assert all(g.dtype == np.float16 for g in got)
    err = max_abs(got, run_stock(spec, layers, feeds32, **kw))
    assert err <= 5e-3, err


@pytest.mark.parametrize("strategy", ["tiled", "wavefront"])
def test_two_sessions_concurrently(strategy, rng):
    """Two sessions on one GPU, run from two threads at once, each give their own right answer
    (for the persistent kernels: two cooperative grids that must not wait on each other)."""
    from lstm_ort.builders import fused_model
    from lstm_ort.runtime.session import STRATEGY_KEY, InferenceSession

    jobs = []
    for H, L, direction in ((64, 3, "forward"), (256, 2, "bidirectional")):
        spec = LstmSpec(input_size=32, hidden_size=H, num_layers=L, direction=direction)
        layers = random_layers(spec, rng)
        feeds = make_feeds(spec, 50, 8, rng, seq_lens=True)
        expect = run_stock(spec, layers, feeds, seq_lens=True)
        options = ort.SessionOptions()
        options.add_session_config_entry(STRATEGY_KEY, strategy)
        sess = InferenceSession(fused_model(spec, layers, seq_lens=True), options, providers=CUDA)
        jobs.append((sess, feeds, expect))
    errors = []

    def work(sess, feeds, expect):
        for _ in range(20):
            errors.append(max_abs(sess.run(None, feeds), expect))

    threads = [threading.Thread(target=work, args=job) for job in jobs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(errors) == 40 and max(errors) <= TOL
