"""The bucketing batcher: exact per-sequence results, order, edge cases, models that are not
ragged-exact, bucket boundaries."""

import itertools

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from lstm_ort import InferenceSession
from lstm_ort.builders import LstmSpec, fused_model, random_layers, stock_model
from lstm_ort.rewriter import Report, optimize
from lstm_ort.serving import BucketingBatcher, NotRaggedExact, analyze
from lstm_ort.serving.batch import buckets as bk

LENGTHS = [5, 1, 9, 3, 2, 7, 2, 4, 6, 1, 8]


def optimized(spec, rng, dtype=np.float32, report=None):
    return optimize(stock_model(spec, random_layers(spec, rng), dtype), sequence_lens_input=True, report=report)


def alone(session, layout, x, time_axis, batch_axis, lens=True):
    """Each sequence run by itself: [T, ...] -> a batch of one."""
    feed = {layout.input: np.expand_dims(x, batch_axis)}
    if lens:
        feed[layout.sequence_lens] = np.array([x.shape[0]], np.int32)
    names = [o.name for o in session.get_outputs()]
    outs = session.run(None, feed)
    return {n: np.take(o, 0, axis=layout.outputs[n].batch) for n, o in zip(names, outs)}


def assert_matches_alone(model, seqs, results, atol, rtol=0.0):
    session = InferenceSession(model)
    layout = analyze(model)
    assert len(results) == len(seqs)
    for k, (x, got) in enumerate(zip(seqs, results)):
        want = alone(session, layout, x, layout.time_axis, layout.batch_axis)
        assert set(got) == set(want)
        for name in want:
            assert got[name].shape == want[name].shape, (k, name)
            g, w = got[name].astype(np.float32), want[name].astype(np.float32)
            err = float((np.abs(g - w) - rtol * np.abs(w)).max(initial=0))
            assert err <= atol, (k, name, err)


@pytest.mark.parametrize("direction,layout,dtype", [
    ("forward", 0, np.float32), ("bidirectional", 0, np.float32), ("forward", 1, np.float32),
    ("bidirectional", 1, np.float32), ("reverse", 0, np.float32), ("bidirectional", 1, np.float16)])
def test_exact_per_sequence(direction, layout, dtype, rng):
    spec = LstmSpec(4, 8, num_layers=2, direction=direction, layout=layout)
    report = Report()
    model = optimized(spec, rng, dtype, report)
    assert report.rules["sequence_lens"].hits == 1 and not report.rules["sequence_lens"].refusals
    assert "sequence_lens" in [i.name for i in model.graph.input]
    seqs = [rng.standard_normal((n, 4)).astype(dtype) for n in LENGTHS]
    batcher = BucketingBatcher(model, buckets=3, max_batch_size=4)
    results = batcher.run(seqs)
    # float16 is storage only (math in fp32), but the CPU kernel's fp32 sums may round a last fp16
    # bit differently with another batch size: 1e-5 plus one fp16 ulp (2^-10 relative)
    assert_matches_alone(model, seqs, results, 1e-5, 0.0 if dtype == np.float32 else 2.0**-10)
    assert [r["Y"].shape[0] for r in results] == LENGTHS
    s = batcher.stats
    assert s.sequences == len(LENGTHS) and s.real_tokens == sum(LENGTHS)
    assert s.padded_tokens >= s.real_tokens and sum(b.sequences for b in s.buckets) == len(LENGTHS)


def test_order_kept_and_bucket_choices(rng):
    spec = LstmSpec(3, 6)
    model = optimized(spec, rng)
    seqs = [rng.standard_normal((n, 3)).astype(np.float32) for n in rng.integers(1, 20, 30)]
    reference = BucketingBatcher(model, buckets=[64], max_batch_size=1).run(seqs)
    for buckets, kw in [("auto", {}), (4, {}), ([3, 8], {}), ("auto", {"max_batch_tokens": 40})]:
        batcher = BucketingBatcher(model, buckets=buckets, **kw)
        results = batcher.run(seqs)
        for got, want in zip(results, reference):
            np.testing.assert_allclose(got["Y"], want["Y"], atol=1e-5)
            np.testing.assert_allclose(got["Y_h"], want["Y_h"], atol=1e-5)
        if "max_batch_tokens" in kw:
            assert all(b.padded_tokens <= 40 * b.batches for b in batcher.stats.buckets)
    assert BucketingBatcher(model, buckets=[3, 8]).boundaries([1, 5, 12]) == [3, 8, 12]


def test_empty_one_and_short_sequences(rng):
    spec = LstmSpec(3, 5, direction="bidirectional", layout=1)
    model = optimized(spec, rng)
    batcher = BucketingBatcher(model)
    assert batcher.run([]) == [] and batcher.stats.sequences == 0
    one = [rng.standard_normal((6, 3)).astype(np.float32)]
    assert_matches_alone(model, one, batcher.run(one), 1e-5)
    seqs = [np.zeros((0, 3), np.float32), rng.standard_normal((1, 3)).astype(np.float32),
            np.zeros((0, 3), np.float32), rng.standard_normal((4, 3)).astype(np.float32)]
    results = batcher.run(seqs)
    for k in (0, 2):  # length 0: no steps, zero final states (docs/ops.md)
        assert results[k]["Y"].shape == (0, 2, 5)
        assert not results[k]["Y_h"].any() and not results[k]["Y_c"].any()
    assert_matches_alone(model, [seqs[1], seqs[3]], [results[1], results[3]], 1e-5)
    only_empty = batcher.run([np.zeros((0, 3), np.float32)])
    assert only_empty[0]["Y"].shape == (0, 2, 5)


def test_length_limits_and_bad_input(rng):
    spec = LstmSpec(3, 5)
    model = optimized(spec, rng)
    model.graph.input[0].type.tensor_type.shape.dim[0].dim_value = 8  # a model with a fixed T of 8
    batcher = BucketingBatcher(model)
    seqs = [rng.standard_normal((n, 3)).astype(np.float32) for n in (8, 3)]
    fixed = batcher.run(seqs)
    assert batcher.stats.padded_tokens == 16
    assert fixed[1]["Y"].shape == (3, 1, 5)
    with pytest.raises(ValueError, match="sequence 1: length 9, above the model's time length 8"):
        batcher.run([seqs[0], np.zeros((9, 3), np.float32)])
    with pytest.raises(ValueError, match="sequence 0: shape"):
        batcher.run([np.zeros((2, 4), np.float32)])
    with pytest.raises(ValueError, match="dimensions"):
        batcher.run([np.zeros(2, np.float32)])
    with pytest.raises(ValueError, match="buckets"):
        BucketingBatcher(model, buckets=0)
    with pytest.raises(ValueError, match="not model inputs"):
        batcher.run(seqs, extra_inputs={"nope": np.zeros(1)})


def test_model_without_ragged_exact_input(rng):
    spec = LstmSpec(3, 5, direction="bidirectional")
    model = fused_model(spec, random_layers(spec, rng))  # no sequence_lens: padding changes the reverse pass
    layout = analyze(model)
    assert not layout.exact and "sequence_lens" in layout.describe()
    with pytest.raises(NotRaggedExact, match="allow_padding"):
        BucketingBatcher(model).run([np.zeros((2, 3), np.float32)])
    results = BucketingBatcher(model, allow_padding=True).run([np.ones((2, 3), np.float32),
                                                               np.ones((4, 3), np.float32)])
    assert results[0]["Y"].shape == (2, 2, 5)
    # A forward stack whose final states nobody reads is exact even without sequence_lens.
    fwd = LstmSpec(3, 5)
    assert analyze(fused_model(fwd, random_layers(fwd, rng), outputs=("Y",))).exact


def _with_embedding_and_head(spec, rng, head):
    """ids [B, T] -> embedding -> LSTM stack (layout 1) -> a head: "per_step" (MatMul, Add,
    Softmax on each step), "last_gather" (Y[:, -1] by Gather), "last_slice" (by Slice),
    "mean" (ReduceMean over time)."""
    model = stock_model(spec, random_layers(spec, rng), outputs=("Y",))
    g = model.graph
    vocab, C, DH = 11, 3, spec.num_directions * spec.hidden_size
    g.initializer.extend([
        numpy_helper.from_array(rng.standard_normal((vocab, spec.input_size)).astype(np.float32), "table"),
        numpy_helper.from_array(np.array([0, 0, -1], np.int64), "flat"),
        numpy_helper.from_array(rng.standard_normal((DH, C)).astype(np.float32), "Wc"),
        numpy_helper.from_array(rng.standard_normal(C).astype(np.float32), "bc"),
        numpy_helper.from_array(np.array(-1, np.int64), "last"),
        numpy_helper.from_array(np.array([-1], np.int64), "s"), numpy_helper.from_array(np.array([2**62], np.int64), "e"),
        numpy_helper.from_array(np.array([1], np.int64), "ax")])
    nodes = [helper.make_node("Gather", ["table", "ids"], ["X"], axis=0), *g.node,
             helper.make_node("Reshape", ["Y", "flat"], ["Yf"])]
    if head == "per_step":
        nodes += [helper.make_node("MatMul", ["Yf", "Wc"], ["z"]), helper.make_node("Add", ["z", "bc"], ["zb"]),
                  helper.make_node("Softmax", ["zb"], ["probs"], axis=-1)]
        out = helper.make_tensor_value_info("probs", TensorProto.FLOAT, ["B", "T", C])
    else:
        if head == "last_gather":
            nodes.append(helper.make_node("Gather", ["Yf", "last"], ["h"], axis=1))
        elif head == "last_slice":
            nodes += [helper.make_node("Slice", ["Yf", "s", "e", "ax"], ["h3"]),
                      helper.make_node("Squeeze", ["h3", "ax"], ["h"])]
        else:
            nodes.append(helper.make_node("ReduceMean", ["Yf", "ax"], ["h"], keepdims=0))
        nodes.append(helper.make_node("MatMul", ["h", "Wc"], ["logits"]))
        out = helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["B", C])
    del g.node[:], g.input[:], g.output[:]
    g.node.extend(nodes)
    g.input.append(helper.make_tensor_value_info("ids", TensorProto.INT64, ["B", "T"]))
    g.output.append(out)
    model.opset_import[0].version = 18
    onnx.checker.check_model(model)
    return model


def test_embedding_and_per_step_head_are_exact(rng):
    spec = LstmSpec(4, 6, num_layers=2, direction="bidirectional", layout=1)
    model = optimize(_with_embedding_and_head(spec, rng, "per_step"), sequence_lens_input=True)
    layout = analyze(model)
    assert layout.exact and (layout.input, layout.time_axis, layout.batch_axis) == ("ids", 1, 0)
    seqs = [rng.integers(0, 11, n) for n in LENGTHS]
    results = BucketingBatcher(model, buckets="auto", max_batch_size=4).run(seqs)
    assert_matches_alone(model, seqs, results, 1e-5)
    assert results[2]["probs"].shape == (9, 3)


@pytest.mark.parametrize("head,why", [("last_gather", "picks time steps"), ("last_slice", "slices the time axis"),
                                      ("mean", "reduces over the time or batch axis")])
def test_time_mixing_head_is_reported(head, why, rng):
    spec = LstmSpec(4, 6, layout=1)
    report = Report()
    model = optimize(_with_embedding_and_head(spec, rng, head), sequence_lens_input=True, report=report)
    refusals = report.rules["sequence_lens"].refusals
    assert any(why in r and "not ragged-exact" in r for r in refusals), refusals
    assert "not ragged-exact" in report.table()
    with pytest.raises(NotRaggedExact, match=why):
        BucketingBatcher(model).run([np.array([1, 2, 3])])
    out = BucketingBatcher(model, allow_padding=True).run([np.array([1, 2, 3]), np.array([4])])
    assert out[0]["logits"].shape == (3,)


def test_optimize_without_a_sequence_input_reports_it(rng):
    model = helper.make_model(helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])]))
    model.ir_version = 10
    report = Report()
    out = optimize(model, sequence_lens_input=True, report=report)
    assert [i.name for i in out.graph.input] == ["x"]
    assert any("no model input" in r for r in report.rules["sequence_lens"].refusals)


def test_arrow_column_and_session_input(rng):
    pa = pytest.importorskip("pyarrow")
    spec = LstmSpec(2, 4)
    model = optimized(spec, rng)
    seqs = [rng.standard_normal((n, 2)).astype(np.float32) for n in (3, 1, 4)]
    column = pa.array([s.tolist() for s in seqs], pa.list_(pa.list_(pa.float32(), 2)))
    from_session = BucketingBatcher(InferenceSession(model)).run(pa.chunked_array([column[:1], column[1:]]))
    assert_matches_alone(model, seqs, from_session, 1e-5)


def test_optimal_boundaries_match_brute_force(rng):
    for _ in range(60):
        lengths = rng.integers(0, 25, rng.integers(1, 12))
        k = int(rng.integers(1, 5))
        values = np.unique(lengths)
        best = min(bk.padded_tokens(lengths, sorted([*c, int(values[-1])]))
                   for r in range(min(k, values.size)) for c in itertools.combinations(values[:-1].tolist(), r))
        got = bk.optimal_boundaries(lengths, k)
        assert len(got) <= k and got[-1] == values[-1] and bk.padded_tokens(lengths, got) == best


def test_greedy_boundaries_bound_the_padding(rng):
    lengths = np.clip(np.round(np.exp(rng.normal(4, 1, 3000))), 5, 1000).astype(int)
    bounds = bk.greedy_boundaries(lengths, tolerance=0.05, min_count=1)
    which = bk.assign(lengths, bounds)
    for k, b in enumerate(bounds):
        members = lengths[which == k]
        assert members.size and members.size * b <= 1.05 * members.sum() + 1e-9 or members.min() == b
    assert bk.greedy_boundaries([], 0.05) == [] and bk.optimal_boundaries([], 3) == []
    full = bk.greedy_boundaries(lengths, tolerance=0.05, min_count=64, hard_limit=np.inf)
    assert all((bk.assign(lengths, full) == k).sum() >= 64 for k in range(len(full) - 1))
    capped = bk.greedy_boundaries(lengths, tolerance=0.05, min_count=64)  # never past 10% per bucket
    which = bk.assign(lengths, capped)
    assert all((which == k).sum() * b <= 1.10 * lengths[which == k].sum() for k, b in enumerate(capped))


def test_each_session_gets_its_runner(rng):
    """The run path is chosen once per session (batch_runners.runner_for): host arrays on the CPU
    EP, a pipelining session's stream for one that runs calls as a stream."""
    from lstm_ort.pipeline import PipelineSession
    from lstm_ort.pipeline.fake import FakeBackend
    from lstm_ort.serving.batch.runners import HostRunner, StreamRunner, runner_for

    spec = LstmSpec(3, 6, num_layers=2)
    model = optimized(spec, rng)
    runner = runner_for(InferenceSession(model))
    assert type(runner) is HostRunner
    assert type(runner_for(PipelineSession(fused_model(spec, random_layers(spec, rng)), backend=FakeBackend()))) \
        is StreamRunner
    batcher = BucketingBatcher(model, buckets=[3, 9], max_batch_size=2)
    calls, call = [], batcher.runner.call
    batcher.runner.call = lambda job, outputs: calls.append(job) or call(job, outputs)
    seqs = [rng.standard_normal((n, 3)).astype(np.float32) for n in LENGTHS]
    assert_matches_alone(model, seqs, batcher.run(seqs), 1e-5)
    assert [c["X"].shape[:2] for c in calls] == [(b.steps, b.rows) for b in batcher._plan(
        np.array(LENGTHS), InferenceSession(model).get_inputs()[0], batcher.layout())[0]]


@pytest.mark.gpu
def test_cuda_session_runs_with_io_binding(rng):
    """On the CUDA EP the batches are bound to the device (BindingRunner), sequence_lens on the host;
    every sequence's outputs equal the CPU batcher's."""
    from lstm_ort.serving.batch.runners import BindingRunner

    spec = LstmSpec(4, 8, num_layers=2, direction="bidirectional")
    model = optimized(spec, rng)
    seqs = [rng.standard_normal((n, 4)).astype(np.float32) for n in LENGTHS]
    cuda = BucketingBatcher(model, providers="cuda", buckets=3, max_batch_size=4)
    assert type(cuda.runner) is BindingRunner
    want = BucketingBatcher(model, buckets=3, max_batch_size=4).run(seqs)
    for got, ref in zip(cuda.run(seqs), want):
        for name in ref:
            np.testing.assert_allclose(got[name], ref[name], atol=2e-3, rtol=2e-3)
