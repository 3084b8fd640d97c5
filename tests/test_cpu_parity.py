"""FusedLSTM on the CPU against stock onnxruntime's LSTM and onnx.reference, on grids of shapes
and attributes. fp32 bound: 1e-5 max-abs on unit-scale inputs."""

import numpy as np
import pytest

from lstm_ort.builders import LstmSpec, random_layers
from lstm_ort.runtime.native import describe_cpu
from lstm_ort.runtime.nodes import NodeShape
from lstm_ort.testing import (DIRECTIONS, FEATURE_GRID, SHAPE_GRID, feature_spec, make_feeds, max_abs,
                              reference_applies, run_fused, run_reference, run_stock)

TOL = 1e-5


def check(spec, T, B, rng, *, seq_lens=False, initial_states=False, outputs=("Y", "Y_h", "Y_c")):
    layers = random_layers(spec, rng)
    feeds = make_feeds(spec, T, B, rng, seq_lens=seq_lens, initial_states=initial_states)
    kw = dict(seq_lens=seq_lens, initial_states=initial_states, outputs=outputs)
    got = run_fused(spec, layers, feeds, **kw)
    stock = run_stock(spec, layers, feeds, **kw)
    assert max_abs(got, stock) <= TOL, f"vs stock onnxruntime: {max_abs(got, stock)}"
    if reference_applies(spec, seq_lens):
        ref = run_reference(spec, layers, feeds, **kw)
        assert max_abs(got, ref) <= TOL, f"vs onnx.reference: {max_abs(got, ref)}"
    return got


@pytest.mark.parametrize("direction,layout,T,B,H,L", SHAPE_GRID)
def test_shapes(direction, layout, T, B, H, L, rng):
    # Odd T*B*H cases also carry lengths and initial states, so both halves of the grid see them.
    extras = (T + B + H) % 2 == 1
    spec = LstmSpec(input_size=5, hidden_size=H, num_layers=L, direction=direction, layout=layout)
    check(spec, T, B, rng, seq_lens=extras, initial_states=extras)


@pytest.mark.parametrize("direction,layout,seq_lens,initial_states,peepholes,clip,input_forget,acts", FEATURE_GRID)
def test_features(direction, layout, seq_lens, initial_states, peepholes, clip, input_forget, acts, rng):
    L = 3 if (peepholes + input_forget + (clip is not None)) % 2 else 1
    spec = feature_spec(direction, layout, peepholes=peepholes, clip=clip, input_forget=input_forget, acts=acts,
                        input_size=6, hidden_size=17, num_layers=L)
    check(spec, 7, 3, rng, seq_lens=seq_lens, initial_states=initial_states)


ALL_ACTIVATIONS = [("Relu", None, None), ("Tanh", None, None), ("Sigmoid", None, None), ("Affine", 0.7, 0.2),
                   ("LeakyRelu", 0.2, None), ("ThresholdedRelu", 0.1, None), ("ScaledTanh", 0.9, 1.3),
                   ("HardSigmoid", 0.25, 0.45), ("Elu", 0.8, None), ("Softsign", None, None), ("Softplus", None, None)]


@pytest.mark.parametrize("slot", [0, 1, 2])
@pytest.mark.parametrize("name,alpha,beta", ALL_ACTIVATIONS)
def test_each_activation(name, alpha, beta, slot, rng):
    acts = ["Sigmoid", "Tanh", "Tanh"]
    acts[slot] = name
    spec = LstmSpec(input_size=4, hidden_size=9, activations=acts, clip=3.0,  # clip keeps Relu/Affine bounded
                    activation_alpha=[alpha] if alpha is not None else None,
                    activation_beta=[beta] if beta is not None else None)
    check(spec, 5, 2, rng)


def test_default_alpha_beta_follow_stock(rng):
    # No alpha/beta given: LeakyRelu 0.01, HardSigmoid (0.2, 0.5), Elu 1.0, as stock applies them.
    spec = LstmSpec(input_size=4, hidden_size=9, activations=["HardSigmoid", "Elu", "LeakyRelu"])
    check(spec, 6, 2, rng)


@pytest.mark.parametrize("direction", DIRECTIONS)
@pytest.mark.parametrize("layout", [0, 1])
def test_zero_and_full_lengths(direction, layout, rng):
    """Length 0 gives zero Y and zero final states (stock's behaviour), full length matches."""
    spec = LstmSpec(input_size=3, hidden_size=8, num_layers=2, direction=direction, layout=layout)
    layers = random_layers(spec, rng)
    feeds = make_feeds(spec, 5, 4, rng, seq_lens=True, initial_states=True)
    feeds["sequence_lens"] = np.array([5, 0, 2, 1], np.int32)
    kw = dict(seq_lens=True, initial_states=True)
    got = run_fused(spec, layers, feeds, **kw)
    assert max_abs(got, run_stock(spec, layers, feeds, **kw)) <= TOL
    y, y_h, y_c = got
    b_axis = 2 if layout == 0 else 0
    assert not np.take(y, 1, axis=b_axis).any()
    assert not np.take(y_h, 1, axis=1 if layout == 0 else 0).any()


@pytest.mark.parametrize("direction", DIRECTIONS)
@pytest.mark.parametrize("layout", [0, 1])
def test_steps_that_multiply_their_input(direction, layout, rng):
    """Groups of 4 rows or more (kMinRowsToMultiplyInputInSteps) multiply their rows' input in every
    step, each row at its own time: a reversed sequence of its own length gathers its rows."""
    D = 2 if direction == "bidirectional" else 1
    spec = LstmSpec(input_size=29, hidden_size=40, num_layers=2, direction=direction, layout=layout)
    # Layer 0 at least: a projection on more threads than the steps run on stays apart (on two
    # cores, layer 1 of one direction).
    plan = describe_cpu(NodeShape(2, D, 29, 40, "float32"), 9, 8)
    assert "layer 0: input multiplied in the step" in plan, plan
    layers = random_layers(spec, rng)
    feeds = make_feeds(spec, 9, 8, rng, seq_lens=True, initial_states=True)
    feeds["sequence_lens"] = np.array([9, 0, 3, 1, 7, 9, 2, 5], np.int32)
    kw = dict(seq_lens=True, initial_states=True)
    got = run_fused(spec, layers, feeds, **kw)
    assert max_abs(got, run_stock(spec, layers, feeds, **kw)) <= TOL


@pytest.mark.parametrize("outputs", [("Y",), ("Y_h",), ("Y_c",), ("Y_h", "Y_c"), ("Y", "Y_c")])
def test_optional_outputs(outputs, rng):
    spec = LstmSpec(input_size=4, hidden_size=6, num_layers=2, direction="bidirectional")
    check(spec, 5, 3, rng, outputs=outputs)


@pytest.mark.parametrize("direction", DIRECTIONS)
@pytest.mark.parametrize("L,T,B,H", [(1, 7, 3, 17), (3, 20, 8, 64), (2, 100, 64, 128)])
def test_float16_against_float32(direction, L, T, B, H, rng):
    """fp16 storage, fp32 math: within 5e-3 max-abs of the fp32 network on the same (fp16-rounded) values."""
    spec = LstmSpec(input_size=8, hidden_size=H, num_layers=L, direction=direction, peepholes=True)
    layers = random_layers(spec, rng)
    for lw in layers:  # the fp32 reference sees exactly the fp16 weights
        for name in ("W", "R", "B", "P"):
            setattr(lw, name, getattr(lw, name).astype(np.float16).astype(np.float32))
    feeds16 = make_feeds(spec, T, B, rng, np.float16, seq_lens=True, initial_states=True)
    feeds32 = {k: (v.astype(np.float32) if v.dtype == np.float16 else v) for k, v in feeds16.items()}
    kw = dict(seq_lens=True, initial_states=True)
    got = run_fused(spec, layers, feeds16, np.float16, **kw)
    assert all(g.dtype == np.float16 for g in got)
    err = max_abs(got, run_stock(spec, layers, feeds32, **kw))
    assert err <= 5e-3, err


@pytest.mark.parametrize("direction", ["forward", "reverse"])
@pytest.mark.parametrize("B,H,peepholes", [(1, 255, False), (1, 256, True), (3, 201, False), (2, 160, True)])
def test_threaded_splits(direction, B, H, peepholes, rng):
    """Shapes large enough for the CPU kernel to use threads: batch chunks, and (B=1) units split
    across threads that meet every step; odd sizes make the splits uneven."""
    spec = LstmSpec(input_size=16, hidden_size=H, num_layers=2, direction=direction, peepholes=peepholes)
    check(spec, 60, B, rng, seq_lens=True, initial_states=True)
