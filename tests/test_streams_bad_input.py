"""Bad input to a StreamBatcher (issue 39, item 7): each case is a clear error to its caller
only; no other stream's result changes, a failing call fails only its own steps, and every
stream stays usable."""

import threading

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from lstm_ort.builders import LstmSpec, fused_model, random_layers
from lstm_ort.runtime.session import InferenceSession
from lstm_ort.serving.streams import BatcherShutDown, StreamBatcher, StreamClosed, StreamError

I, H, VOCAB = 6, 8, 10
CARRY = {"Y_h": "initial_h", "Y_c": "initial_c"}


def lstm(rng):
    spec = LstmSpec(I, H)
    return fused_model(spec, random_layers(spec, rng), initial_states=True)


def token_lstm(rng):
    """Token ids [T, B] -> embedding Gather -> FusedLSTM: an id past the table fails that stream's call."""
    model = lstm(rng)
    g = model.graph
    g.initializer.append(numpy_helper.from_array(rng.standard_normal((VOCAB, I)).astype(np.float32), "table"))
    g.node.insert(0, helper.make_node("Gather", ["table", "tokens"], ["X"]))
    x = next(i for i in g.input if i.name == "X")
    g.input.remove(x)
    g.input.insert(0, helper.make_tensor_value_info("tokens", TensorProto.INT64, ["T", "B"]))
    return model


def x(rng, t=3):
    return {"X": rng.standard_normal((t, 1, I)).astype(np.float32)}


def alone(model, chunks):
    sess = InferenceSession(model.SerializeToString())
    state = {"initial_h": np.zeros((1, 1, H), np.float32), "initial_c": np.zeros((1, 1, H), np.float32)}
    outs = []
    for feeds in chunks:
        out = sess.run(None, {**feeds, **state})
        state = {"initial_h": out[1], "initial_c": out[2]}
        outs.append(out)
    return outs


def same(got, want):
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


@pytest.fixture
def model(rng):
    return lstm(rng)


def test_unknown_and_closed_streams(model, rng):
    with StreamBatcher(model, CARRY) as b:
        keep, gone = b.open(), b.open()
        b.close(gone)
        with pytest.raises(StreamClosed, match="not open"):
            b.step(gone, x(rng))
        with pytest.raises(StreamClosed, match="not open"):
            b.step(12345, x(rng))
        with pytest.raises(StreamClosed):
            b.close(gone)
        with pytest.raises(StreamClosed):  # all or nothing: nothing of this call was queued
            b.step_many([(keep, x(rng)), (gone, x(rng))])
        chunk = x(rng)
        same(b.step(keep, chunk), alone(model, [chunk])[0])


def test_second_step_before_the_first_returns_queues_in_order(model, rng):
    chunks = [x(rng) for _ in range(5)]
    with StreamBatcher(model, CARRY, max_wait_ms=20) as b:
        s = b.open()
        futures = [b.submit(s, c) for c in chunks]  # all queued at once
        got = [f.result() for f in futures]
    for g, w in zip(got, alone(model, chunks)):
        same(g, w)


@pytest.mark.parametrize("feeds, match", [
    ({}, r"miss input\(s\) \['X'\]"),
    ({"X": np.zeros((3, 1, I), np.float32), "initial_h": np.zeros((1, 1, H), np.float32)},
     "carried input.*the batcher supplies them"),
    ({"X": np.zeros((3, 1, I), np.float32), "nope": np.zeros(1)}, r"unknown input\(s\) \['nope'\]"),
    ({"X": np.zeros((3, 1, I), np.float64)}, "'X' is float64, the model takes float32"),
    ({"X": np.zeros((3, I), np.float32)}, r"'X' has shape \(3, 6\), the model takes \[\?, \?, 6\]"),
    ({"X": np.zeros((3, 1, I + 1), np.float32)}, "the model takes"),
    ([1, 2], "a dict of input name"),
])
def test_bad_feeds_are_refused_at_submit(model, rng, feeds, match):
    with StreamBatcher(model, CARRY) as b:
        s, other = b.open(), b.open()
        with pytest.raises(StreamError, match=match):
            b.submit(s, feeds)
        chunk = [x(rng), x(rng)]
        same(b.step(s, chunk[0]), alone(model, chunk[:1])[0])  # the stream is untouched and usable
        same(b.step(other, chunk[1]), alone(model, chunk[1:])[0])


def test_wrong_batch_size(model, rng):
    with StreamBatcher(model, CARRY) as b:
        s = b.open()
        with pytest.raises(StreamError, match="fail when the model runs them alone"):  # nothing known yet
            b.step(s, {"X": np.zeros((3, 2, I), np.float32)})
        b.step(s, x(rng))
        with pytest.raises(StreamError, match="has 4 on its batch axis 1.*batch 1"):  # known: named
            b.step(s, {"X": np.zeros((3, 4, I), np.float32)})


def test_carry_that_the_model_does_not_have(model):
    with pytest.raises(ValueError, match="no output 'hn' .*outputs: Y, Y_h, Y_c"):
        StreamBatcher(model, {"hn": "initial_h"})
    with pytest.raises(ValueError, match="no input 'h' .*inputs: X, initial_h, initial_c"):
        StreamBatcher(model, {"Y_h": "h"})
    with pytest.raises(ValueError, match="same input"):
        StreamBatcher(model, {"Y_h": "initial_h", "Y_c": "initial_h"})
    with pytest.raises(ValueError, match="carry: a dict"):
        StreamBatcher(model, ["Y_h"])


def test_carry_of_another_type(rng):
    model = lstm(rng)
    model.graph.output[1].type.tensor_type.elem_type = TensorProto.FLOAT16
    with pytest.raises(ValueError, match="output 'Y_h' is float16, input 'initial_h' takes float32"):
        StreamBatcher(model, CARRY)


@pytest.mark.parametrize("initial, match", [
    ({"nope": np.zeros(1)}, "not carried inputs"),
    ({"initial_h": np.zeros((1, 1, H), np.float64)}, "is float64"),
    ({"initial_h": np.zeros((1, 2, H), np.float32)}, "shape"),
])
def test_bad_initial_state(model, initial, match):
    with StreamBatcher(model, CARRY) as b:
        with pytest.raises(StreamError, match=match):
            b.open(initial)
        assert b.open_streams == 0


def test_a_failing_step_fails_alone_and_its_stream_stays_usable(rng):
    """One stream's token id is past the table: onnxruntime fails the whole call, so the batcher
    reruns its steps one by one: only that step fails; the others, and the next step of the same
    stream (its state untouched), are exact."""
    model = token_lstm(rng)
    tokens = [{"tokens": rng.integers(0, VOCAB, (3, 1)).astype(np.int64)} for _ in range(8)]
    bad = {"tokens": np.array([[1], [VOCAB + 5], [2]], np.int64)}
    with StreamBatcher(model, CARRY, max_wait_ms=50) as b:
        ids = [b.open() for _ in tokens]
        results = b.step_many([(i, bad if k == 3 else t) for k, (i, t) in enumerate(zip(ids, tokens))],
                              return_exceptions=True)
        assert isinstance(results[3], StreamError) and "the step failed" in str(results[3])
        for k, r in enumerate(results):
            if k != 3:
                same(r, alone(model, [tokens[k]])[0])
        same(b.step(ids[3], tokens[3]), alone(model, [tokens[3]])[0])  # as if the bad step never ran
        assert b.stats().failed_steps == 1
        with pytest.raises(StreamError, match="the step failed"):
            b.step(ids[0], bad)


def test_close_drops_queued_steps(model, rng):
    """Steps of one stream run in order, one at a time: those still queued when it closes fail with
    StreamClosed, the ones before ran whole (a step never runs after a later one failed closed)."""
    with StreamBatcher(model, CARRY, max_wait_ms=200) as b:
        blockers = [b.open() for _ in range(3)]
        s = b.open()
        futures = [b.submit(s, x(rng)) for _ in range(40)]
        b.close(s)
        outcomes = []
        for f in futures:
            try:
                outcomes.append(len(f.result()) == 3)
            except StreamClosed as e:
                assert "closed before this step ran" in str(e)
                outcomes.append(False)
        assert outcomes == sorted(outcomes, reverse=True)  # done ones first, then only closed ones
        assert b.open_streams == 3 and len(blockers) == 3
        with pytest.raises(StreamClosed):
            b.step(s, x(rng))


def test_close_fails_every_queued_step(model, rng):
    """The engine's one worker held inside a future's callback: steps submitted then cannot run
    before the close, so every one of them fails closed, and the stream is gone."""
    with StreamBatcher(model, CARRY, workers=1) as b:
        held, release = threading.Event(), threading.Event()

        def hold(_):
            if threading.current_thread() is not threading.main_thread():
                held.set()
                release.wait(10)
        for _ in range(50):  # until a callback runs on the worker (not at once, on a done future)
            b.submit(b.open(), x(rng), run_here=False).add_done_callback(hold)
            if held.wait(0.2):
                break
        assert held.is_set()
        s = b.open()
        queued = [b.submit(s, x(rng), run_here=False) for _ in range(10)]
        b.close(s)
        release.set()
        for f in queued:
            with pytest.raises(StreamClosed, match="closed before this step ran"):
                f.result(10)


def test_a_callback_raising_systemexit_leaves_its_calls_other_futures_settled(model, rng):
    """A call's futures settle in one loop: a done-callback that raises SystemExit (which Future
    does not catch) is logged, and the call's other steps still get their results."""
    with StreamBatcher(model, CARRY, workers=1) as b:
        held, release = threading.Event(), threading.Event()

        def hold(_):  # the one worker held, so the steps below queue up for one call
            if threading.current_thread() is not threading.main_thread():
                held.set()
                release.wait(10)
        for _ in range(50):
            b.submit(b.open(), x(rng), run_here=False).add_done_callback(hold)
            if held.wait(0.2):
                break
        assert held.is_set()
        futures = [b.submit(b.open(), x(rng), run_here=False) for _ in range(8)]

        def leave(_):
            raise SystemExit
        futures[0].add_done_callback(leave)
        release.set()
        for f in futures:
            assert len(f.result(10)) == 3


def test_shutdown(model, rng):
    b = StreamBatcher(model, CARRY)
    s = b.open()
    f = b.submit(s, x(rng))
    b.shutdown()
    assert len(f.result()) == 3  # submitted before: still run
    with pytest.raises(BatcherShutDown):
        b.submit(s, x(rng))
    with pytest.raises(BatcherShutDown):
        b.open()


def test_bad_settings(model):
    for kwargs, match in (({"max_batch": 0}, "max_batch"), ({"max_wait_ms": -1}, "max_wait_ms"),
                          ({"workers": 0}, "workers")):
        with pytest.raises(ValueError, match=match):
            StreamBatcher(model, CARRY, **kwargs)


def test_one_threads_bad_input_never_reaches_another(model, rng):
    """Threads stepping good streams while another thread throws bad feeds at the same batcher."""
    chunks = [[x(rng) for _ in range(6)] for _ in range(8)]
    want = [alone(model, c) for c in chunks]
    got = [[] for _ in chunks]
    with StreamBatcher(model, CARRY) as b:
        ids = [b.open() for _ in chunks]
        victim = b.open()
        stop = threading.Event()

        def vandal():
            while not stop.is_set():
                for feeds in ({"X": np.zeros((3, 1, I), np.float64)}, {"X": np.zeros((3, 5, I), np.float32)}, {}):
                    with pytest.raises(StreamError):
                        b.step(victim, feeds)

        def good(k):
            for c in chunks[k]:
                got[k].append(b.step(ids[k], c))
        threads = [threading.Thread(target=good, args=(k,)) for k in range(len(chunks))]
        bad = threading.Thread(target=vandal)
        bad.start()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        stop.set()
        bad.join()
    for g, w in zip(got, want):
        for a, c in zip(g, w):
            same(a, c)
