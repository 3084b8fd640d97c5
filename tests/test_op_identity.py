"""Python's one source of FusedLSTM's identity (lstm_ort.ops) against what the C++ library
itself accepts and computes, through its C entry points: strategy and precision names, the packed
weight layout, the `tuned` format, the element types."""

import itertools

import numpy as np
import onnx
import pytest

from lstm_ort.builders import LstmSpec, fused_model, random_layers
from lstm_ort.ops import packing
from lstm_ort.ops.identity import DEFAULT_PRECISION, ELEMENT_TYPES, PRECISIONS, STRATEGIES
from lstm_ort.ops.tuned import TunedEntry, format_tuned
from lstm_ort.runtime import native
from lstm_ort.testing import make_feeds, run


def test_strategy_names_are_the_kernels():
    assert native.strategy_names() == list(STRATEGIES)


def test_precision_names_are_the_kernels():
    assert native.precision_names() == list(PRECISIONS)
    assert DEFAULT_PRECISION == PRECISIONS[0]  # the enum's 0, what the kernel assumes when absent


@pytest.mark.parametrize("L,D,I,H", [(1, 1, 1, 1), (1, 2, 13, 7), (3, 1, 5, 8), (4, 2, 512, 256), (2, 2, 3, 1024)])
def test_weight_offsets_are_the_kernels(L, D, I, H):
    for layer, d in itertools.product(range(L), range(D)):
        assert native.weight_offset(L, D, I, H, layer, d) == packing.weight_offset(L, D, I, H, layer, d)
    assert native.weight_offset(L, D, I, H, L, 0) == packing.weight_count(L, D, I, H)
    assert packing.input_size_from_weight_count(packing.weight_count(L, D, I, H), L, D, H) == I


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
