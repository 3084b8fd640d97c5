"""States kept on the session's device (lstm_ort/serving/streams/device.py): the model wrapped in
Gather / ScatterND over slot arrays, run with I/O binding. The CPU suite runs the same path on host
OrtValues (device_states=True); the `gpu` tests run it on CUDA, where it is the default."""

import numpy as np
import pytest
import streams_support as support

from lstm_ort.serving.streams import StreamBatcher

# use_tf32=0: onnxruntime's own CUDA MatMul/Conv/Gemm default to TF32, whose rounding depends on
# the batch (measured on two H200s with it on: 1.0e-4 between a stream batched with 199 others and
# its own run); with it off every op of the model computes in float32.
from lstm_ort.testing import CUDA  # noqa: E402

CARRY = {"hn": "h", "cn": "c"}


@pytest.fixture(scope="module")
def torch_hc():
    return support.torch_lstm()


def torch_streams(rng, n, lengths=(1, 4)):
    streams = [[{"x": rng.standard_normal((int(rng.choice(lengths)), 1, 40)).astype(np.float32)} for _ in range(k)]
               for k in rng.integers(1, 7, n)]
    init = [{"h": rng.standard_normal((2, 1, 64)).astype(np.float32),
             "c": rng.standard_normal((2, 1, 64)).astype(np.float32)} for _ in streams]
    return streams, init


def test_device_states_on_cpu_match_alone(torch_hc, rng):
    """More streams than the first capacity (64): the slot arrays grow while streams run."""
    streams, init = torch_streams(rng, 80)
    want = [support.alone(torch_hc, CARRY, s, i) for s, i in zip(streams, init)]
    with StreamBatcher(torch_hc, CARRY, device_states=True) as b:
        assert b.device_states
        got = support.serve_concurrently(b, streams, 5, initial=init)
        assert b.stats().mean_batch > 1
    assert support.worst_difference(got, want) <= 1e-5


def test_device_states_reused_slots_start_fresh(torch_hc, rng):
    """A closed stream's slot goes to the next stream opened, which starts from its own state."""
    x = {"x": rng.standard_normal((2, 1, 40)).astype(np.float32)}
    zero = {"h": np.zeros((2, 1, 64), np.float32), "c": np.zeros((2, 1, 64), np.float32)}
    with StreamBatcher(torch_hc, CARRY, device_states=True) as b:
        s = b.open({"h": np.ones((2, 1, 64), np.float32)})
        b.step(s, x)
        b.close(s)
        t = b.open()
        np.testing.assert_array_equal(b.state(t)["h"], 0)
        got = b.step(t, x)
        np.testing.assert_array_equal(b.state(t)["h"], got[1])
    assert support.worst_difference([[got]], [support.alone(torch_hc, CARRY, [x], zero)]) <= 1e-5


def test_a_stream_alone_then_batched_then_alone_keeps_one_chain_of_states(torch_hc, rng):
    """A call of one stream runs the model as it came with the stream's state from the host (its
    first state, or its last lone call's) or from its row of the slot arrays (its last call was
    batched); a batched call writes the host states in first. Every step and state as alone."""
    x = [{"x": rng.standard_normal((2, 1, 40)).astype(np.float32)} for _ in range(6)]
    other = {"x": rng.standard_normal((2, 1, 40)).astype(np.float32)}
    init = {"h": rng.standard_normal((2, 1, 64)).astype(np.float32), "c": rng.standard_normal((2, 1, 64)).astype(np.float32)}
    want = support.alone(torch_hc, CARRY, x, init)
    got = []
    with StreamBatcher(torch_hc, CARRY, device_states=True) as b:
        s, t = b.open(init), b.open()
        got.append(b.step(s, x[0]))  # alone: the first state from the host
        stacked = {"x": np.concatenate([x[1]["x"], other["x"]], axis=1)}
        y, hn, cn = b.step_batch([s, t], stacked)  # batched: s's host state written into the arrays first
        got.append([y[:, :1], hn[:, :1], cn[:, :1]])  # every output's batch axis is 1
        got.append(b.step(s, x[2]))  # alone: its row of the slot arrays
        np.testing.assert_array_equal(b.state(s)["h"], got[-1][1])
        got.append(b.step(s, x[3]))  # alone: the host state its last call left
        got.append(b.step_batch([t, s], {"x": np.concatenate([other["x"], x[4]["x"]], axis=1)}))
        got[-1] = [out[:, 1:] for out in got[-1]]
        got.append(b.step(s, x[5]))
        np.testing.assert_array_equal(b.state(s)["c"], got[-1][2])
    assert support.worst_difference([got], [want]) <= 1e-5


def test_silero_device_states_on_cpu(rng):
    model, carry = support.corpus_optimized(support.SILERO)
    streams = [[{"input": (0.1 * rng.standard_normal((1, 576))).astype(np.float32), "sr": np.array(16000)}
                for _ in range(k)] for k in rng.integers(1, 8, 24)]
    zero = {"state": np.zeros((2, 1, 128), np.float32)}
    want = [support.alone(model, carry, s, zero) for s in streams]
    with StreamBatcher(model, carry, device_states=True) as b:
        got = support.serve_concurrently(b, streams, 4)
    assert support.worst_difference(got, want) <= 1e-5


# -- on the GPU ------------------------------------------------------------------------------------
# FusedLSTM's default precision `auto` may pick TF32 for large batches (docs/ops.md): fp32 keeps
# every stream within float32 rounding of its own run on the same GPU.

def fp32_options():
    from lstm_ort.runtime.session import PRECISION_KEY
    from lstm_ort.serving.streams.cli import session_options

    so = session_options()
    so.add_session_config_entry(PRECISION_KEY, "fp32")
    return so


@pytest.mark.gpu
def test_gpu_torch_export_streams_match_alone(torch_hc, rng):
    from lstm_ort.runtime.session import InferenceSession

    streams, init = torch_streams(rng, 200)
    sess = InferenceSession(torch_hc.SerializeToString(), fp32_options(), providers=CUDA)
    want = [support.alone(torch_hc, CARRY, s, i, sess) for s, i in zip(streams, init)]
    with StreamBatcher(torch_hc, CARRY, providers=CUDA, session_options=fp32_options()) as b:
        assert b.device_states and "CUDAExecutionProvider" in b.session.get_providers()
        got = support.serve_concurrently(b, streams, 8, initial=init)
    assert support.worst_difference(got, want) <= 1e-5


@pytest.mark.gpu
def test_gpu_silero_many_streams_match_alone(rng):
    from lstm_ort.runtime.session import InferenceSession

    model, carry = support.corpus_optimized(support.SILERO)
    streams = [[{"input": (0.1 * rng.standard_normal((1, 576))).astype(np.float32), "sr": np.array(16000)}
                for _ in range(k)] for k in rng.integers(1, 10, 300)]
    zero = {"state": np.zeros((2, 1, 128), np.float32)}
    sess = InferenceSession(model.SerializeToString(), fp32_options(), providers=CUDA)
    want = [support.alone(model, carry, s, zero, sess) for s in streams]
    with StreamBatcher(model, carry, providers=CUDA, session_options=fp32_options()) as b:
        got = support.serve_concurrently(b, streams, 8)
        assert b.stats().mean_batch > 1
    assert support.worst_difference(got, want) <= 1e-5


# -- calls of one stream on a CUDA graph (custom_ops/streams/graphed_call.h) -----------------------

def graph_options(value: str | None):
    from lstm_ort.serving.streams.native_session import CUDA_GRAPHS_KEY

    so = fp32_options()
    if value is not None:
        so.add_session_config_entry(CUDA_GRAPHS_KEY, value)
    return so


def test_cuda_graphs_say_why_not_off_cuda(torch_hc, rng):
    x = {"x": rng.standard_normal((1, 1, 40)).astype(np.float32)}
    for device_states, why in ((True, "CUDA graphs are for calls on CUDA"),
                               (False, "the engine keeps its states on the host")):
        with StreamBatcher(torch_hc, CARRY, device_states=device_states) as b:
            b.step(b.open(), x)
            b.wait_specialized(120)
            assert b.cuda_graphs() == {0: (0, why)}
            assert not b._engine.makes_graphed_sessions()  # nor counted in the kinds' budget


def test_cuda_graphs_key_takes_0_or_1(torch_hc):
    with pytest.raises(ValueError, match="lstm_ort.streams.cuda_graphs must be one of 0, 1, got 'yes'"):
        StreamBatcher(torch_hc, CARRY, session_options=graph_options("yes"))


@pytest.mark.parametrize("value", ["1", "True", 1])
def test_onnxruntimes_session_wide_cuda_graph_is_refused(torch_hc, value):
    providers = [("CUDAExecutionProvider", {"enable_cuda_graph": value}), "CPUExecutionProvider"]
    with pytest.raises(ValueError, match="enable_cuda_graph would replay each call on the first call's buffers"):
        StreamBatcher(torch_hc, CARRY, providers=providers)


@pytest.mark.gpu
@pytest.mark.parametrize("graphs", ["1", "0"])
def test_gpu_kinds_budget_counts_the_graphed_session_the_engine_makes(torch_hc, rng, monkeypatch, graphs):
    """The engine decides whether a kind gets a graphed session; the budget for the kinds' own
    models reads that decision: room for a kind's models but not its graphed session refuses the
    kind where the engine makes one."""
    from lstm_ort.serving.streams import batcher as batcher_module

    x = {"x": rng.standard_normal((1, 1, 40)).astype(np.float32)}
    with StreamBatcher(torch_hc, CARRY, providers=CUDA, session_options=graph_options(graphs)) as b:
        room = b.session_model.ByteSize() + (b.model.ByteSize() if b.convs_rewritten else 0)
        monkeypatch.setattr(batcher_module, "_SPECIALIZED_BYTES", room)
        assert b._engine.makes_graphed_sessions() == (graphs == "1")
        b.step(b.open(), x)
        why = b.wait_specialized(300)
    budget_refused = "MiB of weights again" in why[0]  # (the torch export's kind may have no models for
    assert budget_refused == (graphs == "1")          # another reason: folding removed nothing)


def lone_then_batched_then_lone(b, chunks, other):
    """One stream's steps: alone, then one batched with another stream, then alone again (the torch
    export: every output has its batch on axis 1)."""
    s, t = b.open(), b.open()
    got = [b.step(s, chunks[0])]
    b.wait_specialized(300)
    got += [b.step(s, c) for c in chunks[1:8]]
    outs = b.step_batch([s, t], {"x": np.concatenate([chunks[8]["x"], other["x"]], axis=1)})
    got.append([o[:, :1] for o in outs])
    got += [b.step(s, c) for c in chunks[9:]]
    return got


@pytest.mark.gpu
@pytest.mark.parametrize("graphs", [None, "0"])
def test_gpu_one_stream_replays_a_cuda_graph(torch_hc, rng, graphs):
    """A stream alone, batched once, alone again: every step as its own run, on the kind's graph
    (captured on its third call; the call after the batched one reads the state from the slot
    arrays, the plain way) unless turned off."""
    from lstm_ort.runtime.session import InferenceSession

    chunks = [{"x": rng.standard_normal((1, 1, 40)).astype(np.float32)} for _ in range(14)]
    other = {"x": rng.standard_normal((1, 1, 40)).astype(np.float32)}
    zero = {"h": np.zeros((2, 1, 64), np.float32), "c": np.zeros((2, 1, 64), np.float32)}
    sess = InferenceSession(torch_hc.SerializeToString(), fp32_options(), providers=CUDA)
    want = support.alone(torch_hc, CARRY, chunks, zero, sess)
    with StreamBatcher(torch_hc, CARRY, providers=CUDA, session_options=graph_options(graphs)) as b:
        got = lone_then_batched_then_lone(b, chunks, other)
        calls, why = b.cuda_graphs()[0]
    assert support.worst_difference([got], [want]) <= 1e-5
    if graphs == "0":
        assert (calls, why) == (0, "turned off (lstm_ort.streams.cuda_graphs=0)")
    else:  # 13 lone calls: the first ran before the kind's models, the second binds the buffers, the
        # one after the batched call reads the slot arrays
        assert (calls, why) == (10, "")


@pytest.mark.gpu
def test_gpu_silero_one_stream_on_a_cuda_graph(rng):
    from lstm_ort.runtime.session import InferenceSession

    model, carry = support.corpus_optimized(support.SILERO)
    chunks = [{"input": (0.1 * rng.standard_normal((1, 576))).astype(np.float32), "sr": np.array(16000)}
              for _ in range(40)]
    zero = {"state": np.zeros((2, 1, 128), np.float32)}
    sess = InferenceSession(model.SerializeToString(), fp32_options(), providers=CUDA)
    want = support.alone(model, carry, chunks, zero, sess)
    with StreamBatcher(model, carry, providers=CUDA, session_options=fp32_options()) as b:
        s = b.open()
        got = [b.step(s, chunks[0])]
        assert b.wait_specialized(300) == {0: ""}
        got += [b.step(s, c) for c in chunks[1:]]
        assert b.cuda_graphs() == {0: (38, "")}
    assert support.worst_difference([got], [want]) <= 1e-5


@pytest.mark.gpu
def test_gpu_threads_each_stepping_a_kind_alone_capture_while_others_run(torch_hc, rng):
    """8 client threads, each stepping a stream of its own kind (x of T = 1..8 steps: calls never
    batch), all at once: the first 4 kinds' calls run on their graphs (onnxruntime keeps one per
    thread and captures it on the thread's first run), the others' plain, side by side. A capture
    must not fail the other calls (CUDA forbids them while it runs: capture_gate.h), nor they it."""
    import threading

    from lstm_ort.runtime.session import InferenceSession

    chunks = [[{"x": rng.standard_normal((t, 1, 40)).astype(np.float32)} for _ in range(25)] for t in range(1, 9)]
    zero = {"h": np.zeros((2, 1, 64), np.float32), "c": np.zeros((2, 1, 64), np.float32)}
    sess = InferenceSession(torch_hc.SerializeToString(), fp32_options(), providers=CUDA)
    want = [support.alone(torch_hc, CARRY, c, zero, sess) for c in chunks]
    got = [None] * len(chunks)
    with StreamBatcher(torch_hc, CARRY, providers=CUDA, session_options=fp32_options()) as b:
        for c in chunks:  # each kind, and its own models
            b.step(b.open(), c[0])
        b.wait_specialized(300)

        def client(i):
            s = b.open()
            got[i] = [b.step(s, c) for c in chunks[i]]

        threads = [threading.Thread(target=client, args=(i,)) for i in range(len(chunks))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        use = b.cuda_graphs()
        assert b.stats().failed_steps == 0
    assert support.worst_difference(got, want) <= 1e-5
    # each stream's first call binds its kind's buffers (or finds them bound already: the H200 once
    # ran a kind's first client call on its graph, stop 66), the other 24 run on the graph
    graphed = [calls for calls, why in use.values() if not why]
    assert len(graphed) == 4 and all(24 <= calls <= 25 for calls in graphed), use
