"""Python's one source of FusedLSTM's identity (lstm_ort.ops) against what the C++ library
itself accepts and computes, through its C entry points: strategy and precision names, the packed
weight layout, the `tuned` format, the element types."""

import itertools

import numpy as np
import onnx
import pytest

from lstm_ort.builders import LstmSpec, fused_model, random_layers
from lstm_ort.ops import packing
from lstm_ort.ops.identity import (CPU_KERNELS, DEBUG_KEYS, DEFAULT_PRECISION, ELEMENT_TYPES, INT8_SCALES, PRECISIONS,
                                   STRATEGIES)
from lstm_ort.ops.tuned import TunedEntry, format_tuned
from lstm_ort.runtime import native
from lstm_ort.testing import make_feeds, run


def test_strategy_names_are_the_kernels():
    assert native.strategy_names() == list(STRATEGIES)


def test_cpu_kernel_names_are_the_kernels():
    assert native.cpu_kernel_names() == list(CPU_KERNELS)


def test_debug_keys_are_the_kernels():
    assert native.debug_keys() == list(DEBUG_KEYS)


def test_session_keys_are_the_ones_registration_accepts():
    """What lstm_ort.InferenceSession reads (runtime/session.py) is what RegisterCustomOps lets by."""
    from lstm_ort.runtime import session
    from lstm_ort.serving.streams.native_session import CUDA_GRAPHS_KEY, WIDE_FROM_KEY

    ours = [key.removeprefix("lstm_ort.") for key, _ in session.NODE_OPTIONS.values()]
    ours += [session._REGISTERED_KEY.removeprefix("lstm_ort."), CUDA_GRAPHS_KEY.removeprefix("lstm_ort."),
             WIDE_FROM_KEY.removeprefix("lstm_ort."),
             *(session.DEBUG_PREFIX.removeprefix("lstm_ort.") + k for k in DEBUG_KEYS)]
    assert native.session_keys() == ours


def test_int8_scales_names_are_the_kernels():
    assert native.int8_scales_names() == list(INT8_SCALES)


def test_precision_names_are_the_kernels():
    assert native.precision_names() == list(PRECISIONS)
    assert DEFAULT_PRECISION == PRECISIONS[0]  # the enum's 0, what the kernel assumes when absent


@pytest.mark.parametrize("L,D,I,H", [(1, 1, 1, 1), (1, 2, 13, 7), (3, 1, 5, 8), (4, 2, 512, 256), (2, 2, 3, 1024)])
def test_weight_offsets_are_the_kernels(L, D, I, H):
    for layer, d in itertools.product(range(L), range(D)):
        assert native.weight_offset(L, D, I, H, layer, d) == packing.weight_offset(L, D, I, H, layer, d)
    assert native.weight_offset(L, D, I, H, L, 0) == packing.weight_count(L, D, I, H)
    assert packing.input_size_from_weight_count(packing.weight_count(L, D, I, H), L, D, H) == I


# (L, D, I, H, rank_input, rank_recurrent): every mix of factored and whole parts
FACTORED = [(1, 1, 3, 4, (2,), (0,)), (1, 1, 3, 4, (0,), (4,)), (2, 2, 13, 7, (3, 0, 14, 1), (7, 2, 0, 0)),
            (3, 1, 5, 8, (5, 4, 1), (8, 8, 8)), (2, 2, 512, 256, (128, 128, 0, 64), (64, 0, 64, 256))]


@pytest.mark.parametrize("L,D,I,H,rx,rh", FACTORED)
def test_factored_offsets_are_the_kernels(L, D, I, H, rx, rh):
    ranks = packing.Ranks(rx, rh)
    for layer, d in itertools.product(range(L), range(D)):
        assert native.factored_offset(L, D, I, H, ranks, layer, d, "W") == packing.weight_offset(L, D, I, H, layer, d, ranks)
        for part in packing.PARTS:
            assert (native.factored_offset(L, D, I, H, ranks, layer, d, part)
                    == packing.factor_offset(L, D, I, H, layer, d, part, ranks))
    w, f = packing.weight_count(L, D, I, H, ranks), packing.factor_count(L, D, I, H, ranks)
    assert native.factored_offset(L, D, I, H, ranks, L, 0, "W") == w
    assert native.factored_offset(L, D, I, H, ranks, L, 0, "input") == f
    assert packing.input_size_from_weight_count(w, L, D, H, ranks, f) == I
    assert packing.input_size_from_weight_count(w, L, D, H, ranks, f + 1) is None


def test_factored_offsets_without_ranks_are_the_whole_layout():
    for layer, d in itertools.product(range(2), range(2)):
        assert (native.factored_offset(2, 2, 13, 7, packing.NO_RANKS, layer, d, "W")
                == native.weight_offset(2, 2, 13, 7, layer, d))
    assert native.factored_offset(2, 2, 13, 7, packing.NO_RANKS, 2, 0, "input") == 0


def test_ranks_beyond_a_side_are_refused_by_the_kernels():
    assert native.factored_offset(1, 1, 3, 4, packing.Ranks((4,), (0,)), 0, 0, "W") == -1  # rank 4 > I = 3
    assert native.factored_offset(1, 1, 3, 4, packing.Ranks((0,), (5,)), 0, 0, "W") == -1  # rank 5 > H = 4


def test_factored_pack_round_trips(rng):
    spec = LstmSpec(input_size=6, hidden_size=5, num_layers=2, direction="bidirectional")
    layers = random_layers(spec, rng)
    layers[0].W_factors = [packing.Factors(rng.standard_normal((20, 3)), rng.standard_normal((3, 6))), None]
    layers[1].R_factors = [None, packing.Factors(rng.standard_normal((20, 2)), rng.standard_normal((2, 5)))]
    packed = packing.pack_layers(layers)
    assert packed.ranks == packing.Ranks((3, 0, 0, 0), (0, 0, 0, 2))
    assert packed.W.size == native.factored_offset(2, 2, 6, 5, packed.ranks, 2, 0, "W") < packing.weight_count(2, 2, 6, 5)
    assert packed.factors.size == native.factored_offset(2, 2, 6, 5, packed.ranks, 2, 0, "input")
    back = packing.unpack_layers(packed, 2, 2, 6, 5)
    np.testing.assert_allclose(back[0].W[0], layers[0].W_factors[0].product(), rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(back[0].W[1], layers[0].W[1])
    np.testing.assert_allclose(back[1].R_factors[1].U, layers[1].R_factors[1].U, rtol=1e-6)
    np.testing.assert_array_equal(back[1].R[0], layers[1].R[0])
    assert back[0].R_factors is None and back[1].W_factors is None


def test_packed_weights_have_the_size_the_kernel_reads(rng):
    spec = LstmSpec(input_size=6, hidden_size=5, num_layers=3, direction="bidirectional")
    packed = packing.pack_layers(random_layers(spec, rng))
    assert packed.W.size == native.weight_offset(3, 2, 6, 5, 3, 0)


def test_tuned_round_trips_through_the_kernels_parser():
    entries = [TunedEntry("NVIDIA H100 80GB HBM3", 100, 64, "wavefront"), TunedEntry("GPU B", 1, 1, "splitk")]
    text = format_tuned(entries)
    assert native.normalize_tuned(text) == text
    for strategy in STRATEGIES:
        assert native.normalize_tuned(format_tuned([TunedEntry("g", 3, 4, strategy)])) == f"g|3|4|{strategy}"


@pytest.mark.parametrize("bad", ["GPU|100|x|wavefront", "GPU|100|64", "|1|1|auto", "GPU|1|1|fastest"])
def test_malformed_tuned_is_refused_by_the_kernel(bad):
    with pytest.raises(RuntimeError, match="attribute tuned must hold"):
        native.normalize_tuned(bad)


def test_format_tuned_refuses_what_the_kernel_cannot_read():
    with pytest.raises(ValueError, match="cannot write tuned entry"):
        format_tuned([TunedEntry("a|b", 1, 1, "auto")])
    with pytest.raises(ValueError, match="cannot write tuned entry"):
        format_tuned([TunedEntry("gpu", 1, 1, "fastest")])


@pytest.mark.parametrize("elem", sorted(ELEMENT_TYPES))
def test_each_element_type_is_registered(elem, rng):
    dtype = onnx.helper.tensor_dtype_to_np_dtype(elem)
    spec = LstmSpec(input_size=3, hidden_size=4)
    out = run(fused_model(spec, random_layers(spec, rng), dtype), make_feeds(spec, 2, 2, rng, dtype=dtype))
    assert all(o.dtype == dtype for o in out)


def test_an_unregistered_element_type_is_refused(rng):
    spec = LstmSpec(input_size=3, hidden_size=4)
    model = fused_model(spec, random_layers(spec, rng))
    for init in model.graph.initializer:
        init.CopyFrom(onnx.numpy_helper.from_array(onnx.numpy_helper.to_array(init).astype(np.float64), init.name))
    for value in [*model.graph.input, *model.graph.output]:
        value.type.tensor_type.elem_type = onnx.TensorProto.DOUBLE
    feeds = {k: v.astype(np.float64) for k, v in make_feeds(spec, 2, 2, rng).items()}
    with pytest.raises(Exception, match="FusedLSTM"):
        run(model, feeds)
