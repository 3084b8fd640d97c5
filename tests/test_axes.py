"""The one axis analysis (lstm_ort/graph/axes.py): its handlers, and where the two tables it
replaced (the batcher's exactness walk and the pipeline's partitioner) disagreed, which side was
right, shown by running the models."""

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from lstm_ort.builders import LstmSpec, fused_model, random_layers
from lstm_ort.graph.axes import PICKS_TIME, AxisWalk, Axes, input_axes, squeezed, transposed, unsqueezed
from lstm_ort.graph.ragged import analyze
from lstm_ort.pipeline import PipelineSession
from lstm_ort.pipeline.fake import FakeBackend
from lstm_ort.serving import BucketingBatcher
from lstm_ort.testing import make_feeds, run


def test_axis_lists_move_as_onnx_moves_axes():
    assert transposed(["t", "b", "f"], [1, 0, 2]) == ["b", "t", "f"]
    assert transposed(["t", "b", "f"], None) == ["f", "b", "t"]
    assert squeezed(["t", 1, "b", 1], [-1, 1]) == ["t", "b"]
    assert unsqueezed(["t", "b"], [0, -1], 1) == [1, "t", "b", 1]
    x = Axes(3, 0, 1)
    assert x.roles() == ["time", "batch", None] and Axes.of_roles(x.roles()) == x


class _Flags(AxisWalk):
    def flag(self, node, why, kind=""):
        self.reasons.append((node.op_type, why, kind))


def _walk(nodes, inits=(), start=Axes(3, 0, 1), opset=17):
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, None)], [],
                              [numpy_helper.from_array(np.asarray(v), n) for n, v in inits])
    walk = _Flags(graph, opset, {"x": start})
    walk.walk(graph)
    return walk


@pytest.mark.parametrize("node, inits, out, flagged", [
    (helper.make_node("Transpose", ["x"], ["y"], perm=[1, 0, 2]), (), Axes(3, 1, 0), None),
    (helper.make_node("Unsqueeze", ["x", "a"], ["y"]), [("a", np.array([0], np.int64))], Axes(4, 1, 2), None),
    (helper.make_node("Softmax", ["x"], ["y"], axis=-1), (), Axes(3, 0, 1), None),
    (helper.make_node("Softmax", ["x"], ["y"], axis=1), (), Axes(3, 0, 1), "normalizes"),
    (helper.make_node("ReduceMean", ["x", "a"], ["y"], keepdims=0), [("a", np.array([2], np.int64))], Axes(2, 0, 1),
     None),
    (helper.make_node("ReduceMean", ["x", "a"], ["y"]), [("a", np.array([0], np.int64))], Axes(3, 0, 1), "reduces"),
    (helper.make_node("MatMul", ["x", "w"], ["y"]), [("w", np.ones((4, 2), np.float32))], Axes(3, 0, 1), None),
    (helper.make_node("Gather", ["x", "i"], ["y"], axis=0), [("i", np.array(-1, np.int64))], Axes(2, None, 0),
     "picks time"),
    (helper.make_node("Gather", ["x", "i"], ["y"], axis=1), [("i", np.array([0], np.int64))], Axes(3, 0, None),
     "picks batch"),
    (helper.make_node("Gather", ["e", "x"], ["y"]), [("e", np.ones((5, 4), np.float32))], Axes(3, 0, 1), None),
    (helper.make_node("Add", ["x", "c"], ["y"]), [("c", np.ones((2, 1, 1, 4), np.float32))], Axes(4, 1, 2), None),
    (helper.make_node("Add", ["x", "c"], ["y"]), [("c", np.ones((2, 1, 4), np.float32))], Axes(3, 0, 1), "varies"),
    (helper.make_node("Reshape", ["x", "s"], ["y"]), [("s", np.array([0, 0, 2, -1], np.int64))], Axes(4, 0, 1),
     None),
    (helper.make_node("Reshape", ["x", "s"], ["y"]), [("s", np.array([-1, 4], np.int64))], None, "reshapes"),
    (helper.make_node("Concat", ["x", "x"], ["y"], axis=2), (), Axes(3, 0, 1), None),
    (helper.make_node("Concat", ["x", "c"], ["y"], axis=2), [("c", np.ones((3, 2, 1), np.float32))], Axes(3, 0, 1),
     "fixed size"),
    (helper.make_node("Conv", ["x", "w"], ["y"]), [("w", np.ones((2, 4, 1), np.float32))], Axes(3, None, 0),
     "convolves"),
    (helper.make_node("Pad", ["x", "p"], ["y"]), [("p", np.array([0, 0, 0, 0, 0, 2], np.int64))], Axes(3, 0, 1),
     None),
    (helper.make_node("Pad", ["x", "p"], ["y"]), [("p", np.array([0, 0, 0, 1, 0, 0], np.int64))], Axes(3, 0, 1),
     "pads"),
    (helper.make_node("Shape", ["x"], ["y"]), (), None, "shape"),
])
def test_handlers(node, inits, out, flagged):
    start = Axes(3, 2, 0) if node.op_type == "Conv" else Axes(3, 0, 1)  # Conv: [B, C, T]
    if node.op_type == "Gather" and node.input[0] == "e":
        start = Axes(2, 0, 1)  # token ids [T, B]
    walk = _walk([node], inits, start)
    got = walk.values["y"]
    assert got == (out or got) and (out is not None or not got.known)
    reasons = " ".join(why for _, why, _ in walk.reasons)
    assert (flagged in reasons) if flagged else not reasons, walk.reasons


def test_slice_of_opset9_without_axes_cuts_every_axis_it_names():
    """Slice-1's axes attribute is optional (all axes from 0): the exactness walk read a missing one
    as bounds that are not constant; the pipeline's table read it right."""
    node = helper.make_node("Slice", ["x"], ["y"], starts=[0, 0, 1], ends=[2**62, 2**62, 3])
    walk = _walk([node], opset=9)
    assert walk.values["y"] == Axes(3, 0, 1) and not walk.reasons
    node = helper.make_node("Slice", ["x"], ["y"], starts=[-1], ends=[2**62])
    walk = _walk([node], opset=9)
    assert walk.values["y"] == Axes(3, None, 1) and [k for *_, k in walk.reasons] == [PICKS_TIME]


def test_inputs_axes_backwards_are_proved_forwards():
    """The pipeline walks back from its stack's X; each guess is checked by the forward handler."""
    graph = helper.make_graph([], "g", [], [], [numpy_helper.from_array(np.ones((5, 4), np.float32), "e")])
    walk = AxisWalk(graph, 17, {})
    embed = helper.make_node("Gather", ["e", "ids"], ["x"])
    assert input_axes(walk, embed, Axes(3, 1, 0)) == {"ids": Axes(2, 1, 0)}
    perm = helper.make_node("Transpose", ["a"], ["x"], perm=[1, 2, 0])
    assert input_axes(walk, perm, Axes(3, 0, 1)) == {"a": Axes(3, 1, 2)}
    squeeze = helper.make_node("Squeeze", ["a"], ["x"], axes=[1])
    assert input_axes(walk, squeeze, Axes(3, 0, 1)) == {"a": Axes(4, 0, 2)}
    assert "Reshape" in input_axes(walk, helper.make_node("Reshape", ["a", "e"], ["x"]), Axes(3, 0, 1))


# -- where the exactness walk and the pipeline's table disagreed -------------------------------

def _with_head(model: onnx.ModelProto, nodes, inits, output: str) -> onnx.ModelProto:
    g = model.graph
    g.node.extend(nodes)
    g.initializer.extend(numpy_helper.from_array(np.asarray(v), n) for n, v in inits)
    del g.output[:]
    g.output.append(helper.make_tensor_value_info(output, TensorProto.FLOAT, None))
    return model


def test_gemm_bias_that_varies_along_the_batch_is_flagged(rng):
    """The exactness walk took Gemm's C on trust; the pipeline's table checked it. A C with a row per
    batch entry runs at that batch only: such a model cannot be split per sequence."""
    spec = LstmSpec(input_size=3, hidden_size=4)
    model = _with_head(fused_model(spec, random_layers(spec, rng), seq_lens=True),
                       [helper.make_node("Squeeze", ["Y_h", "zero"], ["h"]),
                        helper.make_node("Gemm", ["h", "w", "c"], ["logits"], name="head")],
                       [("zero", np.array([0], np.int64)), ("w", np.ones((4, 2), np.float32)),
                        ("c", np.arange(6, dtype=np.float32).reshape(3, 2))], "logits")
    layout = analyze(model)
    assert any(r.startswith("Gemm node 'head' adds a constant that varies") for r in layout.reasons), layout.reasons
    feeds = make_feeds(spec, 5, 3, rng, seq_lens=True)
    assert run(model, feeds)[0].shape == (3, 2)  # runs at the export's batch
    with pytest.raises(Exception, match="Gemm"):
        run(model, make_feeds(spec, 5, 2, rng, seq_lens=True))  # and only there


def test_concat_with_a_constant_is_flagged(rng):
    """The exactness walk let Concat join a constant to the sequences; the pipeline's table refused
    it. The constant holds the export's T and B, so no other bucket runs."""
    spec = LstmSpec(input_size=3, hidden_size=4)
    model = _with_head(fused_model(spec, random_layers(spec, rng), seq_lens=True),
                       [helper.make_node("Squeeze", ["Y", "one"], ["y"]),
                        helper.make_node("Concat", ["y", "pos"], ["out"], axis=2, name="join")],
                       [("one", np.array([1], np.int64)), ("pos", np.zeros((5, 3, 2), np.float32))], "out")
    layout = analyze(model)
    assert any(r.startswith("Concat node 'join' concatenates a value without") for r in layout.reasons), layout.reasons
    assert run(model, make_feeds(spec, 5, 3, rng, seq_lens=True))[0].shape == (5, 3, 6)
    with pytest.raises(Exception, match="Concat"):
        run(model, make_feeds(spec, 4, 3, rng, seq_lens=True))


def test_pipeline_takes_the_per_step_ops_the_exactness_walk_knew(rng):
    """The pipeline's table refused ReduceMean, Where and constants of a higher rank, all of which
    act on each (time step, batch entry) on its own: split by micro-batches and time chunks, such a
    head gives what the unsplit model gives."""
    spec = LstmSpec(input_size=5, hidden_size=4, num_layers=2)
    model = _with_head(fused_model(spec, random_layers(spec, rng)),
                       [helper.make_node("ReduceMean", ["Y"], ["m"], axes=[-1], keepdims=1),
                        helper.make_node("Greater", ["m", "zero"], ["pos"]),
                        helper.make_node("Mul", ["m", "up"], ["m2"]),
                        helper.make_node("Where", ["pos", "m", "m2"], ["out"])],
                       [("zero", np.zeros((), np.float32)),
                        ("up", rng.standard_normal((2, 1, 1, 1, 1)).astype(np.float32))], "out")
    feeds = make_feeds(spec, 9, 6, rng)
    ref = run(model, feeds)
    sess = PipelineSession(model, devices=(0, 1), micro_batch=2, time_chunk=4, backend=FakeBackend())
    got = sess.run(None, feeds)
    assert got[0].shape == ref[0].shape == (2, 9, 1, 6, 1)
    np.testing.assert_allclose(got[0], ref[0], atol=1e-6)


def test_a_picked_time_step_has_no_time_axis(rng):
    """The pipeline's table dropped the time axis of a value whose time steps were picked; the
    exactness walk kept it there, so a batcher allowed to pad cut the picked step to each sequence's
    length. It has one step, whatever the lengths."""
    spec = LstmSpec(input_size=3, hidden_size=4)
    model = _with_head(fused_model(spec, random_layers(spec, rng)),
                       [helper.make_node("Slice", ["Y", "s", "e", "ax"], ["out"])],
                       [("s", np.array([-1], np.int64)), ("e", np.array([2**62], np.int64)),
                        ("ax", np.array([0], np.int64))], "out")
    layout = analyze(model)
    assert not layout.exact and layout.outputs["out"] == Axes(4, None, 2)
    seqs = [rng.standard_normal((n, 3)).astype(np.float32) for n in (4, 2, 5)]
    results = BucketingBatcher(model, buckets=[5], allow_padding=True).run(seqs)
    assert [r["out"].shape for r in results] == [(1, 1, 4)] * 3
