"""StreamBatcher against hostile values (issue 45's rows on the batcher): settings that would hang
a wait, int8 models whose streams would change each other, feeds changed after submit, ids that
are not ints, and step_batch's first call where a chunk's time steps equal the streams' count.
Each case runs on the native batcher and on the Python reference alike."""

import math
import os
import threading

import numpy as np
import pytest

from lstm_ort.builders import LstmSpec, fused_model, random_int8_layers, random_layers
from lstm_ort.runtime.session import InferenceSession
from lstm_ort.serving.streams import ReferenceStreamBatcher, StreamBatcher, StreamClosed, StreamError
from lstm_ort.verify import INT8_TOLERANCE

I, H = 6, 8
CARRY = {"Y_h": "initial_h", "Y_c": "initial_c"}
BATCHERS = [pytest.param(StreamBatcher, id="native"), pytest.param(ReferenceStreamBatcher, id="reference")]


def zeros():
    return {"initial_h": np.zeros((1, 1, H), np.float32), "initial_c": np.zeros((1, 1, H), np.float32)}


def alone(model, chunks):
    sess = InferenceSession(model.SerializeToString())
    state, outs = zeros(), []
    for feeds in chunks:
        out = sess.run(None, {**feeds, **state})
        state = {"initial_h": out[1], "initial_c": out[2]}
        outs.append(out)
    return outs


def float_model(rng, layout=0):
    spec = LstmSpec(I, H, layout=layout)
    return fused_model(spec, random_layers(spec, rng), initial_states=True)


@pytest.mark.parametrize("batcher", BATCHERS)
@pytest.mark.parametrize("wait", [float("inf"), float("nan"), -1.0, -math.inf, "2", True])
def test_max_wait_must_be_finite_milliseconds(batcher, wait, rng):
    with pytest.raises(ValueError, match="max_wait_ms"):
        batcher(float_model(rng), CARRY, max_wait_ms=wait)


@pytest.mark.parametrize("batcher", BATCHERS)
def test_int8_streams_do_not_change_each_other(batcher, rng):
    """int8 weights quantize X and h: with one scale per call a loud stream in the same call would
    change a quiet one's result. The batchers quantize each stream's rows with their own scales
    (int8_scales="row"), so streams batch and a stream's result is the same, bit for bit, whoever
    shares its calls; against its own run of the model (one scale per call) within int8's bound."""
    spec = LstmSpec(I, H)
    model = fused_model(spec, random_int8_layers(spec, rng), initial_states=True)
    quiet = [{"X": rng.standard_normal((3, 1, I)).astype(np.float32)} for _ in range(4)]
    loud = [{"X": 1000 * rng.standard_normal((3, 1, I)).astype(np.float32)} for _ in range(4)]
    calm = [{"X": 0.01 * rng.standard_normal((3, 1, I)).astype(np.float32)} for _ in range(4)]
    with batcher(model, CARRY, max_wait_ms=50) as b:
        a, c = b.open(), b.open()
        with_loud = [b.step_many([(a, q), (c, v)])[0] for q, v in zip(quiet, loud)]
        a, c = b.open(), b.open()
        with_calm = [b.step_many([(a, q), (c, v)])[0] for q, v in zip(quiet, calm)]
        assert b.batched and not b.fallback_reasons
        a, c = b.open(), b.open()
        stacked = b.step_batch([a, c], {"X": np.concatenate([quiet[0]["X"], loud[0]["X"]], axis=1)})
    for x, y in zip(with_loud, with_calm):
        for p, q in zip(x, y):
            np.testing.assert_array_equal(p, q)
    np.testing.assert_array_equal(stacked[1][:, :1], with_loud[0][1])  # Y_h [D, B, H]: the quiet row
    want = alone(model, quiet)
    for x, y in zip(with_loud, want):
        for p, q in zip(x, y):
            assert np.max(np.abs(p - q)) <= INT8_TOLERANCE.atol + INT8_TOLERANCE.rtol * np.max(np.abs(q))


def test_int8_rows_are_the_same_in_a_wide_call(rng):
    """A call on the engine's wide session (onnxruntime's pool, FusedLSTM's threads; WIDE_FROM_KEY
    at 1 us: every size class after its first call) gives int8 rows bit for bit as the same call on
    one thread: the per-row scales do not depend on how the rows are split over threads."""
    import onnxruntime as ort

    from lstm_ort.serving.streams.native_session import WIDE_FROM_KEY

    i, h, n = 48, 128, 40
    spec = LstmSpec(i, h)
    model = fused_model(spec, random_int8_layers(spec, rng), initial_states=True)
    carry = {"Y_h": "initial_h", "Y_c": "initial_c"}
    xs = [rng.standard_normal((3, n, i)).astype(np.float32) * rng.uniform(0.01, 100, (1, n, 1)).astype(np.float32)
          for _ in range(3)]
    quick, one = ort.SessionOptions(), ort.SessionOptions()
    quick.add_session_config_entry(WIDE_FROM_KEY, "1")
    one.intra_op_num_threads = 1  # set by the caller: one session, never wide
    got, wide_calls = [], []
    for options in (quick, one):
        with StreamBatcher(model, carry, session_options=options) as b:
            ids = [b.open() for _ in range(n)]
            got.append([b.step_batch(ids, {"X": x}) for x in xs])
            wide_calls.append(b.wide_calls)
    assert wide_calls == [2 if (os.cpu_count() or 1) > 1 else 0, 0]  # the first call of its class: one thread
    for wide_step, one_step in zip(*got):
        for a, b in zip(wide_step, one_step):
            np.testing.assert_array_equal(a, b)


def test_int8_one_scale_per_call_runs_one_stream_per_call(rng):
    """A model whose int8 nodes were told one scale per call keeps it only where batching cannot
    reach them; the kinds' analysis names why such steps run alone."""
    from lstm_ort.serving.streams.kinds import per_call_quantized, with_row_scales

    spec = LstmSpec(I, H)
    model = fused_model(spec, random_int8_layers(spec, rng), initial_states=True)
    assert "one scale per call" in per_call_quantized(model)
    assert per_call_quantized(with_row_scales(model)) == ""


@pytest.mark.parametrize("batcher", BATCHERS)
def test_feeds_are_copied_at_submit(batcher, rng):
    """A caller that reuses its buffer after submit gets the result for what it submitted."""
    model = float_model(rng)
    chunk = rng.standard_normal((3, 1, I)).astype(np.float32)
    want = alone(model, [{"X": chunk.copy()}])[0]
    with batcher(model, CARRY) as b:
        s = b.open()
        for _ in range(20):  # the first submits race the buffer's reuse
            buf = chunk.copy()
            f = b.submit(s, {"X": buf})
            buf[...] = 0
            got = f.result(timeout=10)
            b.close(s)
            s = b.open()
            for x, y in zip(got, want):
                np.testing.assert_allclose(x, y, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("batcher", BATCHERS)
@pytest.mark.parametrize("bad", [1.5, 2.0, "a", "1", True, None, (1,)])
def test_ids_that_are_not_ints_name_no_stream(batcher, bad, rng):
    model = float_model(rng)
    feeds = {"X": rng.standard_normal((3, 1, I)).astype(np.float32)}
    with batcher(model, CARRY) as b:
        ids = [b.open() for _ in range(3)]
        with pytest.raises(StreamClosed, match="not open"):
            b.step(bad, feeds)
        with pytest.raises(StreamClosed, match="not open"):
            b.step_batch([ids[0], bad, ids[2]], {"X": rng.standard_normal((3, 3, I)).astype(np.float32)})
        with pytest.raises(StreamClosed, match="not open"):
            b.step_batch([1.9, 2.2, 3.5], {"X": rng.standard_normal((3, 3, I)).astype(np.float32)})
        # numpy ints are ints, and an integer array of ids is a list of them (a float one is not)
        out = b.step(np.int64(ids[0]), feeds)
        assert len(out) == 3
        stacked = {"X": rng.standard_normal((3, 3, I)).astype(np.float32)}
        assert len(b.step_batch(np.asarray(ids, np.int64), stacked)) == 3
        with pytest.raises(StreamClosed, match="not open"):
            b.step_batch(np.asarray(ids, np.float64), stacked)


@pytest.mark.parametrize("batcher", BATCHERS)
@pytest.mark.parametrize("layout", [0, 1])
def test_step_batch_first_call_when_time_equals_streams(batcher, layout, rng):
    """T=3 chunks for 3 streams (and T=4 for 4) as the first call of the kind: the batch axis comes
    from the model's analysis, never from which axis happens to have the streams' count."""
    model = float_model(rng, layout)
    for n in (3, 4):
        chunks = [{"X": rng.standard_normal((n, 1, I) if layout == 0 else (1, n, I)).astype(np.float32)}
                  for _ in range(n)]
        want = [alone(model, [c])[0] for c in chunks]
        with batcher(model, CARRY) as b:
            ids = [b.open() for _ in range(n)]
            stacked = np.concatenate([c["X"] for c in chunks], axis=1 if layout == 0 else 0)
            out = b.step_batch(ids, {"X": stacked})
        y_batch = 2 if layout == 0 else 0  # Y is [T, D, B, H] in layout 0, [B, T, D, H] in layout 1
        assert out[0].shape[y_batch] == n
        for k in range(n):
            np.testing.assert_allclose(np.take(out[0], [k], axis=y_batch), want[k][0], rtol=1e-5, atol=1e-6)


def test_native_engine_never_needs_its_safety_net(rng):
    """Every wait in the engine ends by a wake-up; its 100 ms safety net is for bugs (stats)."""
    model = float_model(rng)
    with StreamBatcher(model, CARRY) as b:
        ids = [b.open() for _ in range(16)]
        feeds = [{"X": rng.standard_normal((3, 1, I)).astype(np.float32)} for _ in range(8)]

        def client(k):
            for r in range(40):
                b.step(ids[(k + r) % 16], feeds[r % 8])

        threads = [threading.Thread(target=client, args=(k,)) for k in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)
        assert b._engine.stats()["rescued"] == 0
