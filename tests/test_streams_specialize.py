"""A kind's own models (lstm_ort/serving/streams/specialize.py): folded on the kind's shapes and
shared values, proved against the model before use, run by the engine for that kind's calls (of
one stream and of several); convs.py's round trips around activations, dropped; tf2onnx's
Tensordot (tensordot.py) as one MatMul."""

import numpy as np
import onnx
import pytest
import streams_support as support
from onnx import TensorProto, helper, numpy_helper

from lstm_ort.builders import LstmSpec, fused_model, random_layers
from lstm_ort.runtime.session import InferenceSession
from lstm_ort.serving.streams import StreamBatcher, specialize
from lstm_ort.serving.streams.convs import convs_as_2d
from lstm_ort.serving.streams.device import state_axes as state_axes_of
from lstm_ort.serving.streams.device import wrapped_model
from lstm_ort.serving.streams.tensordot import collapse_tensordots


TOL = 1e-5


def op_count(model: onnx.ModelProto, op: str) -> int:
    return sum(n.op_type == op for n in model.graph.node)


def conv_stack(rng, shared_activation: bool = False, first: str = "Relu") -> onnx.ModelProto:
    """x [N, 4, 9] -> Conv -> Relu -> Conv(stride 2) -> Sigmoid -> Conv -> y; with
    ``shared_activation`` the Relu's output is also an output of the model; ``first="PRelu"``: a
    PRelu of one slope per channel in the Relu's place."""
    w = [numpy_helper.from_array((0.3 * rng.standard_normal(s)).astype(np.float32), f"w{k}")
         for k, s in enumerate([(6, 4, 3), (5, 6, 3), (3, 5, 1)])]
    b0 = numpy_helper.from_array((0.1 * rng.standard_normal(6)).astype(np.float32), "b0")
    nodes = [helper.make_node("Conv", ["x", "w0", "b0"], ["c0"], pads=[1, 1]),
             helper.make_node(first, ["c0", "slope"] if first == "PRelu" else ["c0"], ["r0"]),
             helper.make_node("Conv", ["r0", "w1"], ["c1"], pads=[1, 1], strides=[2]),
             helper.make_node("Sigmoid", ["c1"], ["s1"]),
             helper.make_node("Conv", ["s1", "w2"], ["y"])]
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)]
    if shared_activation:
        outputs.append(helper.make_tensor_value_info("r0", TensorProto.FLOAT, None))
    slope = numpy_helper.from_array((0.1 + 0.1 * rng.random((6, 1))).astype(np.float32), "slope")
    graph = helper.make_graph(nodes, "convs", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4, 9])],
                              outputs, [*w, b0, slope])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


@pytest.mark.parametrize("shared_activation, first", [(False, "Relu"), (True, "Relu"), (False, "PRelu")])
def test_conv_round_trips_around_activations_dropped(rng, shared_activation, first):
    model = conv_stack(rng, shared_activation, first)
    rewritten = onnx.ModelProto()
    rewritten.CopyFrom(model)
    assert convs_as_2d(rewritten) == 3
    # three convs, each wrapped in two Transposes; an activation read only by the next conv loses
    # the two between it and each neighbour (not one whose slope is per channel: it would broadcast
    # on the wrong axes in the 2-D layout)
    kept = shared_activation or first == "PRelu"
    assert op_count(rewritten, "Transpose") == (4 if kept else 2)
    assert op_count(rewritten, "Squeeze") == (2 if kept else 1)
    same_outputs(model, rewritten, rng)


def same_outputs(model, rewritten, rng, extra=None):
    want_sess, got_sess = InferenceSession(model.SerializeToString()), InferenceSession(rewritten.SerializeToString())
    for n in (1, 2, 5):
        feeds = {"x": rng.standard_normal((n, 4, 9)).astype(np.float32), **(extra or {})}
        for want, got in zip(want_sess.run(None, feeds), got_sess.run(None, feeds)):
            assert got.shape == want.shape
            np.testing.assert_allclose(got, want, rtol=TOL, atol=TOL)


def with_a_branch_reading(model: onnx.ModelProto, value: str) -> onnx.ModelProto:
    """``model`` with an If (on a new input `flag`) whose branches read ``value`` from the main graph."""
    branch = helper.make_graph([helper.make_node("Identity", [value], ["seen"])], "branch", [],
                               [helper.make_tensor_value_info("seen", TensorProto.FLOAT, None)])
    model.graph.input.append(helper.make_tensor_value_info("flag", TensorProto.BOOL, []))
    model.graph.node.append(helper.make_node("If", ["flag"], ["z"], then_branch=branch, else_branch=branch))
    model.graph.output.append(helper.make_tensor_value_info("z", TensorProto.FLOAT, None))
    return model


def test_an_activation_a_subgraph_reads_keeps_its_round_trip(rng):
    """The Relu's output read inside an If branch (from the enclosing scope): it keeps its name and
    layout, and the model still loads and computes the same."""
    model = with_a_branch_reading(conv_stack(rng), "r0")
    rewritten = onnx.ModelProto()
    rewritten.CopyFrom(model)
    assert convs_as_2d(rewritten) == 3
    assert op_count(rewritten, "Transpose") == 4  # the Sigmoid's round trip dropped, the Relu's kept
    same_outputs(model, rewritten, rng, {"flag": np.array(True)})


def scaled(model: onnx.ModelProto, output: str, factor: float, wrap_for=None) -> bytes:
    """``model`` with ``output`` multiplied by ``factor``: a model that is not the model (wrapped
    for ``wrap_for``'s device states, where given)."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    for node in m.graph.node:
        node.output[:] = [o + "_raw" if o == output else o for o in node.output]
        node.input[:] = [i + "_raw" if i == output else i for i in node.input]
    m.graph.initializer.append(numpy_helper.from_array(np.array(factor, np.float32), "factor"))
    m.graph.node.append(helper.make_node("Mul", [output + "_raw", "factor"], [output]))
    if wrap_for is not None:
        kind = next(iter(wrap_for._kinds._kinds.values()))[0]
        axes = state_axes_of(kind.layout, True, wrap_for._states)
        m = wrapped_model(m, wrap_for.carry, dict(zip(wrap_for._states, axes)), wrap_for._states, wrap_for._opset)
    return m.SerializeToString()


@pytest.mark.parametrize("device_states", [False, True])
def test_the_engine_runs_a_groups_own_models(rng, device_states):
    """Calls of one stream run the group's single model, calls of several its batched model (with
    device states, wrapped); on the host a group without a single model runs its batched one for
    one stream too (this model has no model of its own for calls of one stream: no convolutions
    to batch). Device states run on host memory here (docs/streams.md)."""
    spec = LstmSpec(6, 8)
    model = fused_model(spec, random_layers(spec, rng), initial_states=True)
    carry = {"Y_h": "initial_h", "Y_c": "initial_c"}
    x = {"X": rng.standard_normal((2, 1, 6)).astype(np.float32)}
    with StreamBatcher(model, carry, specialize=False, device_states=device_states) as b:
        ids = [b.open() for _ in range(3)]
        want = b.step_many([(i, x) for i in ids])  # the group is registered by the first step
        group = b._groups[next(iter(b._groups))]
        wrap = b if device_states else None
        b._engine.add_group_models(group, scaled(model, "Y", 3.0, wrap), scaled(model, "Y", 2.0))
        one = b.step(ids[0], x)
        several = b.step_many([(i, x) for i in ids[1:]])
        if not device_states:
            b._engine.add_group_models(group, scaled(model, "Y", 5.0), b"")
        one_by_batched = b.step(ids[0], x)
    # the same steps through a batcher without the scaled models
    with StreamBatcher(model, carry, specialize=False, device_states=device_states) as ref:
        rids = [ref.open() for _ in range(3)]
        ref.step_many([(i, x) for i in rids])
        plain_one = ref.step(rids[0], x)
        plain_several = ref.step_many([(i, x) for i in rids[1:]])
        plain_again = ref.step(rids[0], x)
    assert len(want) == 3
    np.testing.assert_allclose(one[0], 2.0 * plain_one[0], rtol=TOL, atol=TOL)
    for got, plain in zip(several, plain_several):
        np.testing.assert_allclose(got[0], 3.0 * plain[0], rtol=TOL, atol=TOL)
        np.testing.assert_allclose(got[1], plain[1], rtol=TOL, atol=TOL)  # Y_h untouched
    np.testing.assert_allclose(one_by_batched[0], (2.0 if device_states else 5.0) * plain_again[0], rtol=TOL, atol=TOL)


@pytest.fixture(scope="module")
def silero():
    return support.corpus_optimized(support.SILERO)


def silero_chunks(rng, n, sr=16000, samples=576):
    return [[{"input": (0.1 * rng.standard_normal((1, samples))).astype(np.float32), "sr": np.array(sr, np.int64)}
             for _ in range(k)] for k in rng.integers(2, 8, n)]


@pytest.mark.parametrize("device_states", [False, True])
def test_silero_kinds_get_folded_models(silero, rng, device_states):
    """sr and the shapes fixed, silero-vad's branches fold away (most of its nodes); each sample
    rate's kind gets its own models, and every stream still gets its own run's results."""
    model, carry = silero
    streams = silero_chunks(rng, 12, 16000) + silero_chunks(rng, 12, 8000, samples=288)
    zero = {"state": np.zeros((2, 1, 128), np.float32)}
    want = [support.alone(model, carry, s, zero) for s in streams]
    with StreamBatcher(model, carry, device_states=device_states) as b:
        ids = [b.open() for _ in range(2)]
        b.step(ids[0], streams[0][0])
        b.step(ids[1], streams[-1][0])
        assert b.wait_specialized(120) == {0: "", 1: ""}
        got = support.serve_concurrently(b, streams, 4)
    assert support.worst_difference(got, want) <= TOL
    shapes = {"input": (1, 576), "state": (2, 1, 128)}
    folded, why = specialize.folded(model, shapes, {"input": 0, "state": 1}, {"sr": np.array(16000, np.int64)})
    assert not why and specialize._count_nodes(folded) < specialize._count_nodes(model) / 2


def test_a_folded_model_that_is_not_the_model_is_refused(silero, rng, monkeypatch):
    """The proof runs the folded model against the model: a wrong one is refused with the
    reason, and the kind runs the model as it came."""
    model, carry = silero
    real = specialize.folded

    def wrong(m, *args):
        out, why = real(m, *args)
        return (onnx.load_from_string(scaled(out, "output", 1.5)) if out is not None else None), why

    monkeypatch.setattr(specialize, "folded", wrong)
    streams = silero_chunks(rng, 6)
    zero = {"state": np.zeros((2, 1, 128), np.float32)}
    want = [support.alone(model, carry, s, zero) for s in streams]
    with StreamBatcher(model, carry) as b:
        b.step(b.open(), streams[0][0])
        why = b.wait_specialized(120)[0]
        got = support.serve_concurrently(b, streams, 3)
    assert "several streams: the folded model is not the model: output 0 differs" in why
    assert "one stream: the folded model is not the model: output 0 differs" in why
    assert support.worst_difference(got, want) <= TOL


def test_nothing_to_fold_leaves_the_kind_as_it_came(rng):
    spec = LstmSpec(6, 8)
    model = fused_model(spec, random_layers(spec, rng), initial_states=True)
    with StreamBatcher(model, {"Y_h": "initial_h", "Y_c": "initial_c"}) as b:
        b.step(b.open(), {"X": rng.standard_normal((2, 1, 6)).astype(np.float32)})
        assert "folding removed no node" in b.wait_specialized(120)[0]
        assert b._specialized_bytes == 0  # the budget it took, given back


def tensordot_model(rng, order=(0, 1), flat=(-1, 8)) -> onnx.ModelProto:
    """Keras' Dense over [N, T, 8] as tf2onnx writes it (Tensordot), its output shape from
    Shape(x)[order] + [5]."""
    nodes = [helper.make_node("Reshape", ["x", "flat"], ["x2"]),
             helper.make_node("MatMul", ["x2", "w"], ["y2"]),
             helper.make_node("Shape", ["x"], ["s"]),
             helper.make_node("Cast", ["s"], ["s32"], to=TensorProto.INT32),
             helper.make_node("Gather", ["s32", "free"], ["lead"], axis=0),
             helper.make_node("Concat", ["lead", "m"], ["shape32"], axis=0),
             helper.make_node("Cast", ["shape32"], ["shape"], to=TensorProto.INT64),
             helper.make_node("Reshape", ["y2", "shape"], ["y3"]),
             helper.make_node("Relu", ["y3"], ["y"])]
    inits = [numpy_helper.from_array(np.array(flat, np.int64), "flat"),
             numpy_helper.from_array((0.3 * rng.standard_normal((8, 5))).astype(np.float32), "w"),
             numpy_helper.from_array(np.array(order, np.int64), "free"),
             numpy_helper.from_array(np.array([5], np.int32), "m")]
    graph = helper.make_graph(nodes, "dense", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", "T", 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


@pytest.mark.parametrize("order, flat, collapses", [((0, 1), (-1, 8), True),
                                                    ((1, 0), (-1, 8), False),  # the leading axes swapped back
                                                    ((0, 1), (4, 8), False)])  # a flattening that fixes N * T
def test_tensordot_becomes_one_matmul_only_where_it_is_one(rng, order, flat, collapses):
    model = tensordot_model(rng, order, flat)
    rewritten = onnx.ModelProto()
    rewritten.CopyFrom(model)
    assert collapse_tensordots(rewritten) == int(collapses)
    if not collapses:
        return
    dense = next(n for n in rewritten.graph.node if "y3" in n.output)  # the rest goes unread
    assert dense.op_type == "MatMul" and list(dense.input) == ["x", "w"]
    want, got = InferenceSession(model.SerializeToString()), InferenceSession(rewritten.SerializeToString())
    for n, t in ((1, 1), (3, 1), (2, 7)):
        x = rng.standard_normal((n, t, 8)).astype(np.float32)
        np.testing.assert_allclose(got.run(None, {"x": x})[0], want.run(None, {"x": x})[0], rtol=TOL, atol=TOL)


def test_a_tensordot_whose_product_a_subgraph_reads_stays(rng):
    """The MatMul's output read inside an If branch too: one MatMul in its place would leave the
    Tensordot's to run as well, so it stays (model_io.reader_counts counts a subgraph's reads)."""
    model = with_a_branch_reading(tensordot_model(rng), "y2")
    assert collapse_tensordots(model) == 0
    model.graph.node.pop()  # without the branch's read it is one MatMul
    assert collapse_tensordots(model) == 1


def test_g2p_decoder_kind_folds_its_dense_layer(rng):
    model, carry = support.corpus_optimized(support.G2P_DECODER)
    streams = [[{"input_2": rng.standard_normal((1, 1, 32)).astype(np.float32)} for _ in range(k)]
               for k in rng.integers(2, 8, 16)]
    init = [{"input_3": rng.standard_normal((1, 256)).astype(np.float32),
             "input_4": rng.standard_normal((1, 256)).astype(np.float32)} for _ in streams]
    want = [support.alone(model, carry, s, i) for s, i in zip(streams, init)]
    with StreamBatcher(model, carry) as b:
        b.step(b.open(init[0]), streams[0][0])
        assert b.wait_specialized(120) == {0: ""}
        got = support.serve_concurrently(b, streams, 4, initial=init)
    assert support.worst_difference(got, want) <= TOL


def test_kinds_past_the_budget_keep_the_model_and_say_why(silero, rng, monkeypatch):
    """Each kind's own models hold the weights again: past the budget, a kind says so (and a
    refused kind gives its share back)."""
    from lstm_ort.serving.streams import batcher as batcher_module

    model, carry = silero
    monkeypatch.setattr(batcher_module, "_SPECIALIZED_BYTES", int(model.ByteSize() * 3.5))  # room for one
    with StreamBatcher(model, carry) as b:
        ids = [b.open() for _ in range(2)]
        b.step(ids[0], silero_chunks(rng, 1)[0][0])
        b.step(ids[1], silero_chunks(rng, 1, 8000, samples=288)[0][0])
        why = b.wait_specialized(120)
        assert why[0] == "" and "MiB of weights again" in why[1]
        assert b._specialized_bytes > 0


def test_a_first_step_of_nans_still_gets_the_kind_its_models(silero, rng):
    """The proof runs the kind's example made finite: a stream that starts with NaNs gets NaNs
    back, as alone, and the kind its models."""
    model, carry = silero
    bad = {"input": np.full((1, 576), np.nan, np.float32), "sr": np.array(16000, np.int64)}
    with StreamBatcher(model, carry) as b:
        out = b.step(b.open(), bad)
        assert b.wait_specialized(120) == {0: ""}
    assert np.isnan(out[0]).all()
