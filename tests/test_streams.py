"""StreamBatcher (lstm_ort/serving/streams/): many streams stepping concurrently from several
client threads, each getting what its own session call per step gives it (issue 39's exactness
test); real models (silero-vad and the g2p-id decoder from the corpus, a torch export with (h, c)
carried), groups by chunk length and by the value of inputs without a batch axis, the fallback to
one stream per call, the counters."""

import asyncio
import gc
import os
import sys
import threading
import time
import warnings

import numpy as np
import onnx
import pytest
import streams_support as support

from lstm_ort.builders import LstmSpec, fused_model, random_layers
from lstm_ort.serving.streams import StreamBatcher, StreamClosed, StreamError


# float32 through the CPU kernels: a batch and its rows alone round differently (FusedLSTM's and
# MatMul's blocking depend on B; Conv's order under batch_convs), by ~1e-6 relative a step.
TOL = 1e-5
STREAMS, THREADS = 48, 6


def silero_streams(rng, n, sr=16000, samples=576):
    lengths = rng.integers(1, 12, n)
    return [[{"input": (0.1 * rng.standard_normal((1, samples))).astype(np.float32), "sr": np.array(sr, np.int64)}
             for _ in range(k)] for k in lengths]


@pytest.fixture(scope="module")
def silero():
    return support.corpus_optimized(support.SILERO)


def test_silero_many_streams_each_as_alone(silero, rng):
    model, carry = silero
    streams = silero_streams(rng, STREAMS)
    zero = {"state": np.zeros((2, 1, 128), np.float32)}
    want = [support.alone(model, carry, s, zero) for s in streams]
    with StreamBatcher(model, carry, max_wait_ms=5) as b:
        got = support.serve_concurrently(b, streams, THREADS)
        stats = b.stats()
        assert b.batched and b.convs_rewritten > 0
    assert support.worst_difference(got, want) <= TOL
    assert stats.steps == sum(len(s) for s in streams) and stats.mean_batch > 1


def test_silero_sample_rates_group_apart(silero, rng):
    """sr has no batch axis: 8 kHz and 16 kHz steps never share a call, each gets its own branch."""
    model, carry = silero
    streams = silero_streams(rng, 16, 16000) + silero_streams(rng, 16, 8000, samples=288)
    zero = {"state": np.zeros((2, 1, 128), np.float32)}
    want = [support.alone(model, carry, s, zero) for s in streams]
    with StreamBatcher(model, carry) as b:
        got = support.serve_concurrently(b, streams, 4)
        assert len(b._groups) == 2
    assert support.worst_difference(got, want) <= TOL


@pytest.mark.parametrize("threads", [2, 3, THREADS])
def test_g2p_decoder_many_streams(threads, rng):
    """Stepped from THREADS client threads the steps batch; from 2 or 3 each thread leads calls of
    its own beside the others' (Engine::kOwnCallsBeyondSlots on the CPU): the same results."""
    model, carry = support.corpus_optimized(support.G2P_DECODER)
    streams = [[{"input_2": rng.standard_normal((1, 1, 32)).astype(np.float32)} for _ in range(k)]
               for k in rng.integers(1, 10, STREAMS)]
    init = [{"input_3": rng.standard_normal((1, 256)).astype(np.float32),
             "input_4": rng.standard_normal((1, 256)).astype(np.float32)} for _ in streams]
    want = [support.alone(model, carry, s, i) for s, i in zip(streams, init)]
    with StreamBatcher(model, carry) as b:
        got = support.serve_concurrently(b, streams, threads, initial=init)
    assert support.worst_difference(got, want) <= TOL


@pytest.fixture(scope="module")
def torch_hc():
    return support.torch_lstm()


def test_torch_export_streams_of_different_chunk_lengths(torch_hc, rng):
    """Chunks of 1 and 4 steps group apart; each stream alternates its own lengths."""
    carry = {"hn": "h", "cn": "c"}
    streams = [[{"x": rng.standard_normal((int(rng.choice([1, 4])), 1, 40)).astype(np.float32)} for _ in range(k)]
               for k in rng.integers(1, 9, STREAMS)]
    init = [{"h": rng.standard_normal((2, 1, 64)).astype(np.float32),
             "c": rng.standard_normal((2, 1, 64)).astype(np.float32)} for _ in streams]
    want = [support.alone(torch_hc, carry, s, i) for s, i in zip(streams, init)]
    with StreamBatcher(torch_hc, carry, max_wait_ms=3, workers=2) as b:
        got = support.serve_concurrently(b, streams, THREADS, initial=init)
        assert b.batched and b.stats().mean_batch > 1
    assert support.worst_difference(got, want) <= TOL


@pytest.mark.parametrize("declared", ["as exported", "as torch 2.11 declares h_n"])
def test_torch_dynamo_export(rng, declared):
    """The dynamo exporter's graph: its Reshapes keep the time axis ahead of the batch. torch
    2.11's exporter declares hn and cn [2, 1, batch, 64] for the [2, batch, 64] the graph computes
    (onnxruntime sets that aside): no reason not to batch."""
    model = support.torch_lstm(exporter="dynamo")
    if declared != "as exported":
        for out in model.graph.output[1:]:
            out.type.tensor_type.shape.ClearField("dim")
            for d in (2, 1, "batch", 64):
                dim = out.type.tensor_type.shape.dim.add()
                if isinstance(d, int):
                    dim.dim_value = d
                else:
                    dim.dim_param = d
    carry = {"hn": "h", "cn": "c"}
    streams = [[{"x": rng.standard_normal((4, 1, 40)).astype(np.float32)} for _ in range(k)]
               for k in rng.integers(1, 5, 16)]
    zero = {"h": np.zeros((2, 1, 64), np.float32), "c": np.zeros((2, 1, 64), np.float32)}
    want = [support.alone(model, carry, s, zero) for s in streams]
    with StreamBatcher(model, carry) as b:
        got = support.serve_concurrently(b, streams, 4)
        assert b.batched, b.fallback_reasons
    assert support.worst_difference(got, want) <= TOL


def test_state_and_open_initial(torch_hc, rng):
    carry = {"hn": "h", "cn": "c"}
    h = rng.standard_normal((2, 1, 64)).astype(np.float32)
    x = rng.standard_normal((3, 1, 40)).astype(np.float32)
    with StreamBatcher(torch_hc, carry) as b:
        s = b.open({"h": h})
        np.testing.assert_array_equal(b.state(s)["h"], h)
        np.testing.assert_array_equal(b.state(s)["c"], 0)
        out = b.step(s, {"x": x})
        np.testing.assert_array_equal(b.state(s)["h"], out[1])


def test_astep(torch_hc, rng):
    carry = {"hn": "h", "cn": "c"}
    xs = [rng.standard_normal((2, 1, 40)).astype(np.float32) for _ in range(8)]
    zero = {"h": np.zeros((2, 1, 64), np.float32), "c": np.zeros((2, 1, 64), np.float32)}
    want = [support.alone(torch_hc, carry, [{"x": x}], zero)[0] for x in xs]

    async def main(b):
        ids = [b.open() for _ in xs]
        return await asyncio.gather(*(b.astep(i, {"x": x}) for i, x in zip(ids, xs)))
    with StreamBatcher(torch_hc, carry) as b:
        got = asyncio.run(main(b))
    assert support.worst_difference([[g] for g in got], [[w] for w in want]) <= TOL


def test_astep_from_two_event_loops(torch_hc, rng):
    """Two threads, an event loop each, their streams' steps batched together: each loop gets its
    own steps' results, set in it (a call's results go to each loop they belong to)."""
    carry = {"hn": "h", "cn": "c"}
    chunks = [[{"x": rng.standard_normal((2, 1, 40)).astype(np.float32)} for _ in range(3)] for _ in range(12)]
    zero = {"h": np.zeros((2, 1, 64), np.float32), "c": np.zeros((2, 1, 64), np.float32)}
    want = [support.alone(torch_hc, carry, c, zero) for c in chunks]
    got = [None] * len(chunks)

    async def stream(b, i):
        sid = b.open()
        got[i] = [await asyncio.wait_for(b.astep(sid, feeds), 30) for feeds in chunks[i]]

    async def loop(b, mine):
        await asyncio.gather(*(stream(b, i) for i in mine))

    with StreamBatcher(torch_hc, carry) as b:
        threads = [threading.Thread(target=asyncio.run, args=(loop(b, range(k, len(chunks), 2)),)) for k in (0, 1)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert b.stats().steps == 3 * len(chunks)
    assert support.worst_difference(got, want) <= TOL


def test_a_cancelled_astep_still_steps_its_stream(torch_hc, rng):
    """Cancelling the awaiting task drops the result, not the step: the stream's state moves on,
    as a cancelled submit's Future (docs/streams.md)."""
    carry = {"hn": "h", "cn": "c"}
    chunks = [{"x": rng.standard_normal((2, 1, 40)).astype(np.float32)} for _ in range(2)]
    zero = {"h": np.zeros((2, 1, 64), np.float32), "c": np.zeros((2, 1, 64), np.float32)}
    want = support.alone(torch_hc, carry, chunks, zero)

    unhandled = []

    async def main(b):
        asyncio.get_running_loop().set_exception_handler(lambda loop, context: unhandled.append(context))
        sid = b.open()
        first = asyncio.ensure_future(b.astep(sid, chunks[0]))
        await asyncio.sleep(0)  # submitted: the task now awaits its step
        first.cancel()
        with pytest.raises(asyncio.CancelledError):
            await first
        return await asyncio.wait_for(b.astep(sid, chunks[1]), 30)

    with StreamBatcher(torch_hc, carry) as b:
        got = asyncio.run(main(b))
    assert not unhandled  # the dropped result was not set on the cancelled future
    assert support.worst_difference([got], [want[1]]) <= TOL


def batch1_model(rng):
    """A FusedLSTM model exported for batch 1: every dim fixed."""
    spec = LstmSpec(6, 8)
    model = fused_model(spec, random_layers(spec, rng), initial_states=True)
    for vi in [*model.graph.input, *model.graph.output]:
        for d in vi.type.tensor_type.shape.dim:
            if d.dim_param:
                d.dim_value = {"T": 3, "B": 1}[d.dim_param]
    return model


def test_batch1_export_falls_back_and_says_so(rng):
    model = batch1_model(rng)
    carry = {"Y_h": "initial_h", "Y_c": "initial_c"}
    streams = [[{"X": rng.standard_normal((3, 1, 6)).astype(np.float32)} for _ in range(4)] for _ in range(6)]
    zero = {"initial_h": np.zeros((1, 1, 8), np.float32), "initial_c": np.zeros((1, 1, 8), np.float32)}
    want = [support.alone(model, carry, s, zero) for s in streams]
    with StreamBatcher(model, carry) as b, warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = support.serve_concurrently(b, streams, 3)
        assert b.batched is False
        assert any("--batchify" in r for r in b.fallback_reasons)
        assert b.stats().mean_batch == 1
    assert any("one stream per call" in str(w.message) for w in caught)
    assert support.worst_difference(got, want) == 0  # one call per stream: the very same calls


def test_stats_count_steps_and_calls(torch_hc, rng):
    carry = {"hn": "h", "cn": "c"}
    with StreamBatcher(torch_hc, carry, max_wait_ms=50) as b:
        ids = [b.open() for _ in range(10)]
        assert b.stats().open_streams == 10
        b.step_many([(i, {"x": rng.standard_normal((2, 1, 40)).astype(np.float32)}) for i in ids])
        s = b.stats()
        assert s.steps == 10 and s.calls >= 1 and s.mean_batch == 10 / s.calls
        assert 0 <= s.queue_wait_p50_ms <= s.queue_wait_p99_ms and s.latency_p50_ms <= s.latency_p99_ms
        assert s.latency_p50_ms >= s.queue_wait_p50_ms and s.steps_per_s > 0
        b.reset_stats()
        assert b.stats().steps == 0


def test_model_as_path_bytes_or_proto(tmp_path, rng):
    model = fused_model(LstmSpec(6, 8), random_layers(LstmSpec(6, 8), rng), initial_states=True)
    path = tmp_path / "m.onnx"
    onnx.save(model, path)
    carry = {"Y_h": "initial_h", "Y_c": "initial_c"}
    x = {"X": rng.standard_normal((2, 1, 6)).astype(np.float32)}
    outs = []
    for source in (path, str(path), model.SerializeToString(), model):
        with StreamBatcher(source, carry) as b:
            outs.append(b.step(b.open(), x))
    for o in outs[1:]:
        for a, c in zip(o, outs[0]):
            np.testing.assert_array_equal(a, c)


def test_a_lone_submit_runs_before_it_returns(torch_hc, rng):
    """A submit to an idle engine, with no other step expected during its call, runs on the
    submitting thread: its Future is done when submit returns (no hand-over, engine.h).
    run_here=False leaves it to the workers. Either way each result is the stream's own, in order."""
    carry = {"hn": "h", "cn": "c"}
    zero = {"h": np.zeros((2, 1, 64), np.float32), "c": np.zeros((2, 1, 64), np.float32)}
    chunks = [{"x": rng.standard_normal((1, 1, 40)).astype(np.float32)} for _ in range(7)]
    want = support.alone(torch_hc, carry, chunks, zero)
    with StreamBatcher(torch_hc, carry) as b:
        s = b.open()
        got = [b.step(s, chunks[0])]  # a measured call
        for c in chunks[1:4]:
            time.sleep(0.01)  # steps spread in time: no company to expect
            f = b.submit(s, c)
            assert f.done()
            got.append(f.result())
        got += [b.submit(s, c, run_here=False).result(10) for c in chunks[4:]]
    assert support.worst_difference([got], [want]) <= TOL


def _stack_depth() -> int:
    depth, frame = 0, sys._getframe()
    while frame is not None:
        depth, frame = depth + 1, frame.f_back
    return depth


def test_steps_chained_from_callbacks_do_not_nest(torch_hc, rng):
    """A client that submits each next step from the done-callback of the last (its callback slower
    than two calls, so each step alone would run on the spot): the steps are queued from inside
    callbacks, so the stack stays flat instead of one call deeper per step, and the chain ends with
    each step's result right."""
    carry = {"hn": "h", "cn": "c"}
    zero = {"h": np.zeros((2, 1, 64), np.float32), "c": np.zeros((2, 1, 64), np.float32)}
    chunks = [{"x": rng.standard_normal((1, 1, 40)).astype(np.float32)} for _ in range(400)]
    want = support.alone(torch_hc, carry, chunks, zero)
    got, depths, done, errors = [], [], threading.Event(), []
    with StreamBatcher(torch_hc, carry) as b:
        s = b.open()
        b.step(s, chunks[0])  # a measured call
        b.close(s)
        s = b.open()

        def on_done(f):
            try:
                got.append(f.result())
                depths.append(_stack_depth())
                time.sleep(0.001)  # the client's own work: longer than two calls
                if len(got) < len(chunks):
                    b.submit(s, chunks[len(got)]).add_done_callback(on_done)
                else:
                    done.set()
            except BaseException as e:  # noqa: BLE001 - reported below
                errors.append(e)
                done.set()

        b.submit(s, chunks[0]).add_done_callback(on_done)
        assert done.wait(60)
    assert not errors, errors[0]
    assert max(depths) < 200, max(depths)  # nested, 400 steps go past Python's recursion limit
    assert support.worst_difference([got], [want]) <= TOL


def test_step_batch_stacked(torch_hc, rng):
    """step_batch: a tick's chunks already stacked on the batch axis, one call on the caller's thread;
    the outputs stacked the same way, each row as that stream alone; mixes with step()."""
    carry = {"hn": "h", "cn": "c"}
    zero = {"h": np.zeros((2, 1, 64), np.float32), "c": np.zeros((2, 1, 64), np.float32)}
    chunks = [[rng.standard_normal((3, 1, 40)).astype(np.float32) for _ in range(4)] for _ in range(5)]
    want = [support.alone(torch_hc, carry, [{"x": x} for x in c], zero) for c in chunks]
    with StreamBatcher(torch_hc, carry) as b:
        ids = [b.open() for _ in chunks]
        got = [[] for _ in chunks]
        for r in range(4):
            if r == 2:  # one round through the queue: the two paths share the states
                outs = b.step_many([(i, {"x": c[r]}) for i, c in zip(ids, chunks)])
            else:
                y, hn, cn = b.step_batch(ids, {"x": np.concatenate([c[r] for c in chunks], axis=1)})
                assert y.shape == (3, 5, 5) and hn.shape == (2, 5, 64)
                outs = [[y[:, k:k + 1], hn[:, k:k + 1], cn[:, k:k + 1]] for k in range(5)]
            for k, o in enumerate(outs):
                got[k].append(o)
        assert b.stats().steps == 20
        with pytest.raises(StreamError, match="distinct"):
            b.step_batch([ids[0], ids[0]], {"x": np.zeros((3, 2, 40), np.float32)})
        with pytest.raises(StreamError, match="exactly the step inputs"):
            b.step_batch(ids, {})
        b.close(ids[0])
        with pytest.raises(StreamClosed):
            b.step_batch(ids, {"x": np.zeros((3, 5, 40), np.float32)})
    assert support.worst_difference(got, want) <= TOL


def test_long_calls_take_the_wide_session_and_agree(torch_hc, rng):
    """On the CPU with the thread count left open, a call whose size class took WIDE_FROM_KEY's
    time or more on the engine's one-thread session runs on its wide session (onnxruntime's pool;
    here 1 us: every class after its first call, but one call in WideChoice::kReprobeEvery): calls
    of 35 streams and of 3 alternate between the sessions on the same streams' states, each row as
    that stream alone. A thread count the caller sets is kept, and nothing runs wide."""
    import onnxruntime as ort

    from lstm_ort.serving.streams.batcher import WIDE_FROM_US, host_threads
    from lstm_ort.serving.streams.native_session import WIDE_FROM_KEY, wide_from_us

    assert host_threads(1) == {"intra_op_num_threads": 1, "wide_from_seconds": 0.0}  # one core: no second session
    assert host_threads(2)["wide_from_seconds"] == WIDE_FROM_US * 1e-6
    for bad in ("-1", "nan", "inf", "soon"):
        so = ort.SessionOptions()
        so.add_session_config_entry(WIDE_FROM_KEY, bad)
        with pytest.raises(ValueError, match=WIDE_FROM_KEY):
            wide_from_us(so, WIDE_FROM_US)
    carry = {"hn": "h", "cn": "c"}
    n = 35
    zero = {"h": np.zeros((2, 1, 64), np.float32), "c": np.zeros((2, 1, 64), np.float32)}
    xs = [rng.standard_normal((2, n, 40)).astype(np.float32) for _ in range(4)]
    want = [support.alone(torch_hc, carry, [{"x": x[:, k:k + 1]} for x in xs], zero) for k in range(n)]
    quick, two = ort.SessionOptions(), ort.SessionOptions()
    quick.add_session_config_entry(WIDE_FROM_KEY, "1")
    two.intra_op_num_threads = 2
    two.add_session_config_entry(WIDE_FROM_KEY, "1")
    # wide: round 2's call of 35, and of round 1's and round 3's twelve calls all but round 1's first
    wide = 1 + 11 + 12 if (os.cpu_count() or 1) > 1 else 0
    for options, wide_calls in ((quick, wide), (two, 0)):
        with StreamBatcher(torch_hc, carry, session_options=options) as b:
            ids = [b.open() for _ in range(n)]
            got = [[] for _ in range(n)]
            for r, x in enumerate(xs):
                if r % 2 == 0:  # all n streams in one call
                    y, hn, cn = b.step_batch(ids, {"x": x})
                    outs = [[y[:, k:k + 1], hn[:, k:k + 1], cn[:, k:k + 1]] for k in range(n)]
                else:  # calls of three streams (two in the last)
                    outs = []
                    for k in range(0, n, 3):
                        part = b.step_batch(ids[k:k + 3], {"x": x[:, k:k + 3]})
                        outs += [[o[:, j:j + 1] for o in part] for j in range(part[0].shape[1])]
                for k, o in enumerate(outs):
                    got[k].append(o)
            assert b.wide_calls == wide_calls
        assert support.worst_difference(got, want) <= TOL


def test_a_caller_alone_takes_the_wide_session(torch_hc, rng):
    """One stream stepped from one thread: each call is led by its caller with no other caller
    lately (Engine::CallerLeads), has the machine to itself, and runs on the wide session, as a
    plain `run` of a session with onnxruntime's pool would (where the machine has a second core)."""
    carry = {"hn": "h", "cn": "c"}
    zero = {"h": np.zeros((2, 1, 64), np.float32), "c": np.zeros((2, 1, 64), np.float32)}
    chunks = [{"x": rng.standard_normal((3, 1, 40)).astype(np.float32)} for _ in range(4)]
    want = support.alone(torch_hc, carry, chunks, zero)
    with StreamBatcher(torch_hc, carry) as b:
        s = b.open()
        got = [b.step(s, chunks[0])]  # the kind's first step: learned, then run
        before = b.wide_calls
        got += [b.step(s, c) for c in chunks[1:]]
        assert b.wide_calls - before == (3 if (os.cpu_count() or 1) > 1 else 0)
    assert support.worst_difference([got], [want]) <= TOL


def test_step_batch_large_outputs_outlive_the_next_call_and_the_batcher(torch_hc, rng):
    """A tick's large outputs are lent, not copied (binding.cc, kLendBytes): each array keeps its
    values through the next call, after the batcher is gone, and writing into it changes nothing
    the streams carry."""
    carry = {"hn": "h", "cn": "c"}
    n = 300  # hn: 2 x 300 x 64 floats, 150 KB: lent
    zero = {"h": np.zeros((2, 1, 64), np.float32), "c": np.zeros((2, 1, 64), np.float32)}
    xs = [rng.standard_normal((2, n, 40)).astype(np.float32) for _ in range(3)]
    with StreamBatcher(torch_hc, carry) as b:
        ids = [b.open() for _ in range(n)]
        first = b.step_batch(ids, {"x": xs[0]})
        assert first[1].nbytes >= 64 * 1024
        kept = [o.copy() for o in first]
        second = b.step_batch(ids, {"x": xs[1]})
        assert not np.shares_memory(first[1], second[1])
        for o in second:
            o[...] = np.nan
        third = b.step_batch(ids, {"x": xs[2]})
    del b
    gc.collect()
    for o, k in zip(first, kept):
        np.testing.assert_array_equal(o, k)
    for k in (0, 151, n - 1):
        want = support.alone(torch_hc, carry, [{"x": x[:, k:k + 1]} for x in xs], zero)
        np.testing.assert_allclose(kept[0][:, k:k + 1], want[0][0], atol=TOL, rtol=0)
        np.testing.assert_allclose(third[1][:, k:k + 1], want[2][1], atol=TOL, rtol=0)


def test_step_batch_first_of_its_kind(torch_hc, rng):
    """No step seen yet: the first stream's rows are analysed."""
    carry = {"hn": "h", "cn": "c"}
    x = rng.standard_normal((2, 3, 40)).astype(np.float32)
    zero = {"h": np.zeros((2, 1, 64), np.float32), "c": np.zeros((2, 1, 64), np.float32)}
    with StreamBatcher(torch_hc, carry) as b:
        ids = [b.open() for _ in range(3)]
        y = b.step_batch(ids, {"x": x})[0]
    for k in range(3):
        alone = support.alone(torch_hc, carry, [{"x": x[:, k:k + 1]}], zero)[0][0]
        np.testing.assert_allclose(y[:, k:k + 1], alone, atol=TOL, rtol=0)


def test_counters_keep_the_last_window():
    from lstm_ort.serving.streams.stats import WINDOW, Counters

    c = Counters()
    for k in range(3):  # 1.5 windows of steps, the ring wraps
        c.record([float(k)] * (WINDOW // 2 + 7), k + 1.0, k + 2.5)
    s = c.snapshot(open_streams=5)
    assert s.steps == 3 * (WINDOW // 2 + 7) and s.calls == 3 and s.open_streams == 5
    assert s.queue_wait_p50_ms == pytest.approx(1000) and s.latency_p99_ms == pytest.approx(2500)
