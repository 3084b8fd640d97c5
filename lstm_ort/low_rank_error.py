"""What a low-rank factoring costs (`optimize --low-rank`), and int8 weights (`optimize --precision
int8`): the changed optimized model against the unchanged one on the same inputs, CPU, through our
kernels; for the model's outputs, and for each changed FusedLSTM node alone (its outputs when both versions get the inputs it had in the unfactored
model's run, so a node's figure is its own error, not what the nodes before it added).

Inputs: a calibration file (.npz, arrays by input name, each with a leading sample axis; inputs
it leaves out are drawn at random), or seeded random unit-scale inputs (lstm_ort.verify's
random_feeds: standard normal floats, valid integers). A node inside a subgraph or a function
cannot show its inputs, so it is fed random unit-scale X (T=8, B=4) with zero states; the
report says so.
"""

from __future__ import annotations

import math
import os

import numpy as np
import onnx
import onnxruntime as ort
from onnx import helper

from lstm_ort.ops.identity import DOMAIN, OP_TYPE, is_fused
from lstm_ort.ops.packing import input_size_from_weight_count
from lstm_ort.ops.spec import LstmSpec
from lstm_ort.rewriter.report import ErrorFigure
from lstm_ort.runtime.model_io import constant_tensors, iter_graphs
from lstm_ort.runtime.nodes import node_ranks
from lstm_ort.runtime.session import InferenceSession
from lstm_ort.verify import CPU, cast_exactly, random_feeds

RANDOM_SAMPLES = 4
_RANDOM_T, _RANDOM_B = 8, 4
_STATE_INPUTS = (0, 3, 4, 5)  # X, sequence_lens, initial_h, initial_c: what a call brings


class CalibrationError(ValueError):
    """The calibration file cannot feed this model; the message says why."""


class ErrorNotMeasured(ValueError):
    """The error is not a finite number: the model before the lossy pass has outputs that are not
    finite on the inputs (nothing to measure there), or the changed model's are not where they are."""


# What `measure` calls the two models and the error, per pass (`what`): the words of its messages.
_WORDS = {"low-rank": ("unfactored", "factored"), "int8": ("float", "int8")}


# ---- inputs ----

def samples_for(model: onnx.ModelProto, calibration=None, shapes: dict[str, list[int]] | None = None):
    """(feed dicts, what they are in words): from `calibration` (an .npz path or a list of feed
    dicts), else RANDOM_SAMPLES seeded random unit-scale draws (`shapes` as optimize --shape)."""
    if calibration is None:
        samples = [random_feeds(model, np.random.default_rng(seed), shapes=shapes) for seed in range(RANDOM_SAMPLES)]
        dims = ", ".join(f"{k} {list(v.shape)}" for k, v in samples[0].items())
        return samples, f"seeded random unit-scale inputs, {RANDOM_SAMPLES} samples: {dims}"
    if isinstance(calibration, (list, tuple)):
        inputs = _inputs(model)
        given = [{name: _feedable(inputs, name, value, f"calibration sample {k}: {name}", sample=k)
                  for name, value in feeds.items()} for k, feeds in enumerate(calibration)]
        what = f"{len(calibration)} given samples"
    else:
        given, what = _load_calibration(model, calibration), f"calibration {os.fspath(calibration)}"
        what += f", {len(given)} samples"
    samples = []
    for k, feeds in enumerate(given):
        drawn = random_feeds(model, np.random.default_rng(k), shapes={n: list(v.shape) for n, v in feeds.items()})
        samples.append({**drawn, **feeds})
    return samples, what


def _inputs(model: onnx.ModelProto) -> dict[str, onnx.ValueInfoProto]:
    inits = {i.name for i in model.graph.initializer}
    return {vi.name: vi for vi in model.graph.input if vi.name not in inits}


def _load_calibration(model: onnx.ModelProto, path) -> list[dict[str, np.ndarray]]:
    inputs = _inputs(model)
    try:
        with np.load(path, allow_pickle=False) as f:
            arrays = {name: f[name] for name in f.files}
    except (OSError, ValueError) as e:
        raise CalibrationError(f"calibration {os.fspath(path)}: {e}") from None
    unknown = sorted(set(arrays) - set(inputs))
    if not arrays or unknown:
        raise CalibrationError(f"calibration {os.fspath(path)}: " + (
            f"{', '.join(unknown)} name no input of the model (its inputs: {', '.join(inputs)})" if unknown
            else "holds no array"))
    counts = {name: a.shape[0] if a.ndim else None for name, a in arrays.items()}
    for name, a in arrays.items():
        rank = len(inputs[name].type.tensor_type.shape.dim)
        if a.ndim != rank + 1:
            raise CalibrationError(f"calibration {os.fspath(path)}: {name} has shape {list(a.shape)}; input {name} "
                                   f"has rank {rank}, so its samples stack as [samples, ...] of rank {rank + 1}")
    if len(set(counts.values())) != 1 or 0 in counts.values():
        raise CalibrationError(f"calibration {os.fspath(path)}: every array needs the same number of samples "
                               f"(leading axis, >= 1), got " + ", ".join(f"{n} {c}" for n, c in counts.items()))
    arrays = {name: _feedable(inputs, name, a, f"calibration {os.fspath(path)}: {name}") for name, a in arrays.items()}
    return [{name: np.ascontiguousarray(a[k]) for name, a in arrays.items()} for k in range(next(iter(counts.values())))]


def _feedable(inputs: dict[str, onnx.ValueInfoProto], name: str, array, what: str, sample: int | None = None):
    """`array` as input `name` takes it (converted only where exact: lstm_ort.verify.cast_exactly),
    with its fixed dimensions, every value finite; else CalibrationError. `sample`: the array is one
    sample (no leading sample axis)."""
    vi = inputs.get(name)
    if vi is None:
        raise CalibrationError(f"{what} names no input of the model (its inputs: {', '.join(inputs)})")
    array = np.asarray(array)
    dims = list(vi.type.tensor_type.shape.dim)
    lead = 0 if sample is not None else 1
    fixed = [d.dim_value if d.HasField("dim_value") else None for d in dims]
    if array.ndim == len(dims) + lead and any(want is not None and got != want
                                              for got, want in zip(array.shape[lead:], fixed)):
        wants = ", ".join(str(d) if d is not None else (dims[k].dim_param or "?") for k, d in enumerate(fixed))
        raise CalibrationError(f"{what} has shape {list(array.shape)}; input {name} takes [{wants}]"
                               + (" per sample" if lead else ""))
    dtype = onnx.helper.tensor_dtype_to_np_dtype(vi.type.tensor_type.elem_type)
    try:
        array = cast_exactly(array, dtype)
    except ValueError as e:
        raise CalibrationError(f"{what}: {e}") from None
    if array.dtype.kind == "f" and not np.isfinite(array).all():
        at = [int(i) for i in np.argwhere(~np.isfinite(array))[0]]
        where = f"sample {sample}, " if sample is not None else ""
        raise CalibrationError(f"{what} holds {array[tuple(at)].item()} at {where}{at}: the error is measured on "
                               f"finite values only")
    return array


# ---- the error ----

class _Error:
    """Max-abs and relative error accumulated over samples (float64)."""

    def __init__(self, sides: tuple[str, str] = _WORDS["low-rank"]) -> None:
        self.max_abs, self.diff2, self.ref2 = 0.0, 0.0, 0.0
        self.sides = sides  # the model before the pass and the changed one, in words
        self.not_finite: str | None = None  # why the figure is no number, if it is not

    def add(self, ref: np.ndarray, got: np.ndarray, sample: int = 0) -> None:
        if np.shape(ref) != np.shape(got):
            raise RuntimeError(f"shapes differ: {list(np.shape(ref))} and {list(np.shape(got))}")
        if not np.issubdtype(np.asarray(ref).dtype, np.number):
            ref, got = (np.asarray(ref) != np.asarray(got)).astype(np.float64), np.zeros(np.shape(ref))
        a, b = np.asarray(ref, np.float64), np.asarray(got, np.float64)
        if self.not_finite is None:
            before, after = self.sides
            for side, values in ((before, a), (after, b)):
                if not np.isfinite(values).all():
                    value = values[~np.isfinite(values)][0]
                    self.not_finite = (f"the {side} model's output holds {value} on sample {sample}" +
                                       (": no error can be measured there" if side == before else
                                        f" where the {before} model's is finite"))
                    break
        with np.errstate(invalid="ignore"):
            d = np.where((a == b) | (np.isnan(a) & np.isnan(b)), 0.0, np.abs(a - b))
        if d.size:
            self.max_abs = max(self.max_abs, float(d.max())) if not np.isnan(d).any() else float("nan")
        self.diff2 += float(np.square(d).sum())
        self.ref2 += float(np.square(np.nan_to_num(a)).sum())

    def figure(self, name: str, inputs: str = "") -> ErrorFigure:
        relative = math.sqrt(self.diff2 / self.ref2) if self.ref2 > 0 else (0.0 if self.diff2 == 0 else math.inf)
        return ErrorFigure(name, self.max_abs, float("nan") if math.isnan(self.diff2) else relative, inputs)


def _session(model: onnx.ModelProto) -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.log_severity_level = 3
    return InferenceSession(model.SerializeToString(), options, providers=CPU)


def _fused(model: onnx.ModelProto) -> list[tuple[onnx.NodeProto, bool]]:
    """Every FusedLSTM node with whether it is in the main graph (whose values a run can show)."""
    return [(n, g is model.graph) for g in iter_graphs(model) for n in g.node
            if is_fused(n)]


def _node_model(model: onnx.ModelProto, node: onnx.NodeProto, consts: dict, runtime: dict[str, int]) -> onnx.ModelProto:
    """`node` alone: its constant inputs copied, `runtime` (name -> element type) as graph inputs,
    any other input left out (a random-fed node's states)."""
    ins = [n if n in runtime or n in consts else "" for n in node.input]
    inputs, inits = [], []
    for name in dict.fromkeys(ins):  # one value may feed two inputs (the same zero state as h and c)
        if not name:
            continue
        if name in runtime:
            inputs.append(helper.make_tensor_value_info(name, runtime[name], None))
        elif name in consts:
            inits.append(consts[name])
    elem = runtime.get(ins[0], consts[ins[1]].data_type)  # X's type (W may be int8)
    outs = ["node_Y", "node_Y_h", "node_Y_c"]
    single = helper.make_node(OP_TYPE, ins, outs, name=node.name, domain=DOMAIN)
    single.attribute.extend(node.attribute)
    graph = helper.make_graph([single], "node", inputs, [helper.make_tensor_value_info(o, elem, None) for o in outs],
                              inits)
    out = helper.make_model(graph, opset_imports=list(model.opset_import))
    out.ir_version = model.ir_version
    return out


def _runtime_inputs(node: onnx.NodeProto, consts: dict) -> dict[str, int]:
    """The node's inputs a call brings (not constants), with their element types."""
    elem = consts[node.input[1]].data_type
    out = {}
    for k in _STATE_INPUTS:
        if k < len(node.input) and node.input[k] and node.input[k] not in consts:
            out[node.input[k]] = onnx.TensorProto.INT32 if k == 3 else elem
    return out


def _random_node_feed(node: onnx.NodeProto, consts: dict, seed: int) -> dict[str, np.ndarray] | None:
    """X for a node whose inputs cannot be shown: random unit-scale [T, B, I] (or layout 1)."""
    spec = LstmSpec.from_node(node)
    H, L, D = spec.hidden_size, spec.num_layers, spec.num_directions
    ranks = node_ranks(node)
    w = consts.get(node.input[1])
    f = consts.get(node.input[7]) if len(node.input) > 7 and node.input[7] else None
    if w is None:
        return None
    I = input_size_from_weight_count(int(np.prod(w.dims)), L, D, H, ranks, int(np.prod(f.dims)) if f is not None else 0)
    if I is None:
        return None
    shape = (_RANDOM_T, _RANDOM_B, I) if spec.layout == 0 else (_RANDOM_B, _RANDOM_T, I)
    dtype = helper.tensor_dtype_to_np_dtype(w.data_type)
    return {node.input[0]: np.random.default_rng(seed).standard_normal(shape).astype(dtype)}


def is_factored(node: onnx.NodeProto, constants: dict) -> bool:
    return any(a.name.startswith("rank_") for a in node.attribute)


def measure(unfactored: onnx.ModelProto, factored: onnx.ModelProto,
            samples: list[dict[str, np.ndarray]], changed=is_factored,
            what: str = "low-rank") -> tuple[list[ErrorFigure], list[ErrorFigure]]:
    """(per model output, per FusedLSTM node) errors of `factored` against `unfactored`; a node is
    measured where `changed(node of factored, its constants)` says the pass changed it. `what`
    names the pass in messages ("low-rank" or "int8", _WORDS)."""
    consts = {"unfactored": constant_tensors(unfactored), "factored": constant_tensors(factored)}
    nodes = list(zip(_fused(unfactored), _fused(factored)))
    # The unfactored model shows the call inputs of its main-graph nodes as extra outputs.
    shown = {}
    for (node, main), _ in nodes:
        if main:
            shown.update({n: t for n, t in _runtime_inputs(node, consts["unfactored"]).items()})
    graph_inputs = {vi.name for vi in unfactored.graph.input}
    capture = onnx.ModelProto()
    capture.CopyFrom(unfactored)
    names = [o.name for o in unfactored.graph.output]
    extra = [n for n in shown if n not in graph_inputs and n not in names]
    capture.graph.output.extend(helper.make_tensor_value_info(n, shown[n], None) for n in extra)
    ref_session, got_session = _session(capture), _session(factored)
    feed_names = {i.name for i in ref_session.get_inputs()}
    outputs = {name: _Error(_WORDS[what]) for name in names}
    seen: list[dict[str, np.ndarray]] = []
    for k, sample in enumerate(samples):
        feeds = {name: v for name, v in sample.items() if name in feed_names}
        ref = ref_session.run(None, feeds)
        got = got_session.run(None, feeds)
        for name, a, b in zip(names, ref, got):
            outputs[name].add(a, b, k)
        seen.append({**feeds, **dict(zip(extra, ref[len(names):]))})
    del ref_session, got_session
    for name in names:
        _require_finite(f"output {name}", outputs[name], what)

    per_node = []
    for k, ((node, main), (twin, _)) in enumerate(nodes):
        if not changed(twin, consts["factored"]):
            continue  # kept as it was: the same node
        error = _Error(_WORDS[what])
        runtime = _runtime_inputs(node, consts["unfactored"])
        if main:
            feeds_list, how = [{n: s[n] for n in runtime} for s in seen], "captured"
        else:
            feeds_list = [_random_node_feed(node, consts["unfactored"], seed) for seed in range(len(samples))]
            runtime = {node.input[0]: runtime.get(node.input[0], consts["unfactored"][node.input[1]].data_type)}
            how = "random unit-scale (the node is inside a subgraph or function)"
        if any(f is None for f in feeds_list):
            continue
        ref = _session(_node_model(unfactored, node, consts["unfactored"], runtime))
        got = _session(_node_model(factored, twin, consts["factored"], runtime))
        for sample, feeds in enumerate(feeds_list):
            for a, b in zip(ref.run(None, feeds), got.run(None, feeds)):
                error.add(a, b, sample)
        _require_finite(f"node {node.name or f'FusedLSTM #{k}'}", error, what)
        per_node.append(error.figure(node.name or f"FusedLSTM #{k}", how))
    return [outputs[n].figure(n) for n in names], per_node


def _require_finite(where: str, error: _Error, what: str) -> None:
    if error.not_finite:
        raise ErrorNotMeasured(f"{what} error: not finite on {where}: {error.not_finite}")
