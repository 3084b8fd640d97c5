"""Fuzz: seeded random LSTM models (attributes valid and not, shapes, element types, initial
states of every spelling, initializers that are inputs, name clashes, external data, bad output
paths) through `lstm-ort optimize --check --json`, in process.

Every outcome must be a correct model (it loads, and matches stock onnxruntime on fresh inputs
where stock runs the input), a refusal with a reason, or a clean input/usage error: never a
traceback, an internal error, a --check difference, a model that does not load, or a leftover.
One exception is checked, not assumed: ill-conditioned float16 models (unbounded or discontinuous
activations magnify each rounding), where ours and stock part by more than a few float16 steps;
there ours must be about as close as stock is to the float32 math (stock on the float32 twin).

LSTM_ORT_FUZZ_CASES (default 500) and LSTM_ORT_FUZZ_SEED (default 0) pick the cases; a failing
case reproduces alone with LSTM_ORT_FUZZ_SEED=<seed> LSTM_ORT_FUZZ_CASES=1.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import time
from collections import Counter
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from lstm_ort.builders import LstmSpec, random_layers, stock_model
from lstm_ort.cli import EXIT_INPUT, EXIT_OK, EXIT_PARITY, EXIT_USAGE, main
from lstm_ort.runtime.session import InferenceSession
from lstm_ort.verify import (FLOAT16_TOLERANCE, Tolerance, default_tolerance, has_layout1_lstm, random_feeds,
                             stock_equivalent)

CASES = int(os.environ.get("LSTM_ORT_FUZZ_CASES", "500"))
SEED = int(os.environ.get("LSTM_ORT_FUZZ_SEED", "0"))
# Parity for float32: 1e-5, relative where outputs exceed 1 (unbounded activations reach
# thousands, where one float32 step is ~1e-4).
FLOAT32_TOL = 1e-5

VALID_ACTS = ["Sigmoid", "Tanh", "Relu", "HardSigmoid", "LeakyRelu", "Softsign", "ScaledTanh", "Elu", "Affine",
              "ThresholdedRelu", "Softplus"]


def _pick(rng, options, weights=None):
    if weights is not None:
        weights = np.asarray(weights, float) / np.sum(weights)
    return options[int(rng.choice(len(options), p=weights))]


def random_case(rng: np.random.Generator, root: Path) -> tuple[Path, list[str], dict]:
    """A model written under `root`, the CLI arguments for it, and what was drawn (for messages)."""
    drawn = {}
    opset = _pick(rng, [7, 14, 17, 22], [1, 2, 4, 2])
    dtype = _pick(rng, [np.float32, np.float16, np.float64], [14, 5, 1])
    states = _pick(rng, ["none", "inputs", "zeros", "zeros_wrong", "expand", "expand_wrong"], [5, 2, 2, 1, 1, 1])
    if opset == 7 and states != "none":
        opset = 10 if states == "inputs" else 8  # Slice with inputs, Expand: later opsets, the same LSTM
    D_name = _pick(rng, ["forward", "reverse", "bidirectional"])
    layout = int(opset >= 14 and rng.random() < 0.25)  # opset 7's LSTM has no layout
    spec = LstmSpec(input_size=int(rng.integers(1, 6)), hidden_size=int(rng.integers(1, 6)),
                    num_layers=int(rng.integers(1, 4)), direction=D_name, layout=layout,
                    bias=rng.random() < 0.7, peepholes=rng.random() < 0.3)
    if rng.random() < 0.3:
        spec.clip = float(_pick(rng, [0.5, 2.0, 10.0, 0.0, -1.0], [3, 3, 3, 1, 1]))
    if rng.random() < 0.3:
        spec.input_forget = int(_pick(rng, [1, 2, -1]))
    D = spec.num_directions
    if rng.random() < 0.3:
        if rng.random() < 0.85:
            spec.activations = [_pick(rng, VALID_ACTS) for _ in range(3 * D)]
            spec.activation_alpha = [float(a) for a in rng.uniform(0.1, 1.5, int(rng.integers(0, 4)))] or None
            spec.activation_beta = [float(b) for b in rng.uniform(0.1, 1.5, int(rng.integers(0, 3)))] or None
        else:  # wrong count or an unknown name
            spec.activations = _pick(rng, [["Sigmoid", "Tanh"], ["Sigmoid", "Swish", "Tanh"] * D])
    seq_lens = rng.random() < 0.3
    outputs = [o for o in ("Y", "Y_h", "Y_c") if rng.random() < 0.6] or ["Y"]
    layers = random_layers(spec, rng)
    build_dtype = np.float32 if dtype == np.float64 else dtype
    model = stock_model(spec, layers, build_dtype, seq_lens=seq_lens, initial_states=states == "inputs",
                        outputs=tuple(outputs), opset=opset)
    drawn.update(opset=opset, dtype=np.dtype(dtype).name, spec=str(spec.__dict__), states=states, seq_lens=seq_lens)
    graph = model.graph
    batch = int(rng.integers(1, 4)) if states in ("zeros", "zeros_wrong", "expand", "expand_wrong") or \
        rng.random() < 0.3 else None
    if batch is not None:  # a static batch, on every input and output that has one
        for vi in [*graph.input, *graph.output]:
            for dim in vi.type.tensor_type.shape.dim:
                if dim.dim_param == "B":
                    dim.dim_value = batch
    if states in ("zeros", "zeros_wrong", "expand", "expand_wrong"):
        _zero_states(model, spec, batch, states, rng)
    if seq_lens and rng.random() < 0.1:
        graph.input[1].type.tensor_type.elem_type = TensorProto.INT64  # stock takes int32 only
    if dtype == np.float64:
        _to_double(model)
    _mutate_weights(model, spec, rng, drawn)
    if rng.random() < 0.1:
        _embedding_front(model, spec, rng)
        drawn["embedding"] = True
    if rng.random() < 0.15:  # keep_initializers_as_inputs
        for init in list(graph.initializer):
            if rng.random() < 0.7:
                graph.input.append(helper.make_tensor_value_info(init.name, init.data_type, list(init.dims)))
        drawn["initializers_as_inputs"] = True
    if rng.random() < 0.2:
        _name_clashes(model, rng)
        drawn["name_clashes"] = True
    model.ir_version = int(_pick(rng, [10, 10, 10, 8, 14]) if opset < 22 else _pick(rng, [10, 14]))
    if opset == 7 and rng.random() < 0.3:
        model.ir_version = 3  # opset 7 is IR 3's

    src = root / "in.onnx"
    external = rng.random() < 0.15
    if external:
        onnx.save(model, str(src), save_as_external_data=True, all_tensors_to_one_file=True, location="in.data",
                  size_threshold=int(_pick(rng, [0, 64])))
    else:
        onnx.save(model, str(src))
    drawn["external"] = external
    out = root / "out" / "o.onnx"
    bad = rng.random() < 0.06
    if bad:
        (root / "adir").mkdir()
        data = root / "in.data"  # written only if some tensor passed the size threshold
        choices = ["", "-", str(root / "adir"), str(src)] + ([str(data)] if data.exists() else [])
        drawn["bad_output"] = _pick(rng, choices)
    args = ["optimize", str(src), "-o", drawn["bad_output"] if bad else str(out), "--check", "--json"]
    if dtype != np.float16:
        args += ["--atol", str(FLOAT32_TOL), "--rtol", str(FLOAT32_TOL)]
    if rng.random() < 0.1:
        args.append("--freeze-inputs")
    drawn["bad"] = bad
    drawn["sequence_lens_input"] = rng.random() < 0.3
    if drawn["sequence_lens_input"]:
        args.append("--sequence-lens-input")
    return src, args, drawn


def _zero_states(model, spec, batch, how, rng):
    """Zero initial states on every LSTM node, as exporters write them: initializers or Expand."""
    graph = model.graph
    D, H = spec.num_directions, spec.hidden_size
    wrong = how.endswith("_wrong")
    nodes = [n for n in graph.node if n.op_type == "LSTM"]
    new = []
    for k, node in enumerate(nodes):
        which = [5, 6] if rng.random() < 0.6 else [int(_pick(rng, [5, 6]))]
        for index in which:
            shape = [D, batch, H] if spec.layout == 0 else [batch, D, H]
            if wrong and rng.random() < 0.7:
                axis = int(rng.integers(0, 3))
                shape[axis] += int(rng.integers(1, 4))
            name = f"zero_{k}_{index}"
            elem = graph.initializer[0].data_type
            if how.startswith("zeros"):
                graph.initializer.append(numpy_helper.from_array(
                    np.zeros(shape, onnx.helper.tensor_dtype_to_np_dtype(elem)), name))
            else:
                dims = [numpy_helper.from_array(np.array([d], np.int64), f"{name}_d{j}") for j, d in enumerate(shape)]
                graph.initializer.extend([*dims, numpy_helper.from_array(
                    np.zeros((), onnx.helper.tensor_dtype_to_np_dtype(elem)), f"{name}_zero")])
                new.append(helper.make_node("Concat", [d.name for d in dims], [f"{name}_shape"], axis=0))
                new.append(helper.make_node("Expand", [f"{name}_zero", f"{name}_shape"], [name]))
            while len(node.input) <= index:
                node.input.append("")
            node.input[index] = name
    for n in reversed(new):
        graph.node.insert(0, n)


def _to_double(model):
    for init in model.graph.initializer:
        if init.data_type == TensorProto.FLOAT:
            init.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(init).astype(np.float64), init.name))
    for vi in [*model.graph.input, *model.graph.output]:
        if vi.type.tensor_type.elem_type == TensorProto.FLOAT:
            vi.type.tensor_type.elem_type = TensorProto.DOUBLE


def _mutate_weights(model, spec, rng, drawn):
    """Now and then a weight of the wrong shape, or a hidden_size that does not fit the weights."""
    graph = model.graph
    r = rng.random()
    if r < 0.05:
        init = _pick(rng, [i for i in graph.initializer if i.name.split("_")[-1] in ("R", "B", "P", "W")])
        arr = numpy_helper.to_array(init)
        shape = list(arr.shape)
        shape[int(rng.integers(0, len(shape)))] += 1
        init.CopyFrom(numpy_helper.from_array(np.zeros(shape, arr.dtype), init.name))
        drawn["wrong_shape"] = init.name
    elif r < 0.08:
        node = _pick(rng, [n for n in graph.node if n.op_type == "LSTM"])
        for a in node.attribute:
            if a.name == "hidden_size":
                a.i += 1
        drawn["hidden_size_mismatch"] = node.name


def _embedding_front(model, spec, rng):
    graph = model.graph
    x = graph.input[0]
    elem = x.type.tensor_type.elem_type
    vocab = int(rng.integers(2, 30))
    emb = (rng.standard_normal((vocab, spec.input_size))).astype(onnx.helper.tensor_dtype_to_np_dtype(elem))
    graph.initializer.append(numpy_helper.from_array(emb, "embedding"))
    dims = [d for d in x.type.tensor_type.shape.dim][:2]
    token_dims = [d.dim_value if d.HasField("dim_value") else (d.dim_param or None) for d in dims]
    graph.node.insert(0, helper.make_node("Gather", ["embedding", "tokens"], ["X"], axis=0))
    del graph.input[0]
    graph.input.insert(0, helper.make_tensor_value_info("tokens", TensorProto.INT64, token_dims))


def _name_clashes(model, rng):
    graph = model.graph
    lstms = [n for n in graph.node if n.op_type == "LSTM"]
    first = lstms[0]
    first.name = "enc"
    targets = ["enc_fused", "enc_fused_W", "enc_fused_stack", "enc_fused_stack_W", "enc_fused_Y_h", "val_3"]
    last_out = graph.output[0].name
    for k, name in enumerate(targets):
        if rng.random() < 0.5:
            graph.node.append(helper.make_node("Identity", [last_out], [name + "_v" if k % 2 else name],
                                               name=name))


# -------------------------------------------------------------------------------------------------

def _run_cli(args) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(args)
    return code, out.getvalue(), err.getvalue()


def _run_case(args, failures: list, what: str) -> tuple[int, str, str] | None:
    """The CLI's exit code and output, or None with the failure recorded: a traceback is what the
    fuzz tests look for."""
    try:
        return _run_cli(args)
    except BaseException as e:  # noqa: BLE001
        failures.append(f"{what}: {type(e).__name__}: {e}")
        return None


def _verify_written(src: Path, dst: Path, doc: dict, rng) -> str | None:
    """A written model loads, and matches stock on fresh inputs where stock runs the input."""
    options = ort.SessionOptions()
    options.log_severity_level = 4
    original = onnx.load(str(src))
    rewritten = any(f["rewritten"] for f in doc["findings"])
    try:
        InferenceSession(str(dst), options, providers=["CPUExecutionProvider"])
    except Exception as e:
        try:
            ort.InferenceSession(str(src), options, providers=["CPUExecutionProvider"])
        except Exception:  # nor does the input: what stock refuses in it was left (layout-1 LSTMs)
            if not (has_layout1_lstm(original) and not all(f["rewritten"] for f in doc["findings"])):
                return None if not rewritten else f"written model does not load: {e}"
        else:
            return f"written model does not load though the input does: {e}"
    if not rewritten:
        return None
    tolerance = default_tolerance(original)
    if tolerance != FLOAT16_TOLERANCE:
        tolerance = Tolerance(FLOAT32_TOL, FLOAT32_TOL)
    feeds = random_feeds(original, rng, dim=int(rng.integers(1, 6)))
    twin = stock_equivalent(original)
    try:
        stock = ort.InferenceSession(twin.SerializeToString(), options, providers=["CPUExecutionProvider"])
        ref = stock.run(None, {i.name: feeds[i.name] for i in stock.get_inputs()})
    except Exception:
        return None  # stock cannot run it on these inputs either
    try:
        written = onnx.load(str(dst))
        ours = InferenceSession(stock_equivalent(written).SerializeToString(), options,
                                providers=["CPUExecutionProvider"])
        got = ours.run(None, _at_full_length(written, feeds))
    except Exception as e:
        return f"written model does not run on fresh inputs: {e}"
    problem = _compare(ref, got, tolerance)
    if problem and tolerance == FLOAT16_TOLERANCE:
        problem = _no_less_accurate(ref, got, _float32_twin_outputs(twin, feeds))
    elif problem:
        problem = _within_conditioning(twin, feeds, ref, got, tolerance, rng)
    return problem and f"written model differs from stock on fresh inputs: {problem}"


def _at_full_length(written: onnx.ModelProto, feeds: dict) -> dict:
    """The feeds of the original for the written model: a sequence_lens input optimize added gets
    every entry's full length."""
    from lstm_ort.graph.ragged import analyze

    inits = {t.name for t in written.graph.initializer}
    out = {}
    for vi in written.graph.input:
        if vi.name in inits:
            continue
        if vi.name not in feeds:
            layout = analyze(written)
            x = feeds[layout.input]
            out[vi.name] = np.full(x.shape[layout.batch_axis], x.shape[layout.time_axis], np.int32)
        else:
            out[vi.name] = feeds[vi.name]
    return out


def _within_conditioning(model, feeds, ref, got, tolerance, rng) -> str | None:
    """float32 models can be ill-conditioned too (unbounded activations over a few steps reach
    thousands, discontinuous ones flip): ours may then differ from stock by what stock itself
    moves when its float inputs and weights move by 1e-6 of themselves, ten times over; a wrong
    rewrite, off in a well-conditioned model, is not hidden by that."""
    def move(v):
        return (v * (1 + 1e-6 * rng.choice([-1.0, 1.0], v.shape))).astype(v.dtype) if v.dtype.kind == "f" else v

    moved = {k: move(v) for k, v in feeds.items()}
    shaken = onnx.ModelProto()
    shaken.CopyFrom(model)
    for init in shaken.graph.initializer:
        if init.data_type in (TensorProto.FLOAT, TensorProto.FLOAT16):
            init.CopyFrom(numpy_helper.from_array(move(numpy_helper.to_array(init)), init.name))
    options = ort.SessionOptions()
    options.log_severity_level = 4
    stock = ort.InferenceSession(shaken.SerializeToString(), options, providers=["CPUExecutionProvider"])
    ref2 = stock.run(None, {i.name: moved[i.name] for i in stock.get_inputs()})
    for a, a2, b in _where(lambda a, a2, b: np.isfinite(a) & np.isfinite(a2), ref, ref2, got):
        with np.errstate(invalid="ignore", over="ignore"):
            spread = np.abs(a2 - a).max()
            diff = (np.abs(b - a) - tolerance.rtol * np.abs(a)).max()
        if not diff <= 10 * spread + tolerance.atol:
            return f"excess {diff:.3g} over {tolerance}, where stock moves {spread:.3g} with its inputs"
    return None


def _where(keep, *runs):
    """Output by output, the runs' values in float64 where ``keep(*values)`` holds (outputs where it
    holds nowhere are left out)."""
    for values in zip(*runs):
        values = [v.astype(np.float64) for v in values]
        mask = keep(*values)
        if mask.any():
            yield [v[mask] for v in values]


def _no_less_accurate(stock16, ours16, ref32) -> str | None:
    """float16 models can be ill-conditioned (unbounded or discontinuous activations magnify each
    rounding): there ours must be about as close to the float32 math as stock is, not far off as
    a wrong rewrite would be."""
    tol = FLOAT16_TOLERANCE
    # Beyond float16's range both overflow.
    for a, b, c in _where(lambda a, b, c: np.isfinite(a) & np.isfinite(c) & (np.abs(c) < 65504), stock16, ours16, ref32):
        stock_err = np.abs(a - c).max()
        ours_err = (np.abs(b - c) - tol.rtol * np.abs(c)).max()
        if not ours_err <= 2 * stock_err + tol.atol:
            return f"ours is {ours_err:.3g} from the float32 math, stock {stock_err:.3g}"
    return None


def _compare(ref, got, tolerance) -> str | None:
    for a, b in zip(ref, got):
        if a.shape != b.shape:
            return f"output of shape {b.shape}, stock's {a.shape}"
        a, b = a.astype(np.float64), b.astype(np.float64)
        # Where stock overflows (unbounded activations), the two may part ways (inf - inf is NaN):
        # compared where stock is finite.
        finite = np.isfinite(a)
        with np.errstate(invalid="ignore", over="ignore"):
            excess = np.abs(a[finite] - b[finite]) - tolerance.rtol * np.abs(a[finite])
        if excess.size and not excess.max() <= tolerance.atol:
            return f"excess {excess.max():.3g} over {tolerance}"
    return None


def _float32_twin_outputs(model: onnx.ModelProto, feeds: dict) -> list[np.ndarray]:
    """Stock on the float16 model's float32 twin (same weights and inputs, upcast): the math
    FusedLSTM does for float16 (float32 throughout), where stock's float16 LSTM rounds to float16
    between layers, which unbounded or discontinuous activations can magnify."""
    twin = onnx.ModelProto()
    twin.CopyFrom(model)
    for init in twin.graph.initializer:
        if init.data_type == TensorProto.FLOAT16:
            init.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(init).astype(np.float32), init.name))
    for vi in [*twin.graph.input, *twin.graph.output, *twin.graph.value_info]:
        if vi.type.tensor_type.elem_type == TensorProto.FLOAT16:
            vi.type.tensor_type.elem_type = TensorProto.FLOAT
    options = ort.SessionOptions()
    options.log_severity_level = 4
    sess = ort.InferenceSession(twin.SerializeToString(), options, providers=["CPUExecutionProvider"])
    return sess.run(None, {i.name: (feeds[i.name].astype(np.float32) if feeds[i.name].dtype == np.float16
                                    else feeds[i.name]) for i in sess.get_inputs()})


def _check_divergence(src: Path, args: list[str], root: Path, float16: bool, rng) -> str | None:
    """A --check difference is the model's conditioning, not a wrong rewrite, when the model
    written without --check is within it on the same inputs (float16: about as close as stock to
    the float32 math; float32: within what stock moves with its inputs)."""
    dst = root / "unchecked.onnx"
    code, _, err = _run_cli(["optimize", str(src), "-o", str(dst)] +
                            [a for a in args[4:] if a in ("--freeze-inputs", "--sequence-lens-input")])
    if code != EXIT_OK:
        return f"exit {code} without --check: {err.strip()[:200]}"
    original = onnx.load(str(src))
    feeds = random_feeds(original, np.random.default_rng(0))
    twin = stock_equivalent(original)
    options = ort.SessionOptions()
    options.log_severity_level = 4
    written = onnx.load(str(dst))
    ours = InferenceSession(stock_equivalent(written).SerializeToString(), options, providers=["CPUExecutionProvider"])
    got = ours.run(None, _at_full_length(written, feeds))
    stock = ort.InferenceSession(twin.SerializeToString(), options, providers=["CPUExecutionProvider"])
    ref = stock.run(None, {i.name: feeds[i.name] for i in stock.get_inputs()})
    if float16:
        problem = _no_less_accurate(ref, got, _float32_twin_outputs(twin, feeds))
    else:
        problem = _within_conditioning(twin, feeds, ref, got, Tolerance(FLOAT32_TOL, FLOAT32_TOL), rng)
    return problem and f"--check difference beyond the model's conditioning: {problem}"


def test_fuzz_optimize_check(tmp_path):
    outcomes: Counter[str] = Counter()
    ragged: Counter[str] = Counter()  # of the written cases with --sequence-lens-input
    failures: list[str] = []
    start = time.monotonic()
    for case in range(SEED, SEED + CASES):
        rng = np.random.default_rng(case)
        root = tmp_path / f"case{case}"
        root.mkdir()
        src, args, drawn = random_case(rng, root)
        ran = _run_case(args, failures, f"seed {case} ({drawn})")
        if ran is None:
            continue
        code, out, err = ran
        problem = None
        try:
            doc = json.loads(out)
        except json.JSONDecodeError:
            doc, problem = {}, f"stdout is not one JSON document: {out[:200]!r}"
        dst = Path(doc.get("output") or args[3])
        leftovers = [p.name for p in dst.parent.glob(".*.tmp")] if dst.parent.is_dir() else []
        if problem:
            pass
        elif "internal error" in err or "Traceback" in err:
            problem = f"internal error: {err.strip()[:300]}"
        elif leftovers:
            problem = f"temporary files left: {leftovers}"
        elif code == EXIT_OK:
            unreasoned = [f for f in doc["findings"] if not f["rewritten"] and not f["reason"]]
            if drawn["bad"]:
                problem = f"wrote to a bad output {drawn['bad_output']!r}"
            elif unreasoned:
                problem = f"left without a reason: {unreasoned}"
            elif not doc["written"] or not dst.is_file():
                problem = "exit 0 but nothing written"
            else:
                problem = _verify_written(src, dst, doc, rng)
            if problem is None and drawn["sequence_lens_input"] and doc.get("check"):
                compared = doc["check"]["compared_with"]
                if "run alone" not in compared and "full length only" not in compared and \
                        "no sequence input" not in compared:
                    problem = f"--sequence-lens-input --check says nothing of the entries: {compared}"
                else:
                    ragged["each entry compared alone" if "run alone" in compared
                           else "compared at full length only (said why)"] += 1
            if problem is None:
                findings = doc["findings"]
                if not findings:
                    outcomes["written: no LSTM left to take"] += 1
                elif all(f["rewritten"] for f in findings):
                    outcomes["written: all LSTMs rewritten"] += 1
                elif any(f["rewritten"] for f in findings):
                    outcomes["written: some rewritten, some refused with a reason"] += 1
                else:
                    outcomes["written: every LSTM refused with a reason"] += 1
        elif code == EXIT_INPUT:
            if not doc.get("error") or doc.get("written") or (dst.exists() and not drawn["bad"]):
                problem = f"input error without a message, or with a file written: {doc}"
            else:
                outcomes["input error (stock cannot run the input: nothing to check against)"
                         if "stock onnxruntime cannot run" in doc["error"] else "input error (other)"] += 1
        elif code == EXIT_PARITY and not drawn["bad"]:
            problem = _check_divergence(src, args, root, drawn["dtype"] == "float16", rng)
            if problem is None:
                outcomes["--check difference on an ill-conditioned model (within its conditioning): "
                         "nothing written"] += 1
        elif code == EXIT_USAGE:
            if not drawn["bad"]:
                problem = f"usage error on good arguments: {doc.get('error')}"
            else:
                outcomes["usage error (bad -o)"] += 1
        else:
            problem = f"exit {code}: {doc.get('error', err.strip()[:300])}"
        if problem:
            failures.append(f"seed {case}: {problem} | {drawn}")
    elapsed = time.monotonic() - start
    summary = "\n".join(f"  {n:4d}  {what}" for what, n in sorted(outcomes.items()))
    summary += "".join(f"\n  {n:4d}  of them with --sequence-lens-input: {what}" for what, n in sorted(ragged.items()))
    print(f"\nfuzz: {CASES} cases in {elapsed:.0f} s\n{summary}")
    assert not failures, f"{len(failures)} of {CASES} cases failed:\n" + "\n".join(failures[:20])
    assert sum(outcomes.values()) == CASES


def test_softplus_overflow_matches_stock():
    """Found by this fuzz: Softplus overflows past ~88 (as stock's does), and the cell's peephole
    of 0 times c = inf gave NaN where stock's LSTM, without peepholes, gives 1.0 through tanh."""
    from lstm_ort.rewriter import optimize
    from lstm_ort.testing import run

    spec = LstmSpec(input_size=1, hidden_size=1, activations=["Sigmoid", "Softplus", "Tanh"])
    layers = random_layers(spec, np.random.default_rng(0))
    layers[0].W[...], layers[0].R[...], layers[0].B[...] = 1.0, 0.0, 0.0
    model = stock_model(spec, layers)
    x = np.array([50, 89, 100], np.float32).reshape(3, 1, 1)
    stock, ours = run(model, {"X": x}, fused=False)[0], run(optimize(model), {"X": x})[0]
    np.testing.assert_allclose(ours, stock, atol=1e-6)


# -------------------------------------------------------------------------------------------------
# `lstm-ort batch`: seeded random input files (dtypes exact and not, values beyond range, NaN,
# empty sequences, wrong widths, nulls inside parquet sequences) and options (bad outputs and
# providers, -o naming the input). Every outcome must be outputs equal to each sequence run alone
# (its values converted exactly), or a one-line error with the documented exit code; never a
# traceback, a changed input, a partial file or a leftover.

BATCH_CASES = int(os.environ.get("LSTM_ORT_FUZZ_BATCH_CASES", "200"))
# kind -> whether a float model takes it (exactly converted)
_SEQUENCE_KINDS = {"model dtype": True, "float64": True, "small ints": True, "nan": True, "empty": True,
                   "float64 beyond range": False, "large ints": False, "complex": False, "wrong width": False,
                   "null inside": False}


def _batch_models(root: Path) -> list[tuple[Path, LstmSpec, type]]:
    models = []
    for k, (spec, dtype) in enumerate([(LstmSpec(3, 5), np.float32),
                                       (LstmSpec(4, 3, num_layers=2, direction="bidirectional", layout=1), np.float32),
                                       (LstmSpec(2, 4, direction="reverse"), np.float16)]):
        from lstm_ort.rewriter import optimize

        model = optimize(stock_model(spec, random_layers(spec, np.random.default_rng(k)), dtype), sequence_lens_input=True)
        path = root / f"model{k}.onnx"
        onnx.save(model, str(path))
        models.append((path, spec, dtype))
    return models


def _random_sequence(rng, kind: str, spec: LstmSpec, dtype) -> np.ndarray | list:
    n = 0 if kind == "empty" else int(rng.integers(1, 9))
    width = spec.input_size + (int(rng.integers(1, 3)) if kind == "wrong width" else 0)
    x = rng.standard_normal((n, width))
    if kind == "model dtype" or kind == "empty":
        return x.astype(dtype)
    if kind in ("float64", "null inside"):
        return x
    if kind == "nan":
        x[rng.integers(0, n)] = np.nan
        return x.astype(dtype)
    if kind == "float64 beyond range":
        x[rng.integers(0, n), rng.integers(0, width)] = _pick(rng, [1e39, -3e300, 7e4 if dtype == np.float16 else 1e39])
        return x
    if kind == "small ints":
        return rng.integers(-50, 50, x.shape).astype(_pick(rng, [np.int8, np.int32, np.int64]))
    if kind == "large ints":
        return np.full(x.shape, 2**40 + 1, np.int64)
    if kind == "complex":
        return (x + 1j * rng.standard_normal(x.shape)).astype(_pick(rng, [np.complex64, np.complex128]))
    return x.astype(dtype)  # wrong width


def _alone(session, x: np.ndarray, spec: LstmSpec) -> list[np.ndarray]:
    """Each output of the model for one sequence run by itself (batch of one, its full length)."""
    axis = 1 if spec.layout == 0 else 0
    outs = session.run(None, {"X": np.expand_dims(x, axis), "sequence_lens": np.array([len(x)], np.int32)})
    batch_axes = {"Y": 2 if spec.layout == 0 else 0, "Y_h": 1 if spec.layout == 0 else 0}
    batch_axes["Y_c"] = batch_axes["Y_h"]
    return {o.name: np.take(v, 0, axis=batch_axes[o.name]) for o, v in zip(session.get_outputs(), outs)}


def test_fuzz_batch_inputs(tmp_path):
    pa = pq = None
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        pass
    models = _batch_models(tmp_path)
    sessions = {path: InferenceSession(str(path), providers=["CPUExecutionProvider"]) for path, _, _ in models}
    outcomes: Counter[str] = Counter()
    failures: list[str] = []
    for case in range(SEED, SEED + BATCH_CASES):
        rng = np.random.default_rng(10_000 + case)
        root = tmp_path / f"batch{case}"
        root.mkdir()
        model, spec, dtype = models[int(rng.integers(0, len(models)))]
        parquet = pa is not None and rng.random() < 0.4
        kinds = [_pick(rng, list(_SEQUENCE_KINDS), [8, 2, 2, 1, 1, 1, 1, 1, 1, 1]) for _ in range(int(rng.integers(1, 6)))]
        if not parquet:
            kinds = ["float64" if k == "null inside" else k for k in kinds]
        seqs = [_random_sequence(rng, k, spec, dtype) for k in kinds]
        src = root / ("in.parquet" if parquet else "in.npz")
        if parquet:
            rows = [s.tolist() for s in seqs]
            for k, kind in enumerate(kinds):
                if kind == "null inside" and rows[k]:
                    step = int(rng.integers(0, len(rows[k])))
                    if rng.random() < 0.5:
                        rows[k][step] = None
                    else:
                        rows[k][step][int(rng.integers(0, len(rows[k][step])))] = None
                elif kind == "null inside":
                    kinds[k] = "empty"
                elif kind == "complex":
                    kinds[k] = "float64"  # parquet has no complex type
                    rows[k] = np.real(seqs[k]).tolist()
                elif kind in ("small ints", "large ints"):
                    kinds[k] = "float64"  # stored in a float64 column: converted within float32's range
            try:
                pq.write_table(pa.table({"x": pa.array(rows, pa.list_(pa.list_(pa.float64())))}), src)
            except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):  # a value Arrow will not store as float64
                continue
            seqs = [r if kind == "null inside" else np.array(r, np.float64).reshape(len(r), -1 if r else spec.input_size)
                    for r, kind in zip(rows, kinds)]
        else:
            np.savez(src, **{f"s{k}": s for k, s in enumerate(seqs)})
        before = src.read_bytes()
        dst = root / ("out.parquet" if rng.random() < 0.3 and pa is not None else "out.npz")
        args = ["batch", str(model), str(src), "-o", str(dst), "--no-progress", "--json"]
        option = _pick(rng, ["none", "buckets", "max size", "outputs", "bad outputs", "bad providers", "cpu",
                             "output is input"], [6, 2, 2, 2, 1, 1, 1, 1])
        args += {"none": [], "buckets": ["--buckets", _pick(rng, ["auto", "2", "1,4,8"])],
                 "max size": ["--max-batch-size", str(int(rng.integers(1, 4)))], "outputs": ["--outputs", "Y_h,Y"],
                 "bad outputs": ["--outputs", "Z"], "bad providers": ["--providers", "gpu"],
                 "cpu": ["--providers", "cpu"], "output is input": ["-o", str(src)]}[option]
        bad_option = option in ("bad outputs", "bad providers", "output is input")
        bad_data = [k for k in kinds if not _SEQUENCE_KINDS[k]]
        want = EXIT_USAGE if bad_option else EXIT_INPUT if bad_data else EXIT_OK
        drawn = f"kinds {kinds}, option {option}, model {model.name}, {src.suffix} -> {dst.suffix}"
        ran = _run_case(args, failures, f"case {case} ({drawn})")
        if ran is None:
            continue
        code, _, err = ran
        problem = None
        leftovers = [p.name for p in root.iterdir() if p.name.startswith(".")]
        if "Traceback" in err or "internal error" in err:
            problem = f"traceback: {err[-300:]}"
        elif code != want:
            problem = f"exit {code}, expected {want}: {err.strip()[:300]}"
        elif src.read_bytes() != before:
            problem = "the input changed"
        elif leftovers:
            problem = f"left {leftovers}"
        elif code != EXIT_OK:
            said = [line for line in err.splitlines() if line.startswith("lstm-ort:")]
            if len(said) != 1 or dst.exists() and option != "output is input":
                problem = f"not one error line, or an output written: {err.strip()[:300]}"
            elif code == EXIT_INPUT and "sequence" not in said[0]:
                problem = f"the error names no sequence: {said[0]}"
            else:
                outcomes[f"exit {code}: " + ("bad option" if bad_option else f"refused {bad_data[0]}")] += 1
        else:
            problem = _batch_outputs_match(dst, seqs, sessions[model], spec, dtype, args)
            if problem is None:
                outcomes["written, every sequence as run alone"] += 1
        if problem:
            failures.append(f"case {case}: {problem} | {drawn}")
    summary = "\n".join(f"  {n:4d}  {what}" for what, n in sorted(outcomes.items()))
    print(f"\nbatch fuzz: {BATCH_CASES} cases\n{summary}")
    assert not failures, f"{len(failures)} of {BATCH_CASES} cases failed:\n" + "\n".join(failures[:20])


def _batch_outputs_match(dst: Path, seqs, session, spec: LstmSpec, dtype, args) -> str | None:
    names = ["Y_h", "Y"] if "--outputs" in args else [o.name for o in session.get_outputs()]
    if dst.suffix == ".npz":
        keys = [f"s{k}" if args[2].endswith(".npz") else str(k) for k in range(len(seqs))]
        with np.load(dst) as f:
            got = [{n: f[f"{key}/{n}" if len(names) > 1 else key] for n in names} for key in keys]
    else:
        import pyarrow.parquet as pq

        table = pq.read_table(dst)
        got = [{n: table.column(n)[k].as_py() for n in names} for k in range(len(seqs))]
    tol = 1e-5 if dtype == np.float32 else 2e-2
    for k, x in enumerate(seqs):
        want = _alone(session, np.asarray(x).astype(dtype), spec) if len(x) else None
        for n in names:
            g = np.asarray(got[k][n], np.float64)
            if want is None:  # an empty sequence: no steps, zero final states
                ok = g.size == 0 if n == "Y" else not np.any(g)
            else:
                w = want[n].astype(np.float64)
                g = g.reshape(w.shape) if g.size == w.size else g
                ok = g.shape == w.shape and np.allclose(g, w, atol=tol, rtol=tol, equal_nan=True)
            if not ok:
                return f"sequence {k} output {n} differs from the sequence run alone"
    return None
