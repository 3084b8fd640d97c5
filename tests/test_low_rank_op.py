"""FusedLSTM with factored weights (docs/ops.md, Factored weights) on the CPU: against the readable
contract (lstm_ort.ops.reference) and stock onnxruntime on the multiplied-out network, at full
rank against the unfactored op, and its refusals of inconsistent factors."""

import itertools

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from lstm_ort.builders import LstmSpec, fused_model, random_layers
from lstm_ort.ops.reference import FusedLSTM
from lstm_ort.testing import dense_layers, factored_layers, feature_spec, make_feeds, max_abs, run, run_stock

TOL = 1e-5


def contract(model, feeds):
    names = {i.name for i in model.graph.input}
    return ReferenceEvaluator(model, new_ops=[FusedLSTM]).run(None, {k: v for k, v in feeds.items() if k in names})


def mixed(layers, rng):
    """Factors on some parts only: each (layer, direction) part whole or factored at random."""
    out = factored_layers(layers, 3, 4)
    for layer in out:
        for part in ("W_factors", "R_factors"):
            kept = [f if rng.random() < 0.6 else None for f in getattr(layer, part)]
            setattr(layer, part, kept if any(f is not None for f in kept) else None)
    return out


# (direction, layout, seq_lens, initial_states, peepholes, non-default activations, which parts)
GRID = [(*c, parts) for c, parts in zip(itertools.product(("forward", "reverse", "bidirectional"), (0, 1), (False, True),
                                                          (False, True)), itertools.cycle(("both", "input",
                                                                                             "recurrent", "mixed")))]


@pytest.mark.parametrize("direction,layout,seq_lens,initial_states,parts", GRID)
def test_factored_kernel_is_the_contract(direction, layout, seq_lens, initial_states, parts, rng):
    spec = feature_spec(direction, layout, peepholes=seq_lens != initial_states, acts=layout == 1 and seq_lens,
                        input_size=7, hidden_size=9, num_layers=2)
    layers = random_layers(spec, rng)
    factored = {"both": lambda: factored_layers(layers, 3, 4), "input": lambda: factored_layers(layers, 5, 0),
                "recurrent": lambda: factored_layers(layers, 0, 2), "mixed": lambda: mixed(layers, rng)}[parts]()
    kw = dict(seq_lens=seq_lens, initial_states=initial_states)
    model = fused_model(spec, factored, **kw)
    assert any(n.name.startswith("rank_") for n in model.graph.node[0].attribute) or parts == "mixed"
    feeds = make_feeds(spec, 6, 4, rng, **kw)
    got = run(model, feeds)
    assert max_abs(got, contract(model, feeds)) <= TOL
    assert max_abs(got, run_stock(spec, dense_layers(factored), feeds, **kw)) <= TOL


@pytest.mark.parametrize("direction", ["forward", "bidirectional"])
@pytest.mark.parametrize("T,B,H,I,rank", [(5, 8, 512, 512, 128), (4, 64, 128, 96, 32), (3, 1, 256, 40, 64)])
def test_factored_sizes_and_thread_splits(direction, T, B, H, I, rank, rng):
    """Shapes whose steps are split over threads (B8 H512: panels per step; B64: batch rows) and a
    lone row; ranks that are not a whole number of panels."""
    spec = LstmSpec(input_size=I, hidden_size=H, direction=direction)
    factored = factored_layers(random_layers(spec, rng), min(rank, I) - 3, rank + 5)
    feeds = make_feeds(spec, T, B, rng, seq_lens=True, initial_states=True)
    kw = dict(seq_lens=True, initial_states=True)
    got = run(fused_model(spec, factored, **kw), feeds)
    assert max_abs(got, run_stock(spec, dense_layers(factored), feeds, **kw)) <= 2 * TOL


def test_directions_of_different_ranks(rng):
    """Each direction's h A lives in a region of its own even when their ranks pad to different
    widths (40 -> 64 columns, 5 -> 32), with both directions on threads of their own."""
    spec = LstmSpec(input_size=30, hidden_size=64, direction="bidirectional")
    layers = random_layers(spec, rng)
    factored = factored_layers(layers, 20, 40)
    factored[0].R_factors[1] = factored_layers(layers, 0, 5)[0].R_factors[1]
    factored[0].W_factors[0] = factored_layers(layers, 3, 0)[0].W_factors[0]
    feeds = make_feeds(spec, 80, 16, rng, seq_lens=True)  # many steps: directions that shared rows would race
    got = run(fused_model(spec, factored, seq_lens=True), feeds)
    assert max_abs(got, run_stock(spec, dense_layers(factored), feeds, seq_lens=True)) <= TOL


@pytest.mark.parametrize("direction", ["forward", "bidirectional"])
def test_full_rank_factors_are_the_unfactored_op(direction, rng):
    """Factors at full rank multiply out to the weights: the op matches the unfactored one to
    fp32 rounding."""
    spec = LstmSpec(input_size=24, hidden_size=16, num_layers=2, direction=direction)
    layers = random_layers(spec, rng)
    feeds = make_feeds(spec, 12, 5, rng, seq_lens=True, initial_states=True)
    kw = dict(seq_lens=True, initial_states=True)
    whole = run(fused_model(spec, layers, **kw), feeds)
    factored = run(fused_model(spec, factored_layers(layers, 10_000, 10_000), **kw), feeds)
    assert max_abs(factored, whole) <= TOL


def test_float16_storage(rng):
    spec = LstmSpec(input_size=10, hidden_size=12, direction="bidirectional")
    model = fused_model(spec, factored_layers(random_layers(spec, rng), 4, 5), np.float16)
    feeds = make_feeds(spec, 5, 3, rng, dtype=np.float16)
    got = run(model, feeds)
    assert all(o.dtype == np.float16 for o in got)
    assert max_abs(got, contract(model, feeds)) <= 2e-3


def test_factors_fed_at_run_time_are_packed_per_call(rng):
    """Factors that are a graph input (not an initializer) are read at every call."""
    spec = LstmSpec(input_size=6, hidden_size=8)
    model = fused_model(spec, factored_layers(random_layers(spec, rng), 2, 3))
    factors = next(i for i in model.graph.initializer if i.name == "factors_packed")
    model.graph.initializer.remove(factors)
    model.graph.input.append(helper.make_tensor_value_info("factors_packed", onnx.TensorProto.FLOAT, [factors.dims[0]]))
    feeds = make_feeds(spec, 4, 2, rng)
    values = numpy_helper.to_array(factors)
    for scale in (1.0, 0.5):
        fed = {**feeds, "factors_packed": (values * scale).astype(np.float32)}
        assert max_abs(run(model, fed), contract(model, fed)) <= TOL


def _factored_model(rng):
    spec = LstmSpec(input_size=6, hidden_size=8)
    return spec, fused_model(spec, factored_layers(random_layers(spec, rng), 2, 3))


def _attribute(model, name, value):
    node = model.graph.node[0]
    kept = [a for a in node.attribute if a.name != name]
    del node.attribute[:]
    node.attribute.extend([*kept, helper.make_attribute(name, value)] if value is not None else kept)


def test_missing_factors_are_refused(rng):
    spec, model = _factored_model(rng)
    node = model.graph.node[0]
    del node.input[7]
    with pytest.raises(Exception, match="input factors is required"):
        run(model, make_feeds(spec, 2, 1, rng))


def test_factors_without_ranks_are_refused(rng):
    spec, model = _factored_model(rng)
    _attribute(model, "rank_input", None)
    _attribute(model, "rank_recurrent", None)
    with pytest.raises(Exception, match="input factors is given, but no rank_input/rank_recurrent"):
        run(model, make_feeds(spec, 2, 1, rng))


def test_a_rank_beyond_its_matrix_is_refused(rng):
    spec, model = _factored_model(rng)
    _attribute(model, "rank_input", [7])  # I = 6
    with pytest.raises(Exception, match=r"rank_input\[0\] = 7 exceeds min\(I_l = 6, 4H = 32\)"):
        run(model, make_feeds(spec, 2, 1, rng))


def test_factors_of_the_wrong_size_are_refused(rng):
    spec, model = _factored_model(rng)
    _attribute(model, "rank_input", [1])  # the factors were made for rank 2
    with pytest.raises(Exception, match="input factors must be 1-D with"):
        run(model, make_feeds(spec, 2, 1, rng))


@pytest.mark.parametrize("bad", [[1, 2], [-1]])
def test_malformed_rank_lists_are_refused(bad, rng):
    spec, model = _factored_model(rng)
    _attribute(model, "rank_recurrent", bad)
    with pytest.raises(Exception, match="attribute rank_recurrent must hold 1 ranks >= 0"):
        run(model, make_feeds(spec, 2, 1, rng))
