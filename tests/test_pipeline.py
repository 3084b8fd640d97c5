"""lstm_ort.pipeline on the CPU: the partitioner, the planner, and both schedules on the fake
device layer (which checks stream ordering the way a GPU applies it)."""

import functools
import itertools
import subprocess
import sys

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

from lstm_ort.builders import LstmSpec, fused_model, random_layers
from lstm_ort.ops.packing import PackedWeights, pack_layers, unpack_layers, weight_count
from lstm_ort.pipeline import PipelineSession, Unsupported
from lstm_ort.pipeline.executor import Signal, stage_buffers_in_use
from lstm_ort.pipeline.fake import FakeBackend, Hazard
from lstm_ort.pipeline.partition import (C0, H0, STAGE_IN, STAGE_Y, YC, YH, analyze, balanced_ranges, layer_costs,
                                         ranges_from_counts, slice_states, slice_weights, stage_models)
from lstm_ort.pipeline.schedule import CostModel, Plan, choose, host_order
from lstm_ort.pipeline.testing import (
    EXPORTERS,
    TORCH_STYLES,
    drop_initial_states,
    embedded_classifier,
    keras_feeds,
    keras_stack,
    token_feeds,
    torch_export,
    torch_feeds,
)
from lstm_ort.testing import make_feeds, run

CPU = ["CPUExecutionProvider"]


def compositions(L, K):
    return [c for c in itertools.product(range(1, L + 1), repeat=K) if sum(c) == L]


def model_and_feeds(rng, direction="forward", layout=0, L=4, I=5, H=4, T=9, B=7, seq_lens=False,
                    initial_states=False, peepholes=False):
    spec = LstmSpec(input_size=I, hidden_size=H, num_layers=L, direction=direction, layout=layout, peepholes=peepholes)
    model = fused_model(spec, random_layers(spec, rng), seq_lens=seq_lens, initial_states=initial_states)
    return spec, model, make_feeds(spec, T, B, rng, seq_lens=seq_lens, initial_states=initial_states)


def max_diff(a, b):
    return max(float(np.abs(x.astype(np.float64) - y).max()) for x, y in zip(a, b))


# -- the partitioner ---------------------------------------------------------------------------

@pytest.mark.parametrize("direction", ["forward", "bidirectional"])
@pytest.mark.parametrize("layout", [0, 1])
def test_every_split_run_range_by_range_equals_the_stack(rng, direction, layout):
    """Each stage model on the CPU EP, one after another: the unsplit node's Y, Y_h, Y_c."""
    _, model, feeds = model_and_feeds(rng, direction, layout, seq_lens=True, initial_states=True, peepholes=True)
    ref = run(model, feeds)
    pm = analyze(model)
    for K in (1, 2, 3, 4):
        for counts in compositions(4, K):
            stages = stage_models(pm, ranges_from_counts(counts, 4))
            x, hs, cs = None, [], []
            for st in stages:
                a, b = st.layers
                f = {H0: slice_states(pm, feeds["initial_h"], a, b), C0: slice_states(pm, feeds["initial_c"], a, b),
                     "sequence_lens": feeds["sequence_lens"]}
                f.update({"X": feeds["X"]} if st.index == 0 else {STAGE_IN: x})
                names = (["Y"] if st.index == K - 1 else [STAGE_Y]) + [YH, YC]
                x, h, c = _run_names(st.model, f, names)
                hs.append(h)
                cs.append(c)
            got = [x, np.concatenate(hs, axis=pm.state_axis), np.concatenate(cs, axis=pm.state_axis)]
            assert max_diff(ref, got) <= 1e-6, counts


def _run_names(model, feeds, names):
    from lstm_ort.runtime.session import InferenceSession

    return InferenceSession(model.SerializeToString(), providers=CPU).run(names, feeds)


@pytest.mark.parametrize("D", [1, 2])
def test_weight_slices_are_the_layers_packed_alone(rng, D):
    spec = LstmSpec(input_size=6, hidden_size=3, num_layers=4, direction="bidirectional" if D == 2 else "forward",
                    peepholes=True)
    layers = random_layers(spec, rng)
    model = fused_model(spec, layers)
    pm = analyze(model)
    for a, b in [(0, 1), (1, 3), (2, 4), (0, 4), (3, 4)]:
        w = slice_weights(pm, a, b)
        I = spec.input_size if a == 0 else D * spec.hidden_size
        assert w["W"].size == weight_count(b - a, D, I, spec.hidden_size)
        alone = pack_layers(layers[a:b])
        np.testing.assert_array_equal(w["W"], alone.W)
        np.testing.assert_array_equal(w["B"], alone.B)
        np.testing.assert_array_equal(w["P"], alone.P)
        back = unpack_layers(PackedWeights(w["W"], w["B"], w["P"]), b - a, D, I, spec.hidden_size)
        np.testing.assert_allclose(back[0].W, layers[a].W)


def test_balanced_ranges():
    assert balanced_ranges([1.0] * 8, 2) == [(0, 4), (4, 8)]
    assert balanced_ranges([1.0] * 8, 4) == [(0, 2), (2, 4), (4, 6), (6, 8)]
    assert balanced_ranges([1.0] * 7, 2) in ([(0, 3), (3, 7)], [(0, 4), (4, 7)])
    assert balanced_ranges([5.0, 1, 1, 1, 1, 1], 2) == [(0, 1), (1, 6)]
    assert balanced_ranges([1.0] * 4, 2, first_extra=2.0) == [(0, 1), (1, 4)]
    assert balanced_ranges([1.0] * 4, 2, last_extra=2.0) == [(0, 3), (3, 4)]
    assert balanced_ranges([1.0] * 3, 3) == [(0, 1), (1, 2), (2, 3)]
    with pytest.raises(Unsupported):
        balanced_ranges([1.0] * 2, 3)
    # Modelled per-layer FLOPs: layer 0 reads I, the others D*H.
    costs = layer_costs(8, 1, 1024, 1024)
    assert len(set(costs)) == 1 and costs[0] == 2 * 2048 * 4096
    wide = layer_costs(4, 1, 4096, 512)
    assert wide[0] > wide[1] and balanced_ranges(wide, 2) == [(0, 1), (1, 4)]
    with pytest.raises(ValueError):
        ranges_from_counts([2, 1], 4)


def test_surrounding_ops_go_to_the_first_and_last_stage(rng):
    spec = LstmSpec(input_size=5, hidden_size=4, num_layers=4)
    pm = analyze(embedded_classifier(spec, rng))
    assert [n.op_type for n in pm.pre_nodes] == ["Gather"]
    assert [n.op_type for n in pm.post_nodes] == ["Transpose", "Reshape", "MatMul", "Add", "LogSoftmax"]
    assert pm.inputs["tokens"].time == 0 and pm.inputs["tokens"].batch == 1
    stages = stage_models(pm, [(0, 2), (2, 4)])
    assert "Gather" in [n.op_type for n in stages[0].model.graph.node]
    assert "MatMul" in [n.op_type for n in stages[1].model.graph.node]
    assert "Gather" not in [n.op_type for n in stages[1].model.graph.node]
    assert pm.chunk_refusal is None


def _two_stacks(rng):
    spec = LstmSpec(input_size=4, hidden_size=4, num_layers=1)
    m = fused_model(spec, random_layers(spec, rng))
    g = m.graph
    second = onnx.NodeProto()
    second.CopyFrom(g.node[0])
    del second.input[:]
    second.input.extend(["Y_flat", g.node[0].input[1]])
    del second.output[:]
    second.output.extend(["Y2"])
    g.node.extend([helper.make_node("Squeeze", ["Y", "ax"], ["Y_sq"]), helper.make_node("Relu", ["Y_sq"], ["Y_flat"]),
                   second])
    g.initializer.append(numpy_helper.from_array(np.array([1], np.int64), "ax"))
    return m


def test_refusals_say_why(rng):
    with pytest.raises(Unsupported, match="2 FusedLSTM stacks"):
        analyze(_two_stacks(rng))
    spec = LstmSpec(input_size=4, hidden_size=4, num_layers=2)
    m = fused_model(spec, random_layers(spec, rng))
    m.graph.node.append(helper.make_node("ReduceMean", ["Y"], ["mean"], axes=[0]))
    m.graph.output.append(helper.make_tensor_value_info("mean", onnx.TensorProto.FLOAT, None))
    with pytest.raises(Unsupported, match="ReduceMean"):
        analyze(m)
    m = fused_model(spec, random_layers(spec, rng))
    m.graph.node.append(helper.make_node("Add", ["Y", "Y_h"], ["r"]))
    m.graph.output.append(helper.make_tensor_value_info("r", onnx.TensorProto.FLOAT, None))
    with pytest.raises(Unsupported, match="Add node .* reads both the stack's Y and its final states"):
        analyze(m)
    m = fused_model(spec, random_layers(spec, rng))
    m.graph.node.append(helper.make_node("MatMul", ["Y", "Y"], ["yy"]))
    m.graph.output.append(helper.make_tensor_value_info("yy", onnx.TensorProto.FLOAT, None))
    with pytest.raises(Unsupported, match="MatMul"):
        analyze(m)
    spec_bi = LstmSpec(input_size=4, hidden_size=4, num_layers=2, direction="bidirectional")
    with pytest.raises(Unsupported, match="forward"):
        PipelineSession(fused_model(spec_bi, random_layers(spec_bi, rng)), time_chunk=2, backend=FakeBackend())
    spec_seq = LstmSpec(input_size=4, hidden_size=4, num_layers=2)
    with pytest.raises(Unsupported, match="sequence_lens"):
        PipelineSession(fused_model(spec_seq, random_layers(spec_seq, rng), seq_lens=True), time_chunk=2,
                        backend=FakeBackend())
    with pytest.raises(ValueError, match="entries"):
        PipelineSession(fused_model(spec, random_layers(spec, rng)), stages=[2], backend=FakeBackend())
    with pytest.raises(Unsupported, match="stages"):
        PipelineSession(fused_model(spec, random_layers(spec, rng)), devices=(0, 1, 2), backend=FakeBackend(3))


# -- the planner -------------------------------------------------------------------------------

def test_auto_plan_picks_by_batch_and_length():
    flops = layer_costs(8, 1, 1024, 1024)
    ranges = [(0, 4), (4, 8)]
    one = choose(flops, ranges, 1, 2000, chunkable=True)
    assert one.num_micro_batches == 1 and one.num_chunks >= 8 and one.modelled_ms < 0.6 * one.modelled_single_ms
    big = choose(flops, ranges, 256, 100, chunkable=True)
    assert big.num_items >= 4 and big.modelled_ms < big.modelled_single_ms
    no_chunks = choose(flops, ranges, 64, 100, chunkable=False, chunk_refusal="bidirectional")
    assert no_chunks.num_chunks == 1 and "bidirectional" in no_chunks.reason
    fixed = choose(flops, ranges, 64, 100, chunkable=True, micro_batch=16, time_chunk=25)
    assert (fixed.num_micro_batches, fixed.num_chunks, fixed.reason) == (4, 4, "as asked")
    with pytest.raises(ValueError):
        choose(flops, ranges, 64, 100, chunkable=False, time_chunk=10)
    # A slower per-call overhead means fewer, longer chunks.
    slow = choose(flops, ranges, 1, 2000, chunkable=True, cost=CostModel(layer_call_s=2e-3))
    assert slow.num_chunks < one.num_chunks


def test_plan_items_and_host_order():
    plan = Plan(((0, 2), (2, 4)), batch=7, steps=9, micro_batch=3, time_chunk=4)
    items = plan.items()
    assert [(i.micro_batch, i.chunk) for i in items] == [(j, c) for j in range(3) for c in range(3)]
    assert items[-1].rows == (6, 7) and items[-1].steps == (8, 9)
    assert plan.gpipe_bubble == pytest.approx(1 / 10)
    order = host_order(4, 3)
    assert sorted(order) == sorted((k, i) for k in range(3) for i in range(4))
    for k, i in order:  # a stage's item comes after the previous stage's
        if k:
            assert order.index((k - 1, i)) < order.index((k, i))


# -- both schedules on the fake device layer ---------------------------------------------------

CASES = [  # direction, layout, seq_lens, initial states, micro_batch, time_chunk
    ("forward", 0, False, False, 3, 4),
    ("forward", 1, False, True, 2, 3),
    ("forward", 0, False, True, None, None),
    ("reverse", 0, True, True, 3, None),
    ("bidirectional", 1, True, False, 2, None),
    ("bidirectional", 0, False, True, 7, None),
]


@pytest.mark.parametrize("threads", [True, False])
@pytest.mark.parametrize("case", CASES, ids=lambda c: "-".join(map(str, c)))
def test_pipeline_equals_the_stack(rng, case, threads):
    direction, layout, seq, init, mb, tc = case
    _, model, feeds = model_and_feeds(rng, direction, layout, seq_lens=seq, initial_states=init)
    ref = run(model, feeds)
    be = FakeBackend(3)
    sess = PipelineSession(model, devices=(0, 1, 2), stages=[1, 2, 1], micro_batch=mb, time_chunk=tc, backend=be,
                           threads=threads)
    got = sess.run(None, feeds)
    assert max_diff(ref, got) <= 1e-6, sess.last_plan.describe()
    assert sess.run(["Y_h"], feeds)[0].shape == ref[1].shape


@pytest.mark.parametrize("layout", [0, 1])
def test_host_copies_cut_over_threads(rng, monkeypatch, layout):
    """Inputs staged and outputs gathered in pieces on the copy threads (forced here at 64 bytes a
    piece): the same answer, and the copy threads are gone after close."""
    from lstm_ort.pipeline import executor

    monkeypatch.setattr(executor, "COPY_PIECE_BYTES", 64)
    monkeypatch.setattr(executor, "COPY_THREADS", 3)
    _, model, feeds = model_and_feeds(rng, "forward", layout, T=12, B=8, initial_states=True)
    ref = run(model, feeds)
    sess = PipelineSession(model, devices=(0, 1), micro_batch=4, time_chunk=5, backend=FakeBackend())
    for _ in range(2):
        assert max_diff(ref, sess.run(None, feeds)) <= 1e-6
    assert sess.executor.copiers is not None
    sess.close()
    assert sess.executor.copiers is None


@pytest.mark.parametrize("layout", [0, 1])
@pytest.mark.parametrize("direction", ["forward", "bidirectional"])
def test_ops_before_and_after(rng, layout, direction):
    spec = LstmSpec(input_size=5, hidden_size=4, num_layers=3, layout=layout, direction=direction)
    model = embedded_classifier(spec, rng)
    feeds = token_feeds(spec, 10, 6, rng)
    ref = run(model, feeds)
    for mb, tc in [(2, 3), (4, None), (6, 10)]:
        if tc and direction != "forward":
            tc = None
        sess = PipelineSession(model, devices=(0, 1), micro_batch=mb, time_chunk=tc, backend=FakeBackend())
        assert max_diff(ref, sess.run(None, feeds)) <= 1e-6


def _run_with_costs(model, feeds, devices, **kw):
    be = FakeBackend(max(1, len(set(devices))), cost=lambda st, rows, steps: 1.0,
                     copy_cost=0.0)
    sess = PipelineSession(model, devices=devices, backend=be, **kw)
    sess.run(None, feeds)
    return be, sess


def test_gpipe_order(rng):
    """Micro-batches: stage k runs micro-batch j while stage k+1 runs j-1, no stage waits for
    more than its predecessor's item, and the run takes M + K - 1 slots."""
    _, model, feeds = model_and_feeds(rng, "bidirectional", 0, B=8)
    be, sess = _run_with_costs(model, feeds, (0, 1, 2), stages=[1, 2, 1], micro_batch=2)
    runs = be.runs()
    starts = {(op.meta["stage"], op.meta["micro_batch"]): op.start for op in runs}
    assert sess.last_plan.num_micro_batches == 4 and sess.last_plan.num_chunks == 1
    for (k, j), t in starts.items():
        assert t == k + j, (k, j, t)
    for j in range(1, 4):
        assert starts[(0, j)] == starts[(1, j - 1)] == starts[(2, j - 2)] if j >= 2 else True
    assert max(op.end for op in runs) == 4 + 3 - 1
    by_stage = [[op.meta["micro_batch"] for op in runs if op.stream == f"stage{k}"] for k in range(3)]
    assert by_stage == [[0, 1, 2, 3]] * 3


def test_time_chunk_wavefront_order(rng):
    """One sequence in chunks: stage k runs chunk c while stage k+1 runs chunk c-1."""
    _, model, feeds = model_and_feeds(rng, "forward", 0, B=1, T=10)
    be, sess = _run_with_costs(model, feeds, (0, 1, 2), stages=[2, 1, 1], time_chunk=2)
    plan = sess.last_plan
    assert (plan.num_micro_batches, plan.num_chunks) == (1, 5)
    starts = {(op.meta["stage"], op.meta["chunk"]): op.start for op in be.runs()}
    assert starts == {(k, c): float(k + c) for k in range(3) for c in range(5)}
    # Each stage's state travels from chunk to chunk in its own two buffers.
    steps = [op.meta["steps"] for op in be.runs()]
    assert set(steps) == {2}


def test_no_stage_reads_before_its_producer(rng, monkeypatch):
    """The checker catches a missing event wait (read too early) and a missing free wait
    (slot overwritten before it was read): the executor's waits are what keeps it quiet."""
    _, model, feeds = model_and_feeds(rng, "forward", 0, B=8)
    original = Signal.wait

    def skip_ready(self, backend, stream, gen):
        if stream.name.startswith("stage1"):
            return None  # the consumer forgets to wait for the copy
        return original(self, backend, stream, gen)

    monkeypatch.setattr(Signal, "wait", skip_ready)
    with pytest.raises(Hazard, match="before its producer's event"):
        PipelineSession(model, devices=(0, 1), micro_batch=2, backend=FakeBackend(), threads=False).run(None, feeds)

    def skip_free(self, backend, stream, gen):
        if stream.name == "stage0":
            return None  # the producer rewrites a slot without waiting for the consumer
        return original(self, backend, stream, gen)

    monkeypatch.setattr(Signal, "wait", skip_free)
    with pytest.raises(Hazard):
        PipelineSession(model, devices=(0, 1), micro_batch=1, backend=FakeBackend(), threads=False).run(None, feeds)
    monkeypatch.setattr(Signal, "wait", original)
    PipelineSession(model, devices=(0, 1), micro_batch=1, backend=FakeBackend(), threads=False).run(None, feeds)


def test_buffers_are_reused(rng):
    _, model, feeds = model_and_feeds(rng, "forward", 0, B=8, T=12)
    be = FakeBackend()
    sess = PipelineSession(model, devices=(0, 1), micro_batch=1, time_chunk=3, backend=be, threads=True)
    sess.run(None, feeds)
    assert sess.last_plan.num_items == 32
    bufs = stage_buffers_in_use(sess.executor)
    # 2 slots on each side of the boundary, 2 h and 2 c buffers per stage, 2 input slots, one zero
    # initial state per stage, 2 slots for the last stage's Y (made once the first call told its
    # shape): whatever the item count.
    assert len(bufs) == 2 * 2 + 2 * 2 * 2 + 2 + 2 + 2
    runs = be.runs()
    slots_of = {op.meta["slot"] for op in runs}
    assert slots_of == {0, 1}
    allocated = be.allocations
    threads = list(sess.executor.workers.threads)
    ref, first_call = run(model, feeds), len(be.log)
    assert max_diff(ref, sess.run(None, feeds)) <= 1e-6  # Y through the last stage's slots now
    assert sess.executor.workers.threads == threads  # one host thread per stage for the session's life
    # No output ORT allocates after the first call: every Run of the last stage wrote into a slot.
    assert not [op for op in be.log[first_call:] if op.kind == "alloc" and op.meta["name"].startswith("ort:")]
    sess.run(None, {"X": feeds["X"][:, :4]})
    assert be.allocations == allocated


def test_close_releases_buffers_events_and_streams(rng):
    _, model, feeds = model_and_feeds(rng, "forward", 0, B=8, T=12, initial_states=True)
    for devices, be in (((0, 1), FakeBackend()), ((0, 1), FakeBackend(peer=False)), ((0, 0), FakeBackend())):
        sess = PipelineSession(model, devices=devices, micro_batch=2, time_chunk=4, backend=be)
        sess.profile = True
        sess.run(None, feeds)
        assert be.live_buffers and be.live_events and be.live_streams
        sess.close()
        assert not be.live_buffers and not be.live_events and not be.live_streams
        assert all(st.runner is None for st in sess.executor.stages)
        sess.close()  # once only
        with pytest.raises(RuntimeError, match="closed"):
            sess.run(None, feeds)


@pytest.mark.parametrize("direction,layout", [("forward", 0), ("bidirectional", 1)])
def test_run_batches_equals_a_run_per_call(rng, direction, layout):
    """Calls of one length go through the stages as one stream (one fill and drain), in
    micro-batches of the largest call's rows; a call of another length starts a new stream."""
    spec, model, _ = model_and_feeds(rng, direction, layout, seq_lens=True, initial_states=True)
    calls = [make_feeds(spec, T, B, rng, seq_lens=True, initial_states=True) for T, B in ((9, 3), (9, 3), (9, 2), (6, 3))]
    be = FakeBackend()
    sess = PipelineSession(model, devices=(0, 1), backend=be, micro_batch=3)  # not one GPU for the lone call
    got = sess.run_batches(None, calls)
    assert len(got) == 4
    for feeds, outs in zip(calls, got):
        assert max_diff(run(model, feeds), outs) <= 1e-6
    firsts = [(op.meta["item"], op.meta["rows"]) for op in be.runs() if op.meta["stage"] == 0]
    assert firsts == [(0, 3), (1, 3), (2, 2), (0, 3)]  # one stream of 3 items, then the T=6 call
    assert sess.last_plan.batch == 3 and sess.last_plan.steps == 6  # the last group: the one call of T=6
    with pytest.raises(ValueError, match="missing"):
        sess.run_batches(None, [calls[0], {}])


def test_row_stack_reads_rows_across_calls(rng):
    from lstm_ort.pipeline.session import RowStack

    parts = [rng.standard_normal((5, n, 3)).astype(np.float32) for n in (2, 3, 1)]
    stack, full = RowStack(parts, 1), np.concatenate(parts, axis=1)
    assert stack.shape == full.shape and stack.nbytes == full.nbytes and stack.itemsize == 4
    for a, b in ((0, 2), (1, 4), (2, 6), (0, 6), (5, 6)):
        assert np.array_equal(stack[(slice(1, 4), slice(a, b), slice(None))], full[1:4, a:b])


@pytest.mark.parametrize("direction,layout", [("forward", 0), ("bidirectional", 1)])
def test_bucketing_batcher_drives_a_pipeline(rng, direction, layout):
    """The batcher takes a PipelineSession and hands it each bucket's batches as one stream
    (run_batches): every sequence's outputs equal the batcher's on the unsplit model."""
    from lstm_ort.serving import BucketingBatcher

    spec = LstmSpec(input_size=5, hidden_size=4, num_layers=4, direction=direction, layout=layout)
    model = fused_model(spec, random_layers(spec, rng), seq_lens=True)
    seqs = [rng.standard_normal((n, 5)).astype(np.float32) for n in (1, 9, 3, 7, 7, 2, 12, 5, 6, 11)]
    reference = BucketingBatcher(model, buckets=3, max_batch_size=2).run(seqs)
    be = FakeBackend()
    sess = PipelineSession(model, devices=(0, 1), backend=be)
    calls = []
    run_batches = sess.run_batches
    sess.run_batches = lambda names, feeds: (calls.append(len(feeds)), run_batches(names, feeds))[1]
    got = BucketingBatcher(sess, buckets=3, max_batch_size=2).run(seqs)
    assert [sorted(r) for r in got] == [sorted(r) for r in reference]
    for r, g in zip(reference, got):
        for name in r:
            assert np.abs(r[name] - g[name]).max() <= 1e-6, name
    assert len(calls) <= 3 and sum(calls) >= 5  # a stream per bucket, not a call per batch


def test_given_initial_states_are_uploaded_per_micro_batch(rng):
    """Initial states reach each stage as device buffers (one per micro-batch, H0 and C0), written
    on the stage's own stream before its first item: no host array goes into a stage's Run."""
    _, model, feeds = model_and_feeds(rng, "bidirectional", 1, B=6, initial_states=True)
    be = FakeBackend()
    seen = []
    sess = PipelineSession(model, devices=(0, 1), micro_batch=2, backend=be)
    for st in sess.executor.stages:
        run_stage = st.runner.run
        st.runner.run = lambda inputs, outputs, run_stage=run_stage: (seen.append(inputs), run_stage(inputs, outputs))[1]
    assert max_diff(run(model, feeds), sess.run(None, feeds)) <= 1e-6
    assert seen and not any(isinstance(v, np.ndarray) for inputs in seen for v in inputs.values())
    assert len(stage_buffers_in_use(sess.executor)) == 2 * 2 + 2 * 2 * 2 + 2 + 2 + 2 * 3 * 2 + 2  # + Y's slots
    allocated = be.allocations
    feeds = {k: v * 0.5 if k != "X" else v for k, v in feeds.items()}  # new states, same buffers
    assert max_diff(run(model, feeds), sess.run(None, feeds)) <= 1e-6
    assert be.allocations == allocated


def test_staged_and_same_device_boundaries(rng):
    _, model, feeds = model_and_feeds(rng, "forward", 1, initial_states=True)
    ref = run(model, feeds)
    for devices, kw, be, mode in [((0, 1), {}, FakeBackend(peer=False), "staged"),
                                  ((0, 1), {"transfer": "staged"}, FakeBackend(), "staged"),
                                  ((0, 0), {}, FakeBackend(), "same"),
                                  ((0, 1), {}, FakeBackend(), "peer")]:
        sess = PipelineSession(model, devices=devices, micro_batch=3, time_chunk=4, backend=be, **kw)
        assert [bd.mode for bd in sess.executor.boundaries] == [mode]
        assert max_diff(ref, sess.run(None, feeds)) <= 1e-6
        kinds = {op.kind for op in be.log}
        staged = any(op.stream == "d2h0" and op.kind == "copy_d2h" for op in be.log)
        assert ("copy_peer" in kinds) == (mode == "peer") and staged == (mode == "staged")


def test_session_interface(rng):
    spec = LstmSpec(input_size=5, hidden_size=4, num_layers=2)
    model = embedded_classifier(spec, rng)
    sess = PipelineSession(model, backend=FakeBackend())
    assert [i.name for i in sess.get_inputs()] == ["tokens"]
    assert [o.name for o in sess.get_outputs()] == ["logits", "Y_h"]
    feeds = token_feeds(spec, 6, 3, rng)
    ref = run(model, feeds)
    logits, = sess.run(["logits"], feeds)
    np.testing.assert_allclose(logits, ref[0], atol=1e-6)
    binding = sess.io_binding()
    binding.bind_cpu_input("tokens", feeds["tokens"])
    binding.bind_output("Y_h", "cuda", 0)
    sess.run_with_iobinding(binding)
    np.testing.assert_allclose(binding.copy_outputs_to_cpu()[0], ref[1], atol=1e-6)
    assert "stage 0" in sess.describe() and "ops before" in sess.describe()
    with pytest.raises(ValueError, match="missing"):
        sess.run(None, {})
    with pytest.raises(ValueError, match="unknown"):
        sess.run(["nope"], feeds)


def test_profile_on_the_fake(rng):
    _, model, feeds = model_and_feeds(rng, "forward", 0, B=4)
    be = FakeBackend(cost=lambda st, rows, steps: 1.0)
    sess = PipelineSession(model, devices=(0, 1), micro_batch=1, backend=be, profile=True)
    sess.run(None, feeds)
    prof = sess.last_profile.as_dict()
    assert prof["items"] == 4 and prof["stage_busy_ms"] == pytest.approx([4.0, 4.0])
    assert prof["gpipe_bubble"] == pytest.approx(1 / 5)
    assert prof["copy_bytes"][0] == 9 * 4 * 4 * 4
    tl = {(e["stage"], e["item"]): e for e in prof["timeline"]}
    assert sorted(tl) == [(k, i) for k in range(2) for i in range(4)]
    for i in range(4):
        assert tl[(0, i)]["gpu"][1] <= tl[(0, i)]["copy"][0] <= tl[(0, i)]["copy"][1] <= tl[(1, i)]["gpu"][0]
        assert tl[(1, i)]["gpu"][1] - tl[(1, i)]["gpu"][0] == pytest.approx(1.0)
        for k in range(2):
            enter, call, done = tl[(k, i)]["host"]
            assert 0 <= enter <= call <= done <= prof["wall_ms"]
    assert tl[(0, 1)]["gpu"][0] < tl[(1, 0)]["gpu"][1]  # stage 0 runs item 1 while stage 1 runs item 0
    assert sess.last_profile.render(40).count("|") == 8


def test_package_imports_without_cuda_python():
    code = ("import sys; sys.modules['cuda'] = None; import lstm_ort.pipeline as p; "
            "print(sorted(m for m in sys.modules if m.startswith(('lstm_ort.rewriter', 'onnxscript', 'cuda.'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


# -- models as users export them ----------------------------------------------------------------

REAL = ([(s, e) for e in EXPORTERS for s in TORCH_STYLES if (s, e) != ("learned_states", "dynamo")]
        + [("keras", "tf2onnx-opset13"), ("keras", "tf2onnx-opset11")])
ZERO_STATES = {"plain", "fixed_batch", "batch_first", "bidirectional", "tagger", "last_step"}
SPLITS = [((0, 1), [1, 2]), ((0, 1), [2, 1]), ((0, 1, 2), [1, 1, 1])]
SCHEDULES = [(1, None), (2, None), (2, 2), (None, 3)]  # (micro_batch, time_chunk)


@functools.lru_cache(maxsize=None)
def real_export(style: str, exporter: str):
    """(the export, lstm_ort.optimize of it, feeds at (B, T)); each exported once per test run."""
    from lstm_ort import optimize

    if style == "keras":
        model = keras_stack(opset=int(exporter.rsplit("opset", 1)[1]))
        return model, optimize(model), lambda B, T: keras_feeds(batch=B, steps=T)
    pytest.importorskip("torch", reason="torch (the CPU build) makes the exports")
    model, _ = torch_export(style, exporter)
    return model, optimize(model), lambda B, T: torch_feeds(style, B, T)


def _stock(model, feeds):
    return run(model, feeds, fused=False)


@pytest.mark.parametrize("style,exporter", REAL, ids=[f"{s}-{e}" for s, e in REAL])
def test_real_export_through_the_pipeline(style, exporter):
    """torch's two exporters and a tf2onnx-style Keras stack, each optimized, then split 1|2, 2|1
    and 1|1|1 and run in micro-batches and time chunks on the fake device layer: every output
    equals stock onnxruntime on the export (<= 1e-5), with the zero states as the exporter
    computes them and as the rewriter drops them. Calls the export itself refuses (dynamo pins T,
    a fixed-batch export pins B and T) are refused by the pipeline too."""
    model, optimized, feeds_at = real_export(style, exporter)
    variants = {"as optimized": optimized}
    if style in ZERO_STATES:
        variants["zero states dropped"] = drop_initial_states(optimized)
    calls, refused = [feeds_at(3, 5)], []
    for B, T in ((4, 5), (4, 7)):
        try:
            _stock(model, feeds_at(B, T))
            calls.append(feeds_at(B, T))
        except Exception:  # noqa: BLE001 - a size the export itself does not run
            refused.append(feeds_at(B, T))
    refs = [_stock(model, f) for f in calls]
    for label, m in variants.items():
        pm = analyze(m)
        if style in ZERO_STATES:
            assert all(src is None for src, _ in pm.states.h + pm.states.c), label
        for f, ref in zip(calls, refs):
            assert max_diff(ref, run(m, f)) <= 1e-5
        for devices, counts in SPLITS if label == "as optimized" else SPLITS[:1]:  # states differ, not splits
            sess = PipelineSession(m, devices=devices, stages=counts, backend=FakeBackend(len(devices)))
            for mb, tc in SCHEDULES:
                if tc and pm.chunk_refusal:
                    with pytest.raises(Unsupported, match="time_chunk"):
                        sess.set_schedule(mb, tc)
                    continue
                sess.set_schedule(mb, tc)
                for f, ref in zip(calls, refs):
                    got = sess.run(None, f)
                    assert max_diff(ref, got) <= 1e-5, (label, counts, mb, tc, sess.last_plan.describe())
            for f in refused:
                with pytest.raises(ValueError, match="the model (runs only at|declares size)"):
                    sess.run(None, f)
            sess.close()


def test_where_export_states_come_from():
    """Zeros sized from the input's shape are proven zero; torch's sliced h0 and Keras' unsqueezed
    [B, H] state are read row by row from the caller's arrays; a learned state expanded over the
    batch is computed on the host by a model cut from the graph."""
    if importlib_util_find("torch") is None:
        pytest.skip("torch (the CPU build) makes the exports")
    pm = analyze(real_export("plain", "torchscript")[1])
    assert pm.states.h == [(None, None)] * 3 and not pm.states.computed
    pm = analyze(real_export("states", "torchscript")[1])
    assert pm.states.h == [("h0", 0), ("h0", 1), ("h0", 2)] and pm.states.c == [("c0", k) for k in range(3)]
    pm = analyze(real_export("states", "dynamo")[1])  # one node (or a chain), reading its rows of h0
    assert pm.states.h == [("h0", 0), ("h0", 1), ("h0", 2)] and pm.states.c == [("c0", k) for k in range(3)]
    pm = analyze(real_export("learned_states", "torchscript")[1])
    assert pm.states.computed and pm.states.model is not None and set(pm.states.model_inputs) <= {"X"}
    pm = analyze(real_export("keras", "tf2onnx-opset11")[1])
    assert pm.states.h == [("h", None), (None, None), (None, None)] and len(pm.stack.nodes) == 3
    assert [o.kind for o in pm.outputs] == ["post", "final", "final"]
    pm = analyze(real_export("plain", "dynamo")[1])  # Y_h = Concat of the layers' own: rows of the stack's
    assert [(o.kind, o.rows) for o in pm.outputs] == [("post", None), ("state", (0, 3)), ("state", (0, 3))]


def importlib_util_find(name):
    import importlib.util

    return importlib.util.find_spec(name)


@pytest.mark.parametrize("style,exporter", [("plain", "dynamo"), ("keras", "tf2onnx-opset13"),
                                            ("learned_states", "torchscript")])
def test_run_batches_on_an_export(style, exporter):
    """A stream of calls of one length as one stream of items: a three-node dynamo chain, Keras'
    [B, H] states and host-computed final outputs, learned states computed on the host per call;
    each call's outputs equal its own on stock onnxruntime."""
    model, optimized, feeds_at = real_export(style, exporter)
    calls = [feeds_at(B, 5) for B in (3, 2, 4)]
    be = FakeBackend()
    sess = PipelineSession(optimized, devices=(0, 1), backend=be)
    got = sess.run_batches(None, calls)
    for f, outs in zip(calls, got):
        assert max_diff(_stock(model, f), outs) <= 1e-5
    assert sum(1 for op in be.runs() if op.meta["stage"] == 0) == 3  # one stream: a micro-batch per call


def test_auto_never_picks_a_plan_modelled_slower_than_one_gpu(rng):
    """Where no split plan is modelled faster than the unsplit model on one GPU, the call runs
    there (and the plan says so); where the GPUs dominate, auto pipelines."""
    _, model, feeds = model_and_feeds(rng, "forward", 0, B=4, T=6, initial_states=True)
    ref = run(model, feeds)
    be = FakeBackend()
    sess = PipelineSession(model, devices=(0, 1), backend=be)
    assert max_diff(ref, sess.run(None, feeds)) <= 1e-6
    plan = sess.last_plan
    assert plan.one_gpu and "one GPU" in plan.describe() and plan.modelled_ms <= plan.modelled_single_ms
    assert [op.kind for op in be.log if op.kind in ("single", "run")] == ["single"]
    gpu_bound = CostModel(flops_per_s=1e6, host_run_s=1e-9, layer_call_s=0.0, stage_call_s=0.0)
    sess = PipelineSession(model, devices=(0, 1), backend=FakeBackend(), cost_model=gpu_bound)
    assert max_diff(ref, sess.run(None, feeds)) <= 1e-6
    assert not sess.last_plan.one_gpu and sess.last_plan.modelled_ms < sess.last_plan.modelled_single_ms
    for B, T in ((1, 1), (1, 2000), (64, 100), (256, 100), (3, 7)):  # the default model, an 8 x H1024 stack
        p = choose(layer_costs(8, 1, 1024, 1024), [(0, 4), (4, 8)], B, T, chunkable=True, one_gpu_ok=True)
        assert p.modelled_ms <= p.modelled_single_ms + 1e-9, p.describe()


def _chain(rng, perm=(0, 2, 1, 3), y_out=False, D=2):
    """Two one-layer FusedLSTM nodes joined by Transpose(perm) + Reshape(0, 0, -1)."""
    direction = "bidirectional" if D == 2 else "forward"
    H = 4
    first = fused_model(LstmSpec(input_size=5, hidden_size=H, direction=direction),
                        random_layers(LstmSpec(input_size=5, hidden_size=H, direction=direction), rng))
    second = fused_model(LstmSpec(input_size=D * H, hidden_size=H, direction=direction),
                         random_layers(LstmSpec(input_size=D * H, hidden_size=H, direction=direction), rng))
    g = first.graph
    b = onnx.NodeProto()
    b.CopyFrom(second.graph.node[0])
    b.name = "layer1"
    b.input[0] = "x1"
    for k in range(1, 3):
        b.input[k] = second.graph.node[0].input[k] + "_1"
    del b.output[:]
    b.output.extend(["Y1", "Y_h1", "Y_c1"])
    for init in second.graph.initializer:
        if init.name in second.graph.node[0].input[1:3]:
            t = onnx.TensorProto()
            t.CopyFrom(init)
            t.name += "_1"
            g.initializer.append(t)
    g.initializer.append(numpy_helper.from_array(np.array([0, 0, -1], np.int64), "flat"))
    g.node.extend([helper.make_node("Transpose", ["Y"], ["Yt"], perm=list(perm)),
                   helper.make_node("Reshape", ["Yt", "flat"], ["x1"]), b])
    del g.output[:]
    g.output.extend([helper.make_tensor_value_info(n, onnx.TensorProto.FLOAT, None) for n in ("Y1", "Y_h1", "Y_c1")])
    if y_out:
        g.output.append(helper.make_tensor_value_info("Y", onnx.TensorProto.FLOAT, None))
    return first


def test_chains_of_nodes_and_glue_refusals(rng):
    """Two nodes joined by the stacking glue are one stack of two layers (split 1 | 1); a glue that
    permutes the direction and hidden axes, or a layer's Y read outside the stack, is refused,
    naming the node."""
    model = _chain(rng)
    feeds = {"X": rng.standard_normal((6, 3, 5)).astype(np.float32)}
    ref = run(model, feeds)
    pm = analyze(model)
    assert len(pm.stack.nodes) == 2 and pm.layers == 2
    assert [(o.kind, o.rows) for o in pm.outputs] == [("post", None), ("state", (2, 4)), ("state", (2, 4))]
    sess = PipelineSession(model, devices=(0, 1), micro_batch=2, backend=FakeBackend())
    assert max_diff(ref, sess.run(None, feeds)) <= 1e-6
    with pytest.raises(Unsupported, match="glue from FusedLSTM node .* is not the stacking of layers"):
        analyze(_chain(rng, perm=(0, 2, 3, 1)))
    with pytest.raises(Unsupported, match="graph output 'Y' is the Y of FusedLSTM node"):
        analyze(_chain(rng, y_out=True))


def test_reshapes_after_the_stack(rng):
    """A Reshape whose shape is computed from Shape(Y) (torch's dynamo export), or that writes the
    export's own T and B as constants, runs in the last stage with 0 for the time and batch axes;
    one that merges time and batch (``y.view(-1, H)``) is refused, naming the node."""
    spec = LstmSpec(input_size=5, hidden_size=4, num_layers=2)
    base = fused_model(spec, random_layers(spec, rng))
    feeds = {"X": rng.standard_normal((7, 3, 5)).astype(np.float32)}
    ref = run(base, feeds)[0].reshape(7, 3, 4)
    g = base.graph
    g.node.extend([helper.make_node("Squeeze", ["Y", "s1"], ["Ys"]),
                   helper.make_node("Shape", ["Ys"], ["ys"]),
                   helper.make_node("Slice", ["ys", "s0", "s2"], ["tb"]),
                   helper.make_node("Concat", ["tb", "h"], ["shape"], axis=0),
                   helper.make_node("Reshape", ["Ys", "shape"], ["computed"], name="computed_reshape"),
                   helper.make_node("Reshape", ["Ys", "baked"], ["baked_out"], name="baked_reshape")])
    g.initializer.extend([numpy_helper.from_array(np.array([0], np.int64), "s0"),
                          numpy_helper.from_array(np.array([1], np.int64), "s1"),
                          numpy_helper.from_array(np.array([2], np.int64), "s2"),
                          numpy_helper.from_array(np.array([4], np.int64), "h"),
                          numpy_helper.from_array(np.array([7, 3, 4], np.int64), "baked")])
    g.input[0].type.tensor_type.shape.dim[0].dim_value = 7  # the export's own T and B, as a fixed-shape export
    g.input[0].type.tensor_type.shape.dim[1].dim_value = 3
    del g.output[:]
    g.output.extend([helper.make_tensor_value_info(n, onnx.TensorProto.FLOAT, None) for n in ("computed", "baked_out")])
    sess = PipelineSession(base, devices=(0, 1), micro_batch=2, backend=FakeBackend())
    got = sess.run(None, feeds)
    assert max_diff([ref, ref], got) <= 1e-6
    with pytest.raises(ValueError, match="declares size 3 at axis 1"):
        sess.run(None, {"X": feeds["X"][:, :2]})
    merged = fused_model(spec, random_layers(spec, rng))
    merged.graph.initializer.append(numpy_helper.from_array(np.array([-1, 4], np.int64), "rows"))
    merged.graph.node.append(helper.make_node("Reshape", ["Y", "rows"], ["flat"], name="view"))
    merged.graph.output.append(helper.make_tensor_value_info("flat", onnx.TensorProto.FLOAT, None))
    with pytest.raises(Unsupported, match="Reshape node 'view'"):
        analyze(merged)


def test_ops_on_final_states_run_on_the_host(rng):
    """h_n[-1] -> Linear (a classifier on the last layer's final state) is computed from the states
    assembled from every stage, as the unsplit model computes it."""
    spec = LstmSpec(input_size=5, hidden_size=4, num_layers=3, direction="bidirectional")
    model = fused_model(spec, random_layers(spec, rng))
    g = model.graph
    g.initializer.extend([numpy_helper.from_array(np.array(-1, np.int64), "last"),
                          numpy_helper.from_array(rng.standard_normal((4, 2)).astype(np.float32), "w")])
    g.node.extend([helper.make_node("Gather", ["Y_h", "last"], ["h_last"], axis=0),
                   helper.make_node("MatMul", ["h_last", "w"], ["scores"])])
    g.output.append(helper.make_tensor_value_info("scores", onnx.TensorProto.FLOAT, None))
    feeds = {"X": rng.standard_normal((6, 5, 5)).astype(np.float32)}
    ref = run(model, feeds)
    for counts in ([1, 2], [2, 1]):
        sess = PipelineSession(model, devices=(0, 1), stages=counts, micro_batch=2, backend=FakeBackend())
        assert max_diff(ref, sess.run(None, feeds)) <= 1e-6
        assert sess.run(["scores"], feeds)[0].shape == (5, 2)


def test_kept_bindings_read_the_buffers_each_run():
    """A binding kept for a set of buffers reads their contents at every Run; other buffers get a
    binding of their own; an output ORT allocates is a new buffer each Run, so the previous item's
    (still being copied to the host on a GPU) is never written into."""
    import onnxruntime as ort

    from lstm_ort.pipeline.backend import Bindings, DeviceBuffer, DeviceView

    x = helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, None)
    g = helper.make_graph([helper.make_node("Neg", ["x"], ["y"]), helper.make_node("Relu", ["x"], ["r"])], "g", [x],
                          [helper.make_tensor_value_info(n, onnx.TensorProto.FLOAT, None) for n in ("y", "r")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 9
    sess = ort.InferenceSession(m.SerializeToString(), providers=CPU)

    def view(a):
        return DeviceView(DeviceBuffer(a.ctypes.data, 0, a.nbytes, owner=a), a.shape, a.dtype)

    a, b, y = (np.zeros((2, 3), np.float32) for _ in range(3))
    binds = Bindings(sess, "cpu", 0)
    kept = []
    for k, src in enumerate((a, a, b, a)):
        src[...] = k + 1
        got = binds.run({"x": view(src)}, {"y": view(y), "r": None})
        np.testing.assert_array_equal(y, -(k + 1))
        kept.append(got["r"])
        np.testing.assert_array_equal(got["r"].buffer.owner.numpy(), k + 1)
    assert len(binds.cache) == 2  # one binding per set of buffers
    assert len({r.ptr for r in kept}) == 4  # a new buffer each Run
    assert [float(r.buffer.owner.numpy()[0, 0]) for r in kept] == [1.0, 2.0, 3.0, 4.0]  # none written over


def test_corpus_models_are_taken_or_refused_naming_the_node():
    """Every model of the real-model corpus (models/corpus.py; the production-size torch exports
    aside) is either split and run at parity with stock onnxruntime, or refused with a reason that
    names the node and its op (or says the stack is too short to split): never a traceback."""
    import importlib.util
    from pathlib import Path

    from lstm_ort import optimize

    corpus = sys.modules.get("corpus")  # tests/test_corpus.py may have loaded it
    if corpus is None:
        spec = importlib.util.spec_from_file_location("corpus", Path(__file__).parents[1] / "models" / "corpus.py")
        corpus = importlib.util.module_from_spec(spec)
        sys.modules["corpus"] = corpus  # dataclasses look their module up while the file runs
        spec.loader.exec_module(corpus)
    taken, refused, unavailable = [], [], []
    for entry in [e for e in corpus.ENTRIES if not e.large]:
        try:
            model = entry.build()
        except corpus.Unavailable:
            unavailable.append(entry.name)
            continue
        optimized = optimize(model)
        try:
            sess = PipelineSession(optimized, devices=(0, 1), micro_batch=1, backend=FakeBackend())
        except Unsupported as e:
            assert "node '" in str(e) or "layers" in str(e), (entry.name, str(e))
            refused.append(entry.name)
            continue
        feeds = entry.feeds(np.random.default_rng(0))
        assert max_diff(run(model, feeds, fused=False), sess.run(None, feeds)) <= entry.tol, entry.name
        taken.append(entry.name)
    if not taken and not refused:
        pytest.skip(f"no corpus model could be built here: {unavailable}")
    assert taken, refused  # the stacked hand-built graphs at least
