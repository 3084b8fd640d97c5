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
ISAS = ("amx", "vnni512", "vnni256", "avxvnni", "avx2", "generic")

# (I, H, layers, direction, B, T): odd sizes, batches that take each tile shape of the kernels (a
# step's B rows: 1 to 12 rows a tile in the 512-bit VNNI build, 3 to 6 in the 256-bit ones).
CASES = [(37, 20, 1, "forward", 1, 9), (13, 9, 1, "reverse", 2, 5), (40, 33, 2, "bidirectional", 5, 6),
         (19, 64, 1, "forward", 13, 4), (8, 17, 2, "forward", 27, 3)]
CASES += [(11 + B, 7 + B, 1, "forward", B, 2) for B in (3, 4, 6, 7, 8, 9, 10, 11, 12)]


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


_SLICES_PROBE = """
import sys, numpy as np, onnxruntime as ort
from lstm_ort.runtime.session import InferenceSession
for k in range(int(sys.argv[1])):
    feeds = dict(np.load(f"feeds{k}.npz"))
    for threads in (1, 2):
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        out = InferenceSession(f"m{k}.onnx", options, providers=["CPUExecutionProvider"]).run(None, feeds)
        np.savez(f"out{k}_{threads}.npz", *out)
"""


@pytest.mark.parametrize("plan_threads", [2, 3, 4])
def test_slices_scales_give_stocks_results_on_as_many_threads(plan_threads, tmp_path):
    """int8_scales=slices: h quantized per slice of the batch as stock's LSTM cuts it on the threads
    the kernel plans for (LSTM_ORT_CPU_THREADS here), i.e. stock's DynamicQuantizeLSTM on that many
    intra-op threads, whatever threads the session itself has."""
    for k, case in enumerate(CASES):
        _, fused, feeds = _case(case)
        (tmp_path / f"m{k}.onnx").write_bytes(_with_scales(fused, "slices").SerializeToString())
        np.savez(tmp_path / f"feeds{k}.npz", **feeds)
    argv, env = child_python(_SLICES_PROBE, str(len(CASES)), env={"LSTM_ORT_CPU_THREADS": str(plan_threads)})
    done = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    for k, case in enumerate(CASES):
        stock_model, _, feeds = _case(case)
        ref = _stock(stock_model, feeds, plan_threads)
        for threads in (1, 2):
            got = [a for _, a in sorted(np.load(tmp_path / f"out{k}_{threads}.npz").items())]
            assert max_abs(got, ref) <= 1e-5, (case, threads)


def test_threads_do_not_change_the_results():
    """h is quantized over the whole batch whatever the threads (stock's per-thread slices are not)."""
    _, fused, feeds = _case((24, 64, 1, "forward", 16, 12), seed=4)
    one, two = _ours(fused, feeds, 1), _ours(fused, feeds, 2)
    assert all(np.array_equal(a, b) for a, b in zip(one, two))


# Odd B and H, ragged sequences and initial states; a tile of AMX rows (B 32) split in two, and a
# bidirectional stack (a direction per thread pair on 4 threads).
SPLIT_CASES = CASES + [(131, 203, 2, "forward", 32, 7), (24, 65, 1, "reverse", 33, 5), (16, 40, 1, "forward", 3, 6)]

_SPLIT_PROBE = """
import json, sys, numpy as np, onnxruntime as ort
from lstm_ort.runtime.native import describe_cpu
from lstm_ort.runtime.nodes import NodeShape
from lstm_ort.runtime.session import InferenceSession
threads, tag, shapes = int(sys.argv[1]), sys.argv[2], json.loads(sys.argv[3])
plans = []
for k, (I, H, L, D, B, T) in enumerate(shapes):
    feeds = dict(np.load(f"feeds{k}.npz"))
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    out = InferenceSession(f"m{k}.onnx", options, providers=["CPUExecutionProvider"]).run(None, feeds)
    np.savez(f"out{k}_{tag}.npz", *out)
    plans.append(describe_cpu(NodeShape(L, D, I, H, "int8"), T, B, threads=threads))
print(json.dumps(plans))
"""


@pytest.mark.parametrize("isa", ["", "avx2"])
def test_one_scale_per_step_is_the_one_thread_result_however_the_threads_split(isa, tmp_path):
    """The default (int8_scales=call) quantizes h with one scale per step over the whole batch: the
    result of one thread bit for bit, whether the step's rows split over threads that meet once per
    step to combine their rows' ranges into the scale (LSTM_ORT_CPU_SPLIT=2), its panels split
    (=3), the plan's own choice, or a split step's tasks run in turn by a pool of one thread."""
    import json

    shapes = []
    for k, case in enumerate(SPLIT_CASES):
        _, fused, feeds = _case(case, seed=k)
        (tmp_path / f"m{k}.onnx").write_bytes(fused.SerializeToString())
        np.savez(tmp_path / f"feeds{k}.npz", **feeds)
        I, H, L, direction, B, T = case
        shapes.append([I, H, L, 2 if direction == "bidirectional" else 1, B, T])
    runs = {"one": (1, 1, ""), "rows2": (2, 2, "2"), "rows2_in_turn": (2, 1, "2"), "panels2": (2, 2, "3"),
            "planned2": (2, 2, ""), "rows3": (3, 3, "2"), "rows4": (4, 4, "2")}
    plans = {}
    for tag, (plan_threads, threads, split) in runs.items():
        env = {"LSTM_ORT_CPU_THREADS": str(plan_threads), "LSTM_ORT_CPU_INT8_ISA": isa, "LSTM_ORT_CPU_SPLIT": split}
        argv, env = child_python(_SPLIT_PROBE, str(threads), tag, json.dumps(shapes), env=env)
        done = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
        if done.returncode != 0 and "lacks that instruction set" in done.stderr:
            pytest.skip(f"this CPU lacks {isa}")
        assert done.returncode == 0, done.stderr[-2000:]
        plans[tag] = json.loads(done.stdout.strip().splitlines()[-1])
    for k, case in enumerate(SPLIT_CASES):
        one = [a for _, a in sorted(np.load(tmp_path / f"out{k}_one.npz").items())]
        for tag in runs:
            got = [a for _, a in sorted(np.load(tmp_path / f"out{k}_{tag}.npz").items())]
            assert all(np.array_equal(a, b, equal_nan=True) for a, b in zip(one, got)), (case, tag, plans[tag][k])
    # The rows did split: every case of B >= 2 on one direction with 2 threads, and every one on 4.
    for k, (_, _, _, D, B, _) in enumerate(shapes):
        if B >= 2 and D == 1:
            for tag in ("rows2", "rows2_in_turn", "rows3"):
                assert "batch rows split over" in plans[tag][k], plans[tag][k]
            assert "panels split over 2" in plans["panels2"][k], plans["panels2"][k]
        if B >= 2:
            assert "batch rows split over" in plans["rows4"][k], plans["rows4"][k]
    assert "batch rows split over 2" in plans["planned2"][SPLIT_CASES.index((131, 203, 2, "forward", 32, 7))]


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


# --- an inf in one row (issue 45, row 3) --------------------------------------------------------------

def _inf_case(rng, direction):
    spec = LstmSpec(input_size=16, hidden_size=32, num_layers=2, direction=direction)
    layers = random_int8_layers(spec, rng, per_channel=True)
    feeds = make_feeds(spec, 10, 8, rng)
    bad = {k: v.copy() for k, v in feeds.items()}
    bad["X"][3, 2, 5] = np.inf
    return spec, layers, feeds, bad


def _finite_rows(y):
    return [bool(np.isfinite(y[:, :, b]).all()) for b in range(y.shape[2])]


@pytest.mark.parametrize("direction", ["forward", "bidirectional"])
def test_an_inf_in_one_row_leaves_the_other_rows_finite_as_stock(direction, rng):
    """One inf in row 2 of 8: as stock's DynamicQuantizeLSTM, the other rows stay finite (the range of
    the levels is the finite values', the inf takes the top level). Before, the scale became inf and
    every row NaN."""
    from lstm_ort.rewriter import optimize

    spec, layers, feeds, bad = _inf_case(rng, direction)
    stock_model = dynamic_quantize_model(spec, layers, per_channel=True)
    stock = _stock(stock_model, bad)
    ours = _ours(optimize(stock_model), bad)
    others = [b for b in range(8) if b != 2]
    assert all(_finite_rows(stock[0])[b] for b in others)  # what stock does
    assert all(_finite_rows(ours[0])[b] for b in others)
    # The first layer's levels are the finite values' alone: rows of other entries are the result
    # without the inf, within what the second layer's range (it holds row 2's outputs) moves.
    clean = _ours(optimize(stock_model), feeds)
    assert max_abs([np.delete(ours[0], 2, axis=2)], [np.delete(clean[0], 2, axis=2)]) <= 0.1


def test_an_inf_in_one_row_of_a_precision_int8_model(rng):
    """optimize --precision int8 on a float model: the same."""
    from lstm_ort.builders import random_layers, stock_model
    from lstm_ort.rewriter import optimize

    spec = LstmSpec(input_size=16, hidden_size=32, direction="bidirectional")
    model = optimize(stock_model(spec, random_layers(spec, rng)), precision="int8")
    feeds = make_feeds(spec, 10, 8, rng)
    feeds["X"][3, 2, 5] = np.inf
    y = _ours(model, feeds)[0]
    assert [b for b, ok in enumerate(_finite_rows(y)) if not ok] in ([], [2])


# --- per-row scales (issue 45, row 2) -----------------------------------------------------------------

def _with(model, **attributes: str):
    """The model with these FusedLSTM attributes set (int8_scales, cpu_kernel)."""
    from lstm_ort.runtime.session import with_attributes

    import onnx
    return onnx.load_from_string(with_attributes(model.SerializeToString(), attributes))


def _with_scales(model, scales: str):
    return _with(model, int8_scales=scales)


@pytest.mark.parametrize("threads", [1, 2])
def test_row_scales_keep_every_row_its_own(threads, rng):
    """int8_scales=row: each batch row is quantized with its own scale (its input at each step, its
    h), so a row batched with others gives, bit for bit, what it gives alone, whatever the others
    hold (one of them x1000) and however the threads split the batch."""
    spec = LstmSpec(input_size=24, hidden_size=40, num_layers=2, direction="bidirectional")
    layers = random_int8_layers(spec, rng, per_channel=True)
    model = _with_scales(fused_model(spec, layers, seq_lens=True, initial_states=True), "row")
    feeds = make_feeds(spec, 12, 8, rng, seq_lens=True, initial_states=True)
    feeds["X"][:, 3] *= 1000
    y, y_h, y_c = _ours(model, feeds, threads)
    for b in range(8):
        alone = {k: (v[:, b:b + 1] if k != "sequence_lens" else v[b:b + 1]) for k, v in feeds.items()}
        ya, ha, ca = _ours(model, alone, threads)
        assert np.array_equal(y[:, :, b:b + 1], ya) and np.array_equal(y_h[:, b:b + 1], ha)
        assert np.array_equal(y_c[:, b:b + 1], ca)


def test_call_scales_let_one_row_change_the_others(rng):
    """The default (stock's one-thread arithmetic): one scale per call and step, which a loud row
    sets for all: the reason per-row scales exist."""
    spec = LstmSpec(input_size=24, hidden_size=40)
    layers = random_int8_layers(spec, rng, per_channel=True)
    model = fused_model(spec, layers)
    feeds = make_feeds(spec, 12, 2, rng)
    quiet = _ours(model, {"X": feeds["X"][:, :1]})[0]
    loud = dict(feeds)
    loud["X"] = feeds["X"].copy()
    loud["X"][:, 1] *= 1000
    assert max_abs([_ours(model, loud)[0][:, :, :1]], [quiet]) > 1e-2


def test_row_scales_error_against_stock_is_its_stated_bound(rng):
    """Per-row scales against stock's DynamicQuantizeLSTM on one thread: within the int8 tolerance
    (verify.INT8_TOLERANCE: 2e-2 + 5e-2 x max |stock|, docs/ops.md), as close as stock on two threads
    (per-slice scales) is to itself on one."""
    from lstm_ort.verify import INT8_TOLERANCE

    spec = LstmSpec(input_size=40, hidden_size=64, num_layers=2, direction="bidirectional")
    layers = random_int8_layers(spec, rng, per_channel=True)
    feeds = make_feeds(spec, 30, 16, rng, seq_lens=True, initial_states=True)
    kw = {"seq_lens": True, "initial_states": True}
    ref = _stock(dynamic_quantize_model(spec, layers, per_channel=True, **kw), feeds)
    got = _ours(_with_scales(fused_model(spec, layers, **kw), "row"), feeds)
    for g, r in zip(got, ref):
        assert INT8_TOLERANCE.excess(r, np.abs(g - r)) <= INT8_TOLERANCE.atol


def test_bad_int8_scales_name_the_values(rng):
    spec = LstmSpec(input_size=4, hidden_size=5)
    model = _with_scales(fused_model(spec, random_int8_layers(spec, rng)), "call")
    node = [n for n in model.graph.node if n.domain == "lstm_ort"][0]
    for a in node.attribute:
        if a.name == "int8_scales":
            a.s = b"rows"
    with pytest.raises(Exception, match="attribute int8_scales must be call, row or slices, got 'rows'"):
        _ours(model, make_feeds(spec, 3, 2, rng))


# --- stock's DynamicQuantizeLSTM as the floor (cpu_kernel stock) -------------------------------------

@pytest.mark.parametrize("case", CASES[:5])
def test_stock_kernel_on_int8_weights_is_the_original_model(case):
    """cpu_kernel=stock on an int8 node runs onnxruntime's DynamicQuantizeLSTM on the node's own
    weights (cpu/stock_model.h: W and R back to [D, K, 4H] int8, a scale per column): the original
    model's results at one thread, to the bit but for the order of float sums, and the fused
    kernel's (one scale per step: what stock computes on one thread)."""
    original, fused, feeds = _case(case, seed=5)
    want = _stock(original, feeds)
    got = _ours(_with(fused, cpu_kernel="stock"), feeds)
    assert max_abs(got, want) <= 1e-6
    assert max_abs(_ours(fused, feeds), got) <= 1e-5


def test_auto_takes_stock_only_with_one_scale_per_step(rng):
    """auto weighs stock's kernel against the fused one for int8_scales=call only: stock's sessions
    of more threads and batch pieces quantize h per slice, and the row and slices modes have no
    one-thread stock kernel. Forcing stock there is refused with that reason."""
    from lstm_ort.runtime.native import describe_cpu
    from lstm_ort.runtime.nodes import NodeShape

    shape = NodeShape(1, 1, 16, 32, "int8")
    call = describe_cpu(shape, 20, 8, threads=2)
    assert "stock" in call and "stock_threads" not in call and "stock_split" not in call, call
    for scales in ("row", "slices"):
        described = describe_cpu(shape, 20, 8, threads=2, int8_scales=scales)
        assert "no one-thread stock kernel" in described, described
    _, fused, feeds = _case((19, 64, 1, "forward", 13, 4))
    with pytest.raises(Exception, match="no one-thread stock kernel"):
        _ours(_with(fused, int8_scales="row", cpu_kernel="stock"), feeds)


def test_auto_settles_on_one_kernel_and_keeps_its_weights_only():
    """auto measures fused against stock's DynamicQuantizeLSTM on an int8 node, every call giving the
    one-thread result whichever ran; once the class settles (its rechecks after 256 and 2048 calls,
    cpu/kernel_tuner.h), only the chosen kernel's weights are held (stock's session was kept before)."""
    from lstm_ort.runtime.native import cpu_kernel_report

    original, fused, feeds = _case((19, 64, 1, "forward", 13, 4), seed=6)
    want = _stock(original, feeds)
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    sess = InferenceSession(fused.SerializeToString(), options, providers=CPU)
    for _ in range(2400):
        assert max_abs(sess.run(None, feeds), want) <= 1e-5
    [choice] = [c for c in cpu_kernel_report() if c.node == "fused_lstm" and c.B == 13]
    assert set(choice.median_ms) == {"fused", "stock"}, choice
    assert choice.held == (choice.chosen,), choice
