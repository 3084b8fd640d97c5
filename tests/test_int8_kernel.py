"""The CPU kernel of FusedLSTM with int8 weights (docs/ops.md, "int8 weights"): stock's
DynamicQuantizeLSTM on one thread, with every instruction set this CPU has (the tile shapes of
1, 2, 3-6, 12 and more rows, odd H and I), on any thread count, and the contract's errors."""

import subprocess

import numpy as np
import onnxruntime as ort
import pytest

from lstm_ort.builders import LstmSpec, dynamic_quantize_model, fused_model, random_int8_layers
from lstm_ort.ops.reference import activation_levels, activation_quantization
from lstm_ort.runtime.session import InferenceSession
from lstm_ort.testing import child_python, make_feeds, max_abs

CPU = ["CPUExecutionProvider"]
ISAS = ("vnni512", "avxvnni", "avx2", "generic")

# (I, H, layers, direction, B, T): odd sizes, batches that take each tile shape of the kernels.
CASES = [(37, 20, 1, "forward", 1, 9), (13, 9, 1, "reverse", 2, 5), (40, 33, 2, "bidirectional", 5, 6),
         (19, 64, 1, "forward", 13, 4), (8, 17, 2, "forward", 27, 3)]


def _stock(model, feeds, threads=1):
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    return ort.InferenceSession(model.SerializeToString(), options, providers=CPU).run(None, feeds)


def _ours(model, feeds, threads=1):
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    return InferenceSession(model.SerializeToString(), options, providers=CPU).run(None, feeds)


def _case(case, seed=0):
    I, H, L, direction, B, T = case
    rng = np.random.default_rng(seed)
    spec = LstmSpec(input_size=I, hidden_size=H, num_layers=L, direction=direction, peepholes=True)
    layers = random_int8_layers(spec, rng, per_channel=True)
    feeds = make_feeds(spec, T, B, rng, seq_lens=True, initial_states=True)
    kw = {"seq_lens": True, "initial_states": True}
    return (dynamic_quantize_model(spec, layers, per_channel=True, **kw), fused_model(spec, layers, **kw), feeds)


_ISA_PROBE = """
import sys, numpy as np, onnxruntime as ort
from lstm_ort.runtime.session import InferenceSession
options = ort.SessionOptions()
options.intra_op_num_threads = 1
for k in range(int(sys.argv[1])):
    feeds = dict(np.load(f"feeds{k}.npz"))
    out = InferenceSession(f"m{k}.onnx", options, providers=["CPUExecutionProvider"]).run(None, feeds)
    np.savez(f"out{k}.npz", *out)
"""


def _isa_outputs(isa: str, folder) -> list | None:
    """Each case's outputs from a process that forces `isa`, or None where this CPU lacks it."""
    for k, case in enumerate(CASES):
        _, fused, feeds = _case(case)
        (folder / f"m{k}.onnx").write_bytes(fused.SerializeToString())
        np.savez(folder / f"feeds{k}.npz", **feeds)
    argv, env = child_python(_ISA_PROBE, str(len(CASES)), env={"LSTM_ORT_CPU_INT8_ISA": isa})
    done = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=folder, timeout=300)
    if done.returncode != 0 and "lacks that instruction set" in done.stderr:
        return None
    assert done.returncode == 0, done.stderr[-2000:]
    return [[a for _, a in sorted(np.load(folder / f"out{k}.npz").items())] for k in range(len(CASES))]


@pytest.mark.parametrize("isa", ISAS)
def test_each_instruction_set_gives_stocks_results(isa, tmp_path):
    got = _isa_outputs(isa, tmp_path)
    if got is None:
        pytest.skip(f"this CPU lacks {isa}")
    for case, outputs in zip(CASES, got):
        stock_model, _, feeds = _case(case)
        assert max_abs([np.array(o, np.float32) for o in outputs], _stock(stock_model, feeds)) <= 1e-5, case


def test_threads_do_not_change_the_results():
    """h is quantized over the whole batch whatever the threads (stock's per-thread slices are not)."""
    _, fused, feeds = _case((24, 64, 1, "forward", 16, 12), seed=4)
    one, two = _ours(fused, feeds, 1), _ours(fused, feeds, 2)
    assert all(np.array_equal(a, b) for a, b in zip(one, two))


def test_layout_1_is_layout_0_transposed():
    rng = np.random.default_rng(5)
    spec = LstmSpec(input_size=7, hidden_size=10, direction="bidirectional")
    layers = random_int8_layers(spec, rng)
    feeds = make_feeds(spec, 6, 3, rng, seq_lens=True, initial_states=True)
    base = _ours(fused_model(spec, layers, seq_lens=True, initial_states=True), feeds)
    spec.layout = 1
    t = {"X": feeds["X"].swapaxes(0, 1), "sequence_lens": feeds["sequence_lens"],
         "initial_h": feeds["initial_h"].swapaxes(0, 1), "initial_c": feeds["initial_c"].swapaxes(0, 1)}
    y, y_h, y_c = _ours(fused_model(spec, layers, seq_lens=True, initial_states=True), t)
    assert max_abs([y.transpose(1, 2, 0, 3), y_h.swapaxes(0, 1), y_c.swapaxes(0, 1)], base) == 0


def test_activation_levels_are_stocks():
    """The reference's quantization of activations: range widened to hold 0, half to even, a
    division by the scale."""
    x = np.array([-1.0, 0.0, 0.25, 3.0, np.nan], np.float32)
    scale, zero_point = activation_quantization(x)
    assert scale == np.float32(4.0) / np.float32(255) and zero_point == 64
    assert activation_levels(x, scale, zero_point).tolist() == [-64, 0, 16, 191, -64]
    assert activation_quantization(np.zeros(3, np.float32)) == (1.0, 0.0)


def _with_input(model, index, name, array=None):
    node = [n for n in model.graph.node if n.domain == "lstm_ort"][0]
    while len(node.input) <= index:
        node.input.append("")
    node.input[index] = name
    if array is not None:
        from onnx import numpy_helper
        model.graph.initializer.append(numpy_helper.from_array(array, name))
    return model


@pytest.mark.parametrize("how, message", [
    ("no scales", "W_scale is required"),
    ("scales of the wrong size", "W_scale must be 1-D with"),
    ("scales with float weights", "W_scale is given, but W is not int8"),
])
def test_contract_errors_are_clear(how, message):
    rng = np.random.default_rng(6)
    spec = LstmSpec(input_size=4, hidden_size=5)
    feeds = make_feeds(spec, 3, 2, rng)
    if how == "scales with float weights":
        from lstm_ort.builders import random_layers
        model = _with_input(fused_model(spec, random_layers(spec, rng)), 8, "s", np.ones(40, np.float32))
    else:
        model = fused_model(spec, random_int8_layers(spec, rng))
        if how == "no scales":
            node = [n for n in model.graph.node if n.domain == "lstm_ort"][0]
            del node.input[8:]
        else:
            _with_input(model, 8, "s", np.ones(7, np.float32))
    with pytest.raises(Exception, match=message):
        _ours(model, feeds)


@pytest.mark.gpu
def test_a_cuda_session_runs_int8_nodes_on_the_cpu_kernel():
    """No CUDA kernel takes int8 W: onnxruntime places the node on the CPU provider, with the CPU
    kernel's results."""
    stock_model, fused, feeds = _case((40, 33, 2, "bidirectional", 5, 6))
    providers = ["CUDAExecutionProvider", "CPUExecutionProvider"]
    got = InferenceSession(fused.SerializeToString(), providers=providers).run(None, feeds)
    assert max_abs(got, _ours(fused, feeds)) == 0
    assert max_abs(got, _stock(stock_model, feeds)) <= 1e-5
