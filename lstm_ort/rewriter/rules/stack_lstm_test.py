"""stack_lstm: layers chained by export glue become one multi-layer FusedLSTM, outputs equal."""

import numpy as np
import onnx
import pytest

from lstm_ort.builders import LstmSpec, looped_cell_model, random_layers, stock_model
from lstm_ort.chain_builders import cell_chain_model
from lstm_ort.rewriter import Report, optimize
from lstm_ort.testing import make_feeds, max_abs, run, run_reference


@pytest.mark.parametrize("layout", [0, 1])
@pytest.mark.parametrize("direction", ["forward", "bidirectional"])
@pytest.mark.parametrize("initial_states", [False, True])
@pytest.mark.parametrize("L", [2, 3])
def test_stack_fused_into_one_node(layout, direction, initial_states, L):
    rng = np.random.default_rng(L)
    spec = LstmSpec(input_size=4, hidden_size=6, num_layers=L, direction=direction, layout=layout)
    layers = random_layers(spec, rng)
    model = stock_model(spec, layers, seq_lens=layout == 0, initial_states=initial_states)
    report = Report()
    out = optimize(model, report=report)
    fused = [n for n in out.graph.node if n.domain == "lstm_ort"]
    assert len(fused) == 1 and report.all_rewritten
    assert {a.name: a.i for a in fused[0].attribute if a.name == "num_layers"} == {"num_layers": L}
    assert [f.layers for f in report.findings] == [L]
    # the states hold exactly the stack's layers (their size on that axis declared): read whole, no Slice
    assert not [n for n in out.graph.node if n.op_type == "Slice"]
    feeds = make_feeds(spec, 5, 3, rng, seq_lens=layout == 0, initial_states=initial_states)
    kw = dict(seq_lens=layout == 0, initial_states=initial_states)
    # Stock's CPU LSTM refuses layout 1: compare with onnx.reference there.
    ref = run(model, feeds, fused=False) if layout == 0 else run_reference(spec, layers, feeds, **kw)
    assert max_abs(run(out, feeds), ref) <= 1e-5


def test_per_layer_state_uses_read_slices():
    """A consumer of one layer's Y_h still gets that layer's state from the fused node."""
    rng = np.random.default_rng(0)
    spec = LstmSpec(input_size=3, hidden_size=4, num_layers=2)
    model = stock_model(spec, random_layers(spec, rng), outputs=("Y",))
    from onnx import TensorProto, helper

    model.graph.output.append(helper.make_tensor_value_info("l0_Y_h", TensorProto.FLOAT, None))
    out = optimize(model)
    assert len([n for n in out.graph.node if n.domain == "lstm_ort"]) == 1
    feeds = make_feeds(spec, 5, 2, rng)
    assert max_abs(run(out, feeds), run(model, feeds, fused=False)) <= 1e-5


@pytest.mark.parametrize("layers_dim", ["L", None, 3, "declared in between"])
def test_states_not_known_to_hold_just_the_stack_are_sliced(layers_dim):
    """Where the states' layer axis is symbolic, unknown, holds more than the stack's layers, or is
    declared on a value between the input and the layers (an exporter's declaration, which nothing
    holds feeds to), the stack reads its layers through a Slice (one per state), outputs equal."""
    from onnx import TensorProto, helper

    rng = np.random.default_rng(4)
    spec = LstmSpec(input_size=3, hidden_size=4, num_layers=2)
    model = stock_model(spec, random_layers(spec, rng), initial_states=True)
    feeds = make_feeds(spec, 5, 2, rng, initial_states=True)
    for value in model.graph.input:
        if value.name in ("initial_h", "initial_c"):
            dim = value.type.tensor_type.shape.dim[0]
            if layers_dim == "declared in between":
                for node in model.graph.node:
                    node.input[:] = [f"{i}_copy" if i == value.name else i for i in node.input]
                model.graph.node.insert(0, helper.make_node("Abs", [value.name], [f"{value.name}_copy"]))
                model.graph.value_info.append(helper.make_tensor_value_info(f"{value.name}_copy", TensorProto.FLOAT,
                                                                            [2, "B", 4]))
            elif layers_dim is None:
                dim.Clear()
            elif isinstance(layers_dim, str):
                dim.dim_param = layers_dim
            else:  # a third layer's state rides along; the stack reads the first two
                dim.dim_value = layers_dim
                feeds[value.name] = np.concatenate([feeds[value.name], feeds[value.name][:1]], axis=0)
    out = optimize(model)
    assert len([n for n in out.graph.node if n.domain == "lstm_ort"]) == 1
    assert len([n for n in out.graph.node if n.op_type == "Slice"]) == 2
    assert max_abs(run(out, feeds), run(model, feeds, fused=False)) <= 1e-5


def test_different_attributes_are_not_fused():
    rng = np.random.default_rng(0)
    spec = LstmSpec(input_size=3, hidden_size=4, num_layers=2)
    model = stock_model(spec, random_layers(spec, rng))
    for node in model.graph.node:
        if node.name == "l1_lstm":
            from onnx import helper

            node.attribute.append(helper.make_attribute("clip", 5.0))
    out = optimize(model)
    assert len([n for n in out.graph.node if n.domain == "lstm_ort"]) == 2


def test_slices_before_opset_10_take_attributes():
    """Slice-1 (opsets < 10) has no starts/ends/axes inputs: the per-layer state slices use attributes."""
    from onnx import TensorProto, helper

    rng = np.random.default_rng(3)
    spec = LstmSpec(input_size=3, hidden_size=4, num_layers=2)
    model = stock_model(spec, random_layers(spec, rng), outputs=("Y",), opset=8)
    model.graph.output.append(helper.make_tensor_value_info("l0_Y_h", TensorProto.FLOAT, None))
    report = Report()
    out = optimize(model, report=report)
    assert report.all_rewritten and len([n for n in out.graph.node if n.domain == "lstm_ort"]) == 1
    (slice_node,) = [n for n in out.graph.node if n.op_type == "Slice"]
    assert len(slice_node.input) == 1 and {a.name for a in slice_node.attribute} == {"starts", "ends", "axes"}
    feeds = make_feeds(spec, 5, 2, rng)
    assert max_abs(run(out, feeds), run(model, feeds, fused=False)) <= 1e-5


# tests/test_rule_opsets.py runs the rule on these at every opset from the first one given to 21.
def _stack(opset, direction):
    spec = LstmSpec(input_size=5, hidden_size=6, num_layers=2, direction=direction)
    model = stock_model(spec, random_layers(spec, np.random.default_rng(opset)), initial_states=opset >= 10,
                        opset=opset)
    # Layer 0's own final state as an output too: the stack hands it out through a Slice.
    model.graph.output.append(onnx.helper.make_tensor_value_info("l0_Y_h", onnx.TensorProto.FLOAT,
                                                                 [spec.num_directions, "B", 6]))
    return model


OPSET_MODELS = {  # name: (builder(opset), first opset it can be written in)
    "stack forward": (lambda o: _stack(o, "forward"), 9),
    "stack bidirectional": (lambda o: _stack(o, "bidirectional"), 9),
    "reverse scans x2": (lambda o: looped_cell_model(5, 6, np.random.default_rng(o), loop="scan", reverse=True,
                                                     layers=2, opset=o), 9),
    "keras chains x2": (lambda o: cell_chain_model(5, 6, 4, np.random.default_rng(o), style="keras", layers=2,
                                                   opset=o), 9),
}
