"""The batch-axis analysis behind StreamBatcher (lstm_ort/graph/batch_axes.py): where one
stream's feeds and results carry the batch, found from the graph (never from sizes alone), and a
refusal naming the op wherever the streams of a batch would meet."""

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from lstm_ort.builders import LstmSpec, fused_model, random_layers
from lstm_ort.graph.batch_axes import batch_layout
from lstm_ort.runtime.session import InferenceSession

I, H, T = 6, 8, 3


def lstm(rng, layout=0):
    spec = LstmSpec(I, H, layout=layout)
    return fused_model(spec, random_layers(spec, rng), initial_states=True)


def with_head(model, nodes, out_shape=None, inits=(), extra_inputs=()):
    """``model`` whose Y goes through ``nodes`` into output ``out`` (Y_h, Y_c stay outputs)."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    g = m.graph
    g.node.extend(nodes)
    g.initializer.extend(numpy_helper.from_array(np.asarray(v), k) for k, v in inits)
    g.input.extend(extra_inputs)
    outs = [o for o in g.output if o.name != "Y"]
    del g.output[:]
    g.output.extend([helper.make_tensor_value_info("out", TensorProto.FLOAT, out_shape), *outs])
    return m


def feeds(layout=0, t=T):
    x = np.ones((t, 1, I) if layout == 0 else (1, t, I), np.float32)
    state = np.zeros((1, 1, H), np.float32)
    return {"X": x, "initial_h": state, "initial_c": state}


CARRIED = {"initial_h", "initial_c"}


@pytest.mark.parametrize("layout", [0, 1])
def test_axes_follow_the_lstm_layout(rng, layout):
    lay = batch_layout(lstm(rng, layout), feeds(layout), CARRIED)
    axis = 1 if layout == 0 else 0
    assert lay.batched, lay.describe()
    assert lay.inputs == {"X": axis, "initial_h": axis, "initial_c": axis}
    assert lay.outputs == {"Y": 2 if layout == 0 else 0, "Y_h": axis, "Y_c": axis}


def test_one_step_chunk_is_not_ambiguous(rng):
    """X [1, 1, I]: both axes have size 1; only the batch axis the FusedLSTM layout reads fits."""
    lay = batch_layout(lstm(rng), feeds(t=1), CARRIED)
    assert lay.batched and lay.inputs["X"] == 1


def test_input_without_batch_is_shared(rng):
    scale = helper.make_tensor_value_info("scale", TensorProto.FLOAT, [])
    model = with_head(lstm(rng), [helper.make_node("Mul", ["Y", "scale"], ["out"])], extra_inputs=[scale])
    lay = batch_layout(model, {**feeds(), "scale": np.array(2.0, np.float32)}, CARRIED)
    assert lay.batched and lay.inputs["scale"] is None and lay.outputs["out"] == 2


@pytest.mark.parametrize("nodes, inits, op, why", [
    ([helper.make_node("ReduceMean", ["Y"], ["out"], axes=[2])], (), "ReduceMean", "reduces over the batch axis"),
    ([helper.make_node("Softmax", ["Y"], ["out"], axis=2)], (), "Softmax", "normalizes along the batch axis"),
    ([helper.make_node("Transpose", ["Y"], ["bt"], perm=[2, 0, 1, 3]), helper.make_node("Reshape", ["bt", "fixed"], ["out"])],
     [("fixed", np.array([1, T * H], np.int64))], "Reshape", "the batch size is written into the model"),
    ([helper.make_node("Squeeze", ["Y", "ax1"], ["y3"]), helper.make_node("Reshape", ["y3", "flat"], ["out"])],
     [("ax1", np.array([1], np.int64)), ("flat", np.array([-1, H], np.int64))], "Reshape", "interleaved"),
    ([helper.make_node("Shape", ["Y"], ["s"]), helper.make_node("Gather", ["s", "two"], ["b"]),
      helper.make_node("Cast", ["b"], ["bf"], to=TensorProto.FLOAT), helper.make_node("Add", ["Y", "bf"], ["out"])],
     [("two", np.array(2, np.int64))], "Add", "computes data from the batch size"),
])
def test_refusals_name_the_op(rng, nodes, inits, op, why):
    lay = batch_layout(with_head(lstm(rng), nodes, inits=inits), feeds(), CARRIED)
    assert not lay.batched
    assert any(r.startswith(f"{op} node") and why in r for r in lay.reasons), lay.reasons


def test_branch_on_the_batch_size_is_refused(rng):
    then = helper.make_graph([helper.make_node("Identity", ["Y"], ["a"])], "then", [],
                             [helper.make_tensor_value_info("a", TensorProto.FLOAT, None)])
    other = helper.make_graph([helper.make_node("Neg", ["Y"], ["b"])], "else", [],
                              [helper.make_tensor_value_info("b", TensorProto.FLOAT, None)])
    nodes = [helper.make_node("Shape", ["X"], ["s"]), helper.make_node("Gather", ["s", "one"], ["b1"]),
             helper.make_node("Equal", ["b1", "one"], ["is1"]),
             helper.make_node("If", ["is1"], ["out"], then_branch=then, else_branch=other)]
    lay = batch_layout(with_head(lstm(rng), nodes, inits=[("one", np.array(1, np.int64))]), feeds(), CARRIED)
    assert any(r.startswith("If node") and "branches on the batch size" in r for r in lay.reasons), lay.reasons


def test_branch_on_a_shape_that_is_not_the_batch_walks_the_taken_branch(rng):
    """silero-vad's pattern: `if x.shape[-1] == 1: squeeze`, decided by the chunk's shape."""
    then = helper.make_graph([helper.make_node("Squeeze", ["Y", "ax1"], ["a"])], "then", [],
                             [helper.make_tensor_value_info("a", TensorProto.FLOAT, None)])
    other = helper.make_graph([helper.make_node("ReduceSum", ["Y"], ["b"], axes=[2])], "else", [],
                              [helper.make_tensor_value_info("b", TensorProto.FLOAT, None)])
    nodes = [helper.make_node("Shape", ["Y"], ["s"]), helper.make_node("Gather", ["s", "one"], ["d1"]),
             helper.make_node("Equal", ["d1", "one"], ["is1"]),
             helper.make_node("If", ["is1"], ["out"], then_branch=then, else_branch=other)]
    model = with_head(lstm(rng), nodes, inits=[("one", np.array(1, np.int64)), ("ax1", np.array([1], np.int64))])
    lay = batch_layout(model, feeds(), CARRIED)
    assert lay.batched, lay.describe()
    assert lay.outputs["out"] == 1  # [T, B, H] after the squeeze


def test_reshape_through_the_batch_size_round_trips(rng):
    """tf2onnx's Tensordot (the g2p-id decoder): [B, T, H] -> [-1, H] @ W -> [shape[0], shape[1], O]."""
    nodes = [helper.make_node("Squeeze", ["Y", "ax2"], ["bth"]), helper.make_node("Reshape", ["bth", "flat"], ["rows"]),
             helper.make_node("MatMul", ["rows", "W"], ["prod"]), helper.make_node("Shape", ["bth"], ["s"]),
             helper.make_node("Gather", ["s", "lead"], ["bt"]), helper.make_node("Concat", ["bt", "o"], ["back"], axis=0),
             helper.make_node("Reshape", ["prod", "back"], ["out"])]
    inits = [("ax2", np.array([2], np.int64)), ("flat", np.array([-1, H], np.int64)),
             ("W", rng.standard_normal((H, 5)).astype(np.float32)), ("lead", np.array([0, 1], np.int64)),
             ("o", np.array([5], np.int64))]
    model = with_head(lstm(rng, layout=1), nodes, inits=inits)
    lay = batch_layout(model, feeds(1), CARRIED)
    assert lay.batched, lay.describe()
    assert lay.outputs["out"] == 0 and lay.rows["out"] == 1
    # and the claim holds: a batch of 3 equals its rows run alone
    sess = InferenceSession(model.SerializeToString())
    x = rng.standard_normal((3, T, I)).astype(np.float32)
    h = rng.standard_normal((3, 1, H)).astype(np.float32)
    together = sess.run(["out"], {"X": x, "initial_h": h, "initial_c": h})[0]
    for k in range(3):
        alone = sess.run(["out"], {"X": x[k:k + 1], "initial_h": h[k:k + 1], "initial_c": h[k:k + 1]})[0]
        np.testing.assert_allclose(together[k:k + 1], alone, rtol=1e-5, atol=1e-6)


def test_a_merged_output_splits_by_rows(rng):
    """[B, T, H] -> [-1, H] as an output: one stream owns T consecutive rows."""
    nodes = [helper.make_node("Squeeze", ["Y", "ax2"], ["bth"]), helper.make_node("Reshape", ["bth", "flat"], ["out"])]
    model = with_head(lstm(rng, layout=1), nodes, inits=[("ax2", np.array([2], np.int64)),
                                                          ("flat", np.array([-1, H], np.int64))])
    lay = batch_layout(model, feeds(1), CARRIED)
    assert lay.batched and lay.outputs["out"] == 0 and lay.rows["out"] == T


def test_declared_batch_of_one_is_a_reason(rng):
    model = lstm(rng)
    model.graph.input[0].type.tensor_type.shape.dim[1].dim_value = 1
    lay = batch_layout(model, feeds(), CARRIED)
    assert any("declares a fixed batch of 1" in r and "--batchify" in r for r in lay.reasons), lay.reasons


def test_carried_input_without_a_unit_axis(rng):
    f = feeds()
    f["initial_h"] = np.zeros((1, 2, H), np.float32)
    lay = batch_layout(lstm(rng), f, CARRIED)
    assert not lay.batched and any("initial_h" in r for r in lay.reasons), lay.reasons
