"""FusedLSTM's `precision` attribute (docs/ops.md, "Precision modes") on the Python side of a
session: the lstm_ort.precision session option and InferenceSession's `precision` keyword reach
every FusedLSTM node, subgraphs included; the CPU kernel and the reference op take every mode and
compute fp32; bad values are refused with the allowed ones named."""

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

from lstm_ort.builders import LstmSpec, fused_model, random_layers
from lstm_ort.ops.identity import PRECISIONS
from lstm_ort.ops.reference import FusedLSTM
from lstm_ort.runtime.nodes import fused_nodes, node_precision
from lstm_ort.runtime.session import PRECISION_KEY, STRATEGY_KEY, InferenceSession, with_attributes, with_precision
from lstm_ort.testing import CPU, make_feeds, max_abs, run_fused

SPEC = LstmSpec(input_size=3, hidden_size=4)


def precisions_in(model_bytes: bytes) -> list[str]:
    return [node_precision(n) for n in fused_nodes(onnx.load_from_string(model_bytes))]


def model_with_subgraphs(layers, node_precision_value: str | None = None) -> onnx.ModelProto:
    """Three FusedLSTM nodes on the same weights: one in the main graph and one in each branch of
    an If, which returns that branch's Y_h; outputs: the main node's Y_h and the If's."""
    plain = fused_model(SPEC, layers)
    [template] = plain.graph.node
    attrs = {} if node_precision_value is None else {"precision": node_precision_value}

    def fused(name: str, y_h: str) -> onnx.NodeProto:
        node = onnx.NodeProto()
        node.CopyFrom(template)
        node.name = name
        del node.output[:]
        node.output.extend(["", y_h])
        node.attribute.extend(helper.make_attribute(k, v) for k, v in attrs.items())
        return node

    def branch(name: str) -> onnx.GraphProto:
        out = helper.make_tensor_value_info(f"{name}_Y_h", TensorProto.FLOAT, None)
        return helper.make_graph([fused(f"{name}_fused", f"{name}_Y_h")], name, [], [out])

    graph = plain.graph
    del graph.node[:]
    del graph.output[:]
    graph.input.append(helper.make_tensor_value_info("cond", TensorProto.BOOL, []))
    graph.node.extend([fused("main_fused", "main_Y_h"),
                       helper.make_node("If", ["cond"], ["if_Y_h"], then_branch=branch("then"),
                                        else_branch=branch("else"))])
    graph.output.extend([helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in ("main_Y_h", "if_Y_h")])
    return plain


def feeds_with(cond: bool, rng) -> dict:
    return {**make_feeds(SPEC, 5, 2, rng), "cond": np.array(cond)}


# --- the option reaches every node ----------------------------------------------------------------

@pytest.mark.parametrize("precision", PRECISIONS)
def test_option_sets_every_node_subgraphs_included(precision, rng):
    model = model_with_subgraphs(random_layers(SPEC, rng))
    assert precisions_in(model.SerializeToString()) == ["fp32"] * 3  # absent: fp32
    assert precisions_in(with_precision(model.SerializeToString(), precision)) == [precision] * 3


def test_option_replaces_an_existing_attribute_and_keeps_the_strategy(rng):
    once = with_attributes(fused_model(SPEC, random_layers(SPEC, rng)).SerializeToString(),
                           {"precision": "fp16", "strategy": "tiled"})
    twice = onnx.load_from_string(with_precision(once, "bf16"))
    [node] = twice.graph.node
    attrs = {a.name: onnx.helper.get_attribute_value(a).decode() for a in node.attribute if a.type == a.STRING}
    assert attrs["precision"] == "bf16" and attrs["strategy"] == "tiled"
    assert [a.name for a in node.attribute].count("precision") == 1


@pytest.mark.parametrize("how", ["keyword", "session config entry"])
def test_session_applies_the_precision_to_subgraph_nodes(how, rng):
    # Every node carries a precision the kernel refuses: the session runs only if it replaced the
    # attribute on all three, the If's branches included.
    layers = random_layers(SPEC, rng)
    model = model_with_subgraphs(layers, node_precision_value="fp64")
    with pytest.raises(Exception, match="attribute precision must be fp32, tf32, fp16, bf16 or auto, got 'fp64'"):
        InferenceSession(model, providers=CPU).run(None, feeds_with(True, rng))
    options = ort.SessionOptions()
    if how == "keyword":
        sess = InferenceSession(model, options, providers=CPU, precision="tf32")
    else:
        options.add_session_config_entry(PRECISION_KEY, "tf32")
        sess = InferenceSession(model, options, providers=CPU)
    plain = InferenceSession(model_with_subgraphs(layers), providers=CPU)
    for branch in (True, False):
        feeds = feeds_with(branch, rng)
        got = sess.run(None, feeds)
        assert len(got) == 2 and max_abs(got, plain.run(None, feeds)) == 0.0


def test_keyword_sets_the_config_entry(rng):
    model = fused_model(SPEC, random_layers(SPEC, rng))
    options = ort.SessionOptions()
    InferenceSession(model, options, providers=CPU, precision="bf16")
    assert options.get_session_config_entry(PRECISION_KEY) == "bf16"
    options.add_session_config_entry(STRATEGY_KEY, "wavefront")  # both options together
    InferenceSession(model, options, providers=CPU, precision="fp16")
    assert options.get_session_config_entry(PRECISION_KEY) == "fp16"  # the keyword wins over an earlier entry


def test_keyword_without_session_options(rng):
    layers = random_layers(SPEC, rng)
    feeds = make_feeds(SPEC, 6, 3, rng)
    got = InferenceSession(fused_model(SPEC, layers), providers=CPU, precision="fp16").run(None, feeds)
    assert max_abs(got, run_fused(SPEC, layers, feeds)) == 0.0


# --- the CPU kernel computes fp32 in every mode but bf16 ---------------------------------------------

@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("precision", [p for p in PRECISIONS if p != "bf16"])
def test_cpu_kernel_gives_the_same_outputs_in_every_mode(precision, dtype, rng):
    spec = LstmSpec(input_size=5, hidden_size=8, num_layers=2, direction="bidirectional")
    layers = random_layers(spec, rng)
    feeds = make_feeds(spec, 7, 3, rng, dtype=dtype, seq_lens=True, initial_states=True)
    kw = dict(seq_lens=True, initial_states=True)
    default = run_fused(spec, layers, feeds, dtype, **kw)
    got = run_fused(spec, layers, feeds, dtype, precision=precision, **kw)
    assert all(o.dtype == dtype for o in got)
    assert max_abs(got, default) == 0.0


# --- bad values ------------------------------------------------------------------------------------

def test_bad_keyword_is_refused_before_anything_changes(rng):
    options = ort.SessionOptions()
    with pytest.raises(ValueError, match="precision must be one of fp32, tf32, fp16, bf16, auto, got 'FP16'"):
        InferenceSession(fused_model(SPEC, random_layers(SPEC, rng)), options, providers=CPU, precision="FP16")
    with pytest.raises(Exception):  # noqa: B017 - onnxruntime raises when the key is absent
        options.get_session_config_entry(PRECISION_KEY)


def test_bad_config_entry_names_the_key_and_the_values(rng):
    options = ort.SessionOptions()
    options.add_session_config_entry(PRECISION_KEY, "half")
    with pytest.raises(ValueError, match="lstm_ort.precision must be one of fp32, tf32, fp16, bf16, auto, got 'half'"):
        InferenceSession(fused_model(SPEC, random_layers(SPEC, rng)), options, providers=CPU)


def test_with_precision_refuses_a_bad_value(rng):
    with pytest.raises(ValueError, match="lstm_ort.precision must be one of"):
        with_precision(fused_model(SPEC, random_layers(SPEC, rng)).SerializeToString(), "int8")


# --- the reference op -------------------------------------------------------------------------------

def run_contract(model, feeds):
    return ReferenceEvaluator(model, new_ops=[FusedLSTM]).run(None, feeds)


def with_node_precision(model: onnx.ModelProto, value: str) -> onnx.ModelProto:
    model.graph.node[0].attribute.append(helper.make_attribute("precision", value))
    return model


@pytest.mark.parametrize("precision", PRECISIONS)
def test_reference_op_accepts_every_mode(precision, rng):
    layers = random_layers(SPEC, rng)
    feeds = make_feeds(SPEC, 4, 2, rng)
    plain = run_contract(fused_model(SPEC, layers), feeds)
    got = run_contract(with_node_precision(fused_model(SPEC, layers), precision), feeds)
    assert max_abs(got, plain) == 0.0


def test_reference_op_refuses_an_unknown_mode(rng):
    model = with_node_precision(fused_model(SPEC, random_layers(SPEC, rng)), "fp8")
    with pytest.raises(ValueError, match="attribute precision must be one of fp32, tf32, fp16, bf16, auto, got 'fp8'"):
        run_contract(model, make_feeds(SPEC, 4, 2, rng))


# --- one decision, both devices -------------------------------------------------------------------

def test_the_library_decides_what_each_mode_runs_on_each_device():
    """decide_precision is the op library's DecidePrecision (custom_ops/precision.h), the rule the
    kernels follow: on CUDA auto runs tf32 from B >= 256 (or H >= 1024 and B*H >= 16K) and on the
    stacks the tensor-core step takes (resident or not), every other mode as asked; on the CPU every
    mode runs fp32 but bf16, which runs bf16 or is refused."""
    from lstm_ort.runtime.native import PrecisionRefused, decide_precision

    assert decide_precision("cuda", "auto", 128, 255).runs == "fp32"
    assert decide_precision("cuda", "auto", 128, 256).runs == "tf32"
    assert decide_precision("cuda", "auto", 1024, 16).runs == "tf32"
    # ... and on the stacks the tensor-core step takes (the seed's L4 T100 H512 B64), not one layer of them.
    assert decide_precision("cuda", "auto", 512, 64, layers=4, steps=100).runs == "tf32"
    assert decide_precision("cuda", "auto", 512, 64, layers=4, directions=2, steps=100).runs == "fp32"
    assert decide_precision("cuda", "auto", 512, 64, steps=100).runs == "fp32"
    # ... and at one step of up to three layers from B*H = 12K (any batch from H = 768), not at two steps.
    assert decide_precision("cuda", "auto", 512, 24, steps=1).runs == "tf32"
    assert decide_precision("cuda", "auto", 512, 23, steps=1).runs == "fp32"
    assert decide_precision("cuda", "auto", 768, 1, steps=1).runs == "tf32"
    assert decide_precision("cuda", "auto", 767, 1, steps=1).runs == "fp32"
    assert decide_precision("cuda", "auto", 1024, 8, steps=1).runs == "tf32"
    assert decide_precision("cuda", "auto", 1024, 8, steps=2).runs == "fp32"
    assert decide_precision("cuda", "auto", 512, 64, layers=3, steps=1).runs == "tf32"  # stacks up to 3 layers
    assert decide_precision("cuda", "auto", 512, 9, layers=3, steps=1).runs == "tf32"  # 3 layers from B*H = 4.5K
    assert decide_precision("cuda", "auto", 512, 8, layers=3, steps=1).runs == "fp32"
    assert decide_precision("cuda", "auto", 512, 9, layers=2, steps=1).runs == "fp32"
    assert decide_precision("cuda", "auto", 512, 64, layers=4, steps=1).runs == "fp32"
    assert decide_precision("cuda", "auto", 512, 64, layers=2, directions=2, steps=1).runs == "fp32"
    # ... and those it takes where it runs resident (two layers from B 64 with B*H >= 24K), whatever the device.
    resident = decide_precision("cuda", "auto", 512, 64, layers=2, steps=100)
    assert resident.runs == "tf32" and "where its weights fit on chip" in resident.words
    assert decide_precision("cuda", "auto", 256, 64, layers=2, steps=100).runs == "fp32"
    assert decide_precision("cpu", "auto", 512, 64, layers=4, steps=100).runs == "fp32"
    with pytest.raises(ValueError, match="invalid sizes"):
        decide_precision("cuda", "auto", 512, 64, directions=3)
    for mode in ("fp32", "tf32", "fp16", "bf16"):
        assert decide_precision("cuda", mode, 8, 1).runs == mode
    for mode in ("fp32", "tf32", "fp16", "auto"):
        decision = decide_precision("cpu", mode, 2048, 512)
        assert decision.runs == "fp32" and decision.words.startswith("fp32")
    try:
        assert decide_precision("cpu", "bf16").runs == "bf16"
    except PrecisionRefused as e:
        assert "needs AVX512-BF16 or AMX-BF16" in str(e)
    with pytest.raises(ValueError, match="precision must be one of fp32, tf32, fp16, bf16, auto, got 'fp64'"):
        decide_precision("cpu", "fp64")
    with pytest.raises(ValueError, match="device must be cpu or cuda"):
        decide_precision("gpu", "fp32")


@pytest.mark.parametrize("hidden, layers, direction, precision, expected", [
    (512, 4, "forward", "auto", 32),          # the tensor-core step's stacks (resident): tf32 from B*H 16K
    (256, 2, "forward", "auto", 96),          # two layers (resident): from B 64 with B*H 24K
    (512, 4, "bidirectional", "auto", 256),   # not a stack it takes: the batch rule alone
    (128, 1, "forward", "auto", 256),
    (512, 1, "forward", "auto", 24),          # one layer: its one-step calls from B*H 12K (OneStepRunsAsTf32)
    (512, 3, "forward", "auto", 9),           # three layers: from B*H 4.5K
    (768, 1, "forward", "auto", 1),           # ... any batch from H 768
    (1024, 1, "forward", "auto", 1),
    (512, 1, "bidirectional", "auto", 256),   # not a one-step call it takes: the batch rule alone
    (512, 4, "forward", "fp32", 0),           # a node not in auto never changes class
])
def test_stream_padding_stays_below_the_batch_where_auto_turns_tf32(hidden, layers, direction, precision, expected):
    """The streams batcher pads calls only below the smallest batch at which a node's auto runs tf32
    on CUDA (at one step or any call length), so padding never moves a stream's result to another
    class."""
    from lstm_ort.serving.streams.batcher import _tf32_from

    spec = LstmSpec(input_size=8, hidden_size=hidden, num_layers=layers, direction=direction)
    model = fused_model(spec, random_layers(spec, np.random.default_rng(0)))
    for node in model.graph.node:
        node.attribute.append(helper.make_attribute("precision", precision))
    assert _tf32_from(model, 300) == expected
