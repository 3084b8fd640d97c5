"""Every rule at every default-domain opset from 9 to 21: the nodes a rule writes around its
FusedLSTM (Squeeze, Unsqueeze, Slice, Gather, Transpose, Reshape, Concat) must be valid in the
model's own opset (axes are attributes before 13, Slice bounds before 10). The rewritten model
passes the full onnx checker and gives the original's outputs on stock onnxruntime."""

import numpy as np
import onnx
import pytest

from lstm_ort.builders import LstmSpec, looped_cell_model, random_layers, stock_model, unrolled_cell_model
from lstm_ort.chain_builders import cell_chain_model
from lstm_ort.rewriter import Report, optimize
from lstm_ort.testing import max_abs, run
from lstm_ort.verify import random_feeds

OPSETS = list(range(9, 22))


def _stack(opset, direction):
    spec = LstmSpec(input_size=5, hidden_size=6, num_layers=2, direction=direction)
    model = stock_model(spec, random_layers(spec, np.random.default_rng(opset)), initial_states=opset >= 10,
                        opset=opset)
    # Layer 0's own final state as an output too: the stack hands it out through a Slice.
    model.graph.output.append(onnx.helper.make_tensor_value_info("l0_Y_h", onnx.TensorProto.FLOAT,
                                                                 [spec.num_directions, "B", 6]))
    return model


MODELS = {  # name: (rule the model exercises, builder(opset), first opset it can be written in)
    "single_lstm": ("single_lstm", lambda o: stock_model(
        LstmSpec(input_size=5, hidden_size=6), random_layers(LstmSpec(input_size=5, hidden_size=6),
                                                              np.random.default_rng(o)), opset=o), 9),
    "stack forward": ("stack_lstm", lambda o: _stack(o, "forward"), 9),
    "stack bidirectional": ("stack_lstm", lambda o: _stack(o, "bidirectional"), 9),
    "scan": ("cell_loop", lambda o: looped_cell_model(5, 6, np.random.default_rng(o), loop="scan", opset=o), 9),
    "reverse scans x2": ("stack_lstm", lambda o: looped_cell_model(5, 6, np.random.default_rng(o), loop="scan",
                                                                   reverse=True, layers=2, opset=o), 9),
    "loop": ("cell_loop", lambda o: looped_cell_model(5, 6, np.random.default_rng(o), loop="loop", form="concat",
                                                      opset=o), 11),  # Loop's Gather of the iteration: opset 11
    "streaming cell": ("unrolled_cell", lambda o: unrolled_cell_model(5, 6, np.random.default_rng(o), opset=o), 9),
    "torch chain": ("cell_chain", lambda o: cell_chain_model(5, 6, 4, np.random.default_rng(o), opset=o,
                                                             final_states=True), 9),
    "torch flipped chain": ("cell_chain", lambda o: cell_chain_model(5, 6, 4, np.random.default_rng(o),
                                                                     direction="flip", opset=o), 10),
    "torch bidirectional chains x2": ("bidirectional_pair", lambda o: cell_chain_model(
        5, 6, 4, np.random.default_rng(o), direction="bidirectional", layers=2, opset=o), 9),
    "keras chains x2": ("stack_lstm", lambda o: cell_chain_model(5, 6, 4, np.random.default_rng(o), style="keras",
                                                                 layers=2, opset=o), 9),
    "keras hard sigmoid": ("cell_chain", lambda o: cell_chain_model(
        5, 6, 4, np.random.default_rng(o), style="keras", gate_activation="keras3_hard_sigmoid", opset=o), 9),
}
CASES = [(name, opset) for name, (_, _, first) in MODELS.items() for opset in OPSETS if opset >= first]


@pytest.mark.parametrize("name,opset", CASES, ids=[f"{n}-opset{o}" for n, o in CASES])
def test_rule_writes_nodes_of_the_model_opset(name, opset):
    rule, build, _ = MODELS[name]
    model = build(opset)
    onnx.checker.check_model(model, full_check=True)  # the input is valid at this opset
    report = Report()
    out = optimize(model, report=report)
    assert report.all_rewritten and report.rules[rule].hits >= 1, report.table()
    assert [o.version for o in out.opset_import if o.domain in ("", "ai.onnx")] == [opset]
    onnx.checker.check_model(out, full_check=True)
    feeds = random_feeds(model, np.random.default_rng(opset))
    assert max_abs(run(out, feeds), run(model, feeds, fused=False)) <= 1e-5
