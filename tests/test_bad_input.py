"""Bad input to FusedLSTM gives an onnxruntime error with a clear message, never a crash."""

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from lstm_ort import InferenceSession
from lstm_ort.builders import IR_VERSION, LstmSpec, fused_model, random_layers
from lstm_ort.ops.identity import DOMAIN, OP_TYPE
from lstm_ort.testing import make_feeds, run

H, I = 4, 3


def model_with(inputs, inits, attrs=None, x_type=TensorProto.FLOAT, n_outputs=3):
    """A bare FusedLSTM model whose inputs are graph inputs (so any shape can be fed)."""
    attrs = {"hidden_size": H} if attrs is None else attrs
    outs = ["Y", "Y_h", "Y_c"][:n_outputs]
    node = helper.make_node(OP_TYPE, [n for n, _ in inputs], outs, domain=DOMAIN, **attrs)
    graph_inputs = [helper.make_tensor_value_info(n, t, None) for n, t in inputs if n and n not in inits]
    graph = helper.make_graph([node], "g", graph_inputs,
                              [helper.make_tensor_value_info(o, x_type, None) for o in outs],
                              [numpy_helper.from_array(v, k) for k, v in inits.items()])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(DOMAIN, 1)])
    m.ir_version = IR_VERSION
    return m


F, I32 = TensorProto.FLOAT, TensorProto.INT32
FULL = [("X", F), ("W", F), ("B", F), ("sequence_lens", I32), ("initial_h", F), ("initial_c", F)]


def good_feeds(T=5, B=2):
    rng = np.random.default_rng(0)
    return {"X": rng.standard_normal((T, B, I)).astype(np.float32),
            "W": rng.standard_normal((I + H) * 4 * H).astype(np.float32),
            "B": np.zeros(4 * H, np.float32),
            "sequence_lens": np.full(B, T, np.int32),
            "initial_h": np.zeros((1, B, H), np.float32),
            "initial_c": np.zeros((1, B, H), np.float32)}


def run_error(model, feeds):
    with pytest.raises(Exception) as info:
        InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, feeds)
    return str(info.value)


def test_good_feeds_run():
    y, y_h, y_c = InferenceSession(model_with(FULL, {}), providers=["CPUExecutionProvider"]).run(None, good_feeds())
    assert y.shape == (5, 1, 2, H) and y_h.shape == (1, 2, H)


@pytest.mark.parametrize("name,value,message", [
    ("X", np.zeros((5, 2), np.float32), "input X must have rank 3"),
    ("X", np.zeros((5, 2, 3, 1), np.float32), "input X must have rank 3"),
    ("X", np.zeros((5, 2, 7), np.float32), "input W must be 1-D with 176 elements for L=1, D=1, I=7, H=4"),  # I mismatch
    ("W", np.zeros((7, 16), np.float32), "input W must be 1-D"),
    ("W", np.zeros(10, np.float32), "input W must be 1-D with 112 elements"),
    ("B", np.zeros(15, np.float32), "input B must be 1-D with 16 elements"),
    ("initial_h", np.zeros((1, 3, H), np.float32), "initial_h must have shape [1, 2, 4]"),  # B mismatch
    ("initial_c", np.zeros((1, 2, H + 1), np.float32), "initial_c must have shape [1, 2, 4]"),  # H mismatch
    ("initial_h", np.zeros((2, H), np.float32), "initial_h must have shape"),
    ("sequence_lens", np.array([5, 6], np.int32), "sequence_lens[1] = 6 is outside [0, T=5]"),
    ("sequence_lens", np.array([-1, 2], np.int32), "sequence_lens[0] = -1 is outside [0, T=5]"),
    ("sequence_lens", np.array([5, 5, 5], np.int32), "sequence_lens must have shape [2]"),
])
def test_bad_shapes_and_values(name, value, message):
    feeds = good_feeds()
    feeds[name] = value
    assert message in run_error(model_with(FULL, {}), feeds)


@pytest.mark.parametrize("attrs,message", [
    ({}, "attribute hidden_size is required"),
    ({"hidden_size": 0}, "attribute hidden_size is required and must be > 0"),
    ({"hidden_size": H, "direction": "sideways"}, "direction must be forward, reverse or bidirectional"),
    ({"hidden_size": H, "layout": 2}, "layout must be 0 or 1"),
    ({"hidden_size": H, "num_layers": 0}, "num_layers must be > 0"),
    ({"hidden_size": H, "clip": -1.0}, "clip must be > 0"),
    ({"hidden_size": H, "activations": "Sigmoid,Tanh"}, "activations must name 3 functions"),
    ({"hidden_size": H, "activations": "Sigmoid,Swish,Tanh"}, "unknown activation 'Swish'"),
    ({"hidden_size": H, "strategy": "fastest"}, "strategy must be auto, tiled, splitk, persistent, wavefront or cluster"),
    ({"hidden_size": H, "precision": "fp64"}, "attribute precision must be fp32, tf32, fp16, bf16 or auto, got 'fp64'"),
    ({"hidden_size": H, "precision": "TF32"}, "attribute precision must be fp32, tf32, fp16, bf16 or auto, got 'TF32'"),
])
def test_bad_attributes(attrs, message):
    assert message in run_error(model_with(FULL, {}, attrs), good_feeds())


@pytest.mark.parametrize("name, value, message", [
    ("cpu_kernel", 3, "attribute cpu_kernel must be a string, got an int"),
    ("cpu_kernel", 1.5, "attribute cpu_kernel must be a string, got a float"),
    ("cpu_kernel", [1, 2], "attribute cpu_kernel must be a string, got a list of ints"),
    ("strategy", 2, "attribute strategy must be a string, got an int"),
    ("precision", [0.5], "attribute precision must be a string, got a list of floats"),
    ("debug", 1, "attribute debug must be a string, got an int"),
    ("direction", 1, "attribute direction must be a string, got an int"),
    ("layout", "0", "attribute layout must be an int, got a string"),
    ("num_layers", 1.0, "attribute num_layers must be an int, got a float"),
    ("clip", 3, "attribute clip must be a float, got an int"),
    ("clip", "3", "attribute clip must be a float, got a string"),
    ("activation_alpha", 0.5, "attribute activation_alpha must be a list of floats, got a float"),
    ("rank_input", 2, "attribute rank_input must be a list of ints, got an int"),
    ("rank_input", "2", "attribute rank_input must be a list of ints, got a string"),
], ids=lambda v: repr(v)[:24])
def test_an_attribute_of_another_type_is_an_error_naming_it(name, value, message):
    """Issue 45 row 7: once read as absent (an int cpu_kernel ran as auto, an int clip clipped nothing)."""
    assert message in run_error(model_with(FULL, {}, {"hidden_size": H, name: value}), good_feeds())


def test_hidden_size_of_another_type():
    assert "attribute hidden_size must be an int, got a string" in run_error(
        model_with(FULL, {}, {"hidden_size": str(H)}), good_feeds())


def test_wrong_dtype_x():
    feeds = good_feeds()
    feeds["X"] = feeds["X"].astype(np.float64)
    m = model_with([("X", TensorProto.DOUBLE), ("W", F)], {}, x_type=TensorProto.DOUBLE)
    assert "FusedLSTM" in run_error(m, {k: feeds[k] for k in ("X", "W")})


def test_mixed_dtypes():
    """float16 weights with float32 X are a type error at load time."""
    m = model_with([("X", F), ("W", TensorProto.FLOAT16)], {})
    feeds = good_feeds()
    message = run_error(m, {"X": feeds["X"], "W": feeds["W"].astype(np.float16)})
    assert "Type" in message and "FusedLSTM" in message


def test_wrong_dtype_sequence_lens():
    feeds = good_feeds()
    feeds["sequence_lens"] = feeds["sequence_lens"].astype(np.int64)
    m = model_with([("X", F), ("W", F), ("B", F), ("sequence_lens", TensorProto.INT64)], {})
    assert "sequence_lens" in run_error(m, {k: feeds[k] for k in ("X", "W", "B", "sequence_lens")})


def test_missing_required_input():
    message = run_error(model_with([("X", F)], {}), {"X": good_feeds()["X"]})
    assert "FusedLSTM" in message


def test_missing_required_input_as_empty_name():
    message = run_error(model_with([("X", F), ("", F)], {}), {"X": good_feeds()["X"]})
    assert "input W is required" in message or "FusedLSTM" in message


def test_valid_model_after_errors(rng):
    """An error in one session leaves the library usable in the next."""
    spec = LstmSpec(input_size=3, hidden_size=4)
    feeds = make_feeds(spec, 4, 2, rng)
    run_error(model_with(FULL, {}, {}), good_feeds())
    (y, y_h, y_c) = run(fused_model(spec, random_layers(spec, rng)), feeds)
    assert np.isfinite(y).all()
