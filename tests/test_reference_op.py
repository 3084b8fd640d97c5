"""lstm_ort.ops.reference.FusedLSTM (the readable contract, for onnx.reference) against stock
onnxruntime's LSTM on the attribute grid and on rewritten models. (Our CPU kernel against stock on
the same grid is tests/test_cpu_parity.py's test_features.)"""

import numpy as np
import pytest
from onnx.reference import ReferenceEvaluator

from lstm_ort.builders import LstmSpec, fused_model, random_layers, stock_model
from lstm_ort.ops.packing import pack_layers, unpack_layers
from lstm_ort.ops.reference import FusedLSTM
from lstm_ort.rewriter import optimize
from lstm_ort.testing import FEATURE_GRID, feature_spec, make_feeds, max_abs, run, run_stock

TOL = 1e-5


def run_contract(model, feeds):
    names = {i.name for i in model.graph.input}
    return ReferenceEvaluator(model, new_ops=[FusedLSTM]).run(None, {k: v for k, v in feeds.items() if k in names})


@pytest.mark.parametrize("direction,layout,seq_lens,initial_states,peepholes,clip,input_forget,acts", FEATURE_GRID)
def test_reference_matches_stock(direction, layout, seq_lens, initial_states, peepholes, clip, input_forget, acts, rng):
    L = 2 if (peepholes + input_forget + (clip is not None)) % 2 else 1
    spec = feature_spec(direction, layout, peepholes=peepholes, clip=clip, input_forget=input_forget, acts=acts,
                        input_size=3, hidden_size=5, num_layers=L)
    layers = random_layers(spec, rng)
    feeds = make_feeds(spec, 4, 3, rng, seq_lens=seq_lens, initial_states=initial_states)
    kw = dict(seq_lens=seq_lens, initial_states=initial_states)
    contract = run_contract(fused_model(spec, layers, **kw), feeds)
    assert max_abs(contract, run_stock(spec, layers, feeds, **kw)) <= TOL


def test_reference_runs_a_rewritten_stack(rng):
    spec = LstmSpec(input_size=4, hidden_size=6, num_layers=3, direction="bidirectional")
    original = stock_model(spec, random_layers(spec, rng), seq_lens=True, initial_states=True)
    optimized = optimize(original)
    assert [n.op_type for n in optimized.graph.node if n.domain == "lstm_ort"] == ["FusedLSTM"]
    feeds = make_feeds(spec, 5, 4, rng, seq_lens=True, initial_states=True)
    assert max_abs(run_contract(optimized, feeds), run(original, feeds, fused=False)) <= TOL


def test_fp16_storage(rng):
    spec = LstmSpec(input_size=3, hidden_size=4)
    layers = random_layers(spec, rng)
    feeds = make_feeds(spec, 5, 2, rng, dtype=np.float16)
    got = run_contract(fused_model(spec, layers, np.float16), feeds)
    assert all(o.dtype == np.float16 for o in got)
    assert max_abs(got, run_stock(spec, layers, feeds, np.float16)) <= 2e-3


def test_w_of_the_wrong_size_is_refused(rng):
    spec = LstmSpec(input_size=3, hidden_size=4)
    model = fused_model(spec, random_layers(spec, rng))
    feeds = make_feeds(LstmSpec(input_size=5, hidden_size=4), 2, 1, rng)  # I=5 against weights packed for I=3
    with pytest.raises(Exception, match="does not fit L=1 D=1 I=5 H=4"):
        run_contract(model, feeds)


@pytest.mark.parametrize("L,direction,bias,peepholes", [(1, "forward", True, False), (3, "bidirectional", True, True),
                                                        (2, "reverse", False, True)])
def test_unpack_inverts_pack(L, direction, bias, peepholes, rng):
    spec = LstmSpec(input_size=7, hidden_size=5, num_layers=L, direction=direction, bias=bias, peepholes=peepholes)
    layers = random_layers(spec, rng)
    packed = pack_layers(layers)
    back = unpack_layers(packed, L, spec.num_directions, 7, 5)
    for a, b in zip(layers, back):
        np.testing.assert_array_equal(a.W, b.W)
        np.testing.assert_array_equal(a.R, b.R)
        if bias:  # packing keeps Wb + Rb only
            np.testing.assert_allclose(a.B[:, :20] + a.B[:, 20:], b.B[:, :20] + b.B[:, 20:], rtol=1e-6)
        assert (a.P is None) == (b.P is None) and (a.P is None or np.array_equal(a.P, b.P))
    repacked = pack_layers(back)
    np.testing.assert_array_equal(repacked.W, packed.W)


@pytest.mark.parametrize("direction", ["forward", "bidirectional"])
@pytest.mark.parametrize("seq_lens", [False, True])
def test_int8_row_scales_match_the_kernel(direction, seq_lens, rng):
    """int8_scales="row": each row of the input at each step, and each row's h, with its own scale
    (docs/ops.md, per-row scales): the contract and the CPU kernel agree to rounding."""
    from lstm_ort.builders import random_int8_layers
    from lstm_ort.runtime.nodes import set_attribute

    spec = LstmSpec(input_size=5, hidden_size=6, num_layers=2, direction=direction)
    model = fused_model(spec, random_int8_layers(spec, rng), seq_lens=seq_lens, initial_states=True)
    for node in model.graph.node:
        if node.op_type == "FusedLSTM":
            set_attribute(node, "int8_scales", "row")
    feeds = make_feeds(spec, 4, 5, rng, seq_lens=seq_lens, initial_states=True)
    assert max_abs(run_contract(model, feeds), run(model, feeds)) <= 1e-5
