"""Checking an optimized model against its original: inputs for any model, the stock-runnable
form of the original, tolerances, and the parity run that `lstm-ort optimize --check` and the
tests share."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

import numpy as np
import onnx
import onnxruntime as ort
from onnx import numpy_helper

from lstm_ort.ops.identity import DEFAULT_PRECISION, PRECISIONS, require_choice
from lstm_ort.runtime.model_io import iter_graphs
from lstm_ort.runtime.session import InferenceSession

CPU = ["CPUExecutionProvider"]

# Ops that hand an integer input on unchanged in value (so its role is where it ends up).
_PASS_THROUGH = {"Cast", "CastLike", "Identity", "Reshape", "Squeeze", "Unsqueeze", "Flatten", "Expand"}
_RECURRENT = {"LSTM", "GRU", "RNN"}
_KEEPS_AXES = {"Cast", "CastLike", "Identity", "Slice", "Split"}  # an input's axes stay where they are
_LARGE_BYTES = 1 << 16


# ---------------------------------------------------------------------------------------------
# Feeds

def random_feeds(model: onnx.ModelProto, rng: np.random.Generator, dim: int = 3,
                 shapes: dict[str, list[int]] | None = None) -> dict[str, np.ndarray]:
    """Inputs for every graph input: `shapes` where given (`--shape`), else unknown dimensions
    (symbolic, absent, or -1 as Paddle writes them) become `dim` (one value per symbolic name);
    floats are standard normal, and integers get values valid for their role: sequence lengths
    (an LSTM/GRU/RNN's sequence_lens, FusedLSTM's) spread over [1, T], token ids (a Gather's
    indices) below the size of the gathered axis, anything else 1."""
    inits = {i.name for i in model.graph.initializer}
    symbols: dict[str, int] = {}
    given = shapes or {}
    shapes, types = {}, {}
    for vi in model.graph.input:
        if vi.name in inits or not vi.type.HasField("tensor_type"):
            continue
        tt = vi.type.tensor_type
        shapes[vi.name] = list(given[vi.name]) if vi.name in given else [
            d.dim_value if d.HasField("dim_value") and d.dim_value >= 0 else
            symbols.setdefault(d.dim_param, dim) if d.dim_param else dim for d in tt.shape.dim]
        types[vi.name] = onnx.helper.tensor_dtype_to_np_dtype(tt.elem_type)
    ints = [name for name, t in types.items() if np.issubdtype(t, np.integer)]
    uses = _uses(model) if ints else {}
    roles = {name: _role(uses, name) for name in ints}
    known = _static_shapes(model, shapes) if any(r is not None for r in roles.values()) else {}
    feeds = {}
    for name, shape in shapes.items():
        dtype = types[name]
        if name not in roles:
            feeds[name] = rng.standard_normal(shape).astype(dtype) if dtype != np.bool_ else \
                rng.integers(0, 2, shape).astype(bool)
            continue
        role = roles[name]
        count = int(np.prod(shape))
        if role is not None and role[0] == "lengths":
            T = _dim_of(role[1], role[2], shapes, known)
            if T is None or T < 1:
                values = np.ones(count, np.int64)
            else:  # distinct lengths from T down to 1, in random order
                values = rng.permutation(np.linspace(T, 1, num=max(count, 1)).round().astype(np.int64))[:count]
        elif role is not None and role[0] == "ids":
            bound = _dim_of(role[1], role[2], shapes, known)
            values = rng.integers(0, bound, count) if bound else np.zeros(count, np.int64)
        else:
            values = np.ones(count, np.int64)
        feeds[name] = values.reshape(shape).astype(dtype)
    return feeds


def cast_exactly(values, dtype) -> np.ndarray:
    """`values` as `dtype` where no value changes: integers and booleans to a type that holds each
    exactly, floats to a narrower float within its range (rounded, as any float conversion is),
    whole floats to an integer type that holds them; else a ValueError naming the first value
    that does not fit (the caller says whose). Complex numbers, strings and objects never convert."""
    a, dtype = np.asarray(values), np.dtype(dtype)
    if a.dtype == dtype:
        return a
    if a.dtype.kind not in "biuf":
        first = a.reshape(-1)[0].item() if a.size else None
        raise ValueError(f"{a.dtype} values{f' ({first!r}, ...)' if a.size else ''} do not convert to {dtype}")
    with np.errstate(all="ignore"):
        out = a.astype(dtype)
        if dtype.kind == "f" and a.dtype.kind == "f":
            bad = np.isfinite(a) & ~np.isfinite(out)  # beyond the range; NaN and infinities stay as they are
        else:
            bad = out.astype(a.dtype) != a  # NaN never equals itself: not an integer
    if bad.any():
        at = [int(i) for i in np.argwhere(bad)[0]]
        raise ValueError(f"value {a[tuple(at)].item()!r} at {at} does not fit {dtype} exactly")
    return out


def input_batch_axes(*models: onnx.ModelProto) -> dict[str, int | None]:
    """Where the graph inputs hold their batch entries (None: they hold none), from what reads them
    in any of `models` (an original and its optimized form share input names): a recurrent node's
    lengths ([batch]) or initial states ([D, batch, H]; [batch, D, H] in layout 1), or its weights
    (no batch axis), through ops that keep the axes (Cast, Identity, Slice, Split) or move them
    (Transpose, Unsqueeze, Squeeze with constant axes); scalars hold none. Inputs found neither way
    are absent: where their batch entries are is unknown."""
    found: dict[str, int | None] = {}
    for model in models:
        uses, consts = _uses(model), _int_constants(model)
        inits = {t.name for t in model.graph.initializer}
        for vi in model.graph.input:
            if vi.name in inits or vi.name in found:
                continue
            tt = vi.type.tensor_type
            rank = len(tt.shape.dim) if tt.HasField("shape") else None
            if rank == 0:
                found[vi.name] = None
                continue
            pending, seen = [(vi.name, list(range(rank)) if rank is not None else None)], set()
            while pending and vi.name not in found:
                value, where = pending.pop()  # where[k]: the input's axis that is axis k of value (None: not one)
                if value in seen:
                    continue
                seen.add(value)
                for node in uses.get(value, []):
                    index = next(k for k, n in enumerate(node.input) if n == value)
                    role = _recurrent_role(node, index)
                    if role is not None:
                        axis = role[1]
                        if role[0] == "weights":
                            found[vi.name] = None
                        elif where is None:
                            found[vi.name] = axis
                        elif axis < len(where) and where[axis] is not None:
                            found[vi.name] = where[axis]
                        if vi.name in found:
                            break
                        continue
                    moved = _moved_axes(node, index, where, consts)
                    if moved is not _STOP:
                        pending.extend((out, moved) for out in node.output[:None if node.op_type == "Split" else 1]
                                       if out)
    return found


_STOP = object()


def _recurrent_role(node: onnx.NodeProto, index: int):
    """("lengths" | "states", the batch axis) or ("weights", None) for input `index` of a
    recurrent node (stock LSTM/GRU/RNN or FusedLSTM), else None."""
    stock = node.domain in ("", "ai.onnx") and node.op_type in _RECURRENT
    fused = node.domain == "lstm_ort" and node.op_type == "FusedLSTM"
    if not (stock or fused) or index == 0:
        return None
    layout = next((a.i for a in node.attribute if a.name == "layout"), 0)
    lengths, states = (4, (5, 6)) if stock else (3, (4, 5))
    if index == lengths:
        return "lengths", 0
    if index in states:
        return "states", 1 - layout
    return "weights", None


def _moved_axes(node: onnx.NodeProto, index: int, where: list | None, consts: dict):
    """Where the input's axes are in `node`'s output (as input_batch_axes tracks them), or _STOP
    where the op is not one that keeps or moves axes knowably."""
    if node.domain not in ("", "ai.onnx") or index != 0:
        return _STOP
    attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
    if node.op_type in _KEEPS_AXES:
        return where
    if where is None:
        return _STOP
    if node.op_type == "Transpose":
        perm = list(attrs.get("perm") or reversed(range(len(where))))
        return [where[p] for p in perm] if sorted(perm) == list(range(len(where))) else _STOP
    if node.op_type in ("Unsqueeze", "Squeeze"):
        axes = attrs.get("axes")
        if axes is None and len(node.input) > 1:
            axes = consts.get(node.input[1])
        if axes is None or not len(axes):
            return _STOP
        if node.op_type == "Squeeze":
            gone = {int(a) % len(where) for a in axes}
            return [w for k, w in enumerate(where) if k not in gone]
        rank = len(where) + len(axes)
        added, rest = {int(a) % rank for a in axes}, iter(where)
        return [None if k in added else next(rest) for k in range(rank)]
    return _STOP


def _int_constants(model: onnx.ModelProto) -> dict[str, list[int]]:
    """Small integer initializers and Constant nodes of the main graph (axes, shapes), by name."""
    out = {}
    for t in model.graph.initializer:
        if t.data_type in (onnx.TensorProto.INT64, onnx.TensorProto.INT32) and len(t.dims) <= 1 and \
                (not t.dims or t.dims[0] <= 16):
            out[t.name] = [int(v) for v in np.atleast_1d(numpy_helper.to_array(t))]
    for node in model.graph.node:
        if node.op_type == "Constant" and node.domain in ("", "ai.onnx"):
            for a in node.attribute:
                if a.name == "value" and a.t.data_type in (onnx.TensorProto.INT64, onnx.TensorProto.INT32):
                    out[node.output[0]] = [int(v) for v in np.atleast_1d(numpy_helper.to_array(a.t))]
    return out


def _uses(model: onnx.ModelProto) -> dict[str, list[onnx.NodeProto]]:
    """Value name -> the nodes reading it, in the main graph and its subgraphs (functions have
    their own names and are not followed)."""
    uses: dict[str, list] = {}

    def walk(graph):
        for node in graph.node:
            for name in node.input:
                if name:
                    uses.setdefault(name, []).append(node)
            for attr in node.attribute:
                if attr.type == onnx.AttributeProto.GRAPH:
                    walk(attr.g)
                for g in attr.graphs:
                    walk(g)

    walk(model.graph)
    return uses


def _role(uses: dict[str, list[onnx.NodeProto]], name: str):
    """("lengths", X name, time axis), ("ids", data name, axis), or None."""
    seen, pending = set(), [name]
    while pending:
        value = pending.pop()
        if value in seen:
            continue
        seen.add(value)
        for node in uses.get(value, []):
            attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
            index = [k for k, n in enumerate(node.input) if n == value]
            if node.op_type in _RECURRENT and node.domain in ("", "ai.onnx") and 4 in index:
                return "lengths", node.input[0], 1 if attrs.get("layout", 0) == 1 else 0
            if node.op_type == "FusedLSTM" and node.domain == "lstm_ort" and 3 in index:
                return "lengths", node.input[0], 1 if attrs.get("layout", 0) == 1 else 0
            if node.op_type == "Gather" and node.domain in ("", "ai.onnx") and 1 in index:
                return "ids", node.input[0], int(attrs.get("axis", 0))
            if node.op_type in _PASS_THROUGH and 0 in index and node.output:
                pending.append(node.output[0])
    return None


def _dim_of(value: str, axis: int, shapes: dict, known: dict) -> int | None:
    shape = shapes.get(value) or known.get(value)
    if shape is None or not -len(shape) <= axis < len(shape):
        return None
    dim = shape[axis]
    return dim if isinstance(dim, int) and dim >= 0 else None


def _static_shapes(model: onnx.ModelProto, shapes: dict[str, list[int]]) -> dict[str, list]:
    """Shapes of the main graph's values when the inputs have `shapes`: onnx shape inference on a
    copy of the model without its large initializers' data."""
    graph = model.graph
    light = onnx.ModelProto(ir_version=model.ir_version, opset_import=model.opset_import, functions=model.functions)
    g = light.graph
    g.node.extend(graph.node)
    g.output.extend(graph.output)
    for vi in graph.input:
        if vi.name in shapes:
            fixed = onnx.helper.make_tensor_value_info(vi.name, vi.type.tensor_type.elem_type, shapes[vi.name])
            g.input.append(fixed)
        elif not any(t.name == vi.name for t in graph.initializer):
            g.input.append(vi)
    for t in graph.initializer:
        if _nbytes(t) > _LARGE_BYTES:
            g.input.append(onnx.helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)))
        else:
            g.initializer.append(t)
    out = {name: list(shape) for name, shape in shapes.items()}
    try:
        inferred = onnx.shape_inference.infer_shapes(light, strict_mode=False, data_prop=True)
    except Exception:
        return out
    for t in graph.initializer:
        out.setdefault(t.name, list(t.dims))
    for vi in [*inferred.graph.value_info, *inferred.graph.output]:
        if vi.type.HasField("tensor_type") and vi.type.tensor_type.HasField("shape"):
            out.setdefault(vi.name, [d.dim_value if d.HasField("dim_value") else None
                                     for d in vi.type.tensor_type.shape.dim])
    return out


def _nbytes(t: onnx.TensorProto) -> int:
    count = int(np.prod(t.dims)) if len(t.dims) else 1
    return count * onnx.helper.tensor_dtype_to_np_dtype(t.data_type).itemsize if t.data_type else 0


# ---------------------------------------------------------------------------------------------
# What stock onnxruntime can run

def has_layout1_lstm(model: onnx.ModelProto) -> bool:
    return any(_is_layout1_lstm(n) for g in iter_graphs(model) for n in g.node)


def _is_layout1_lstm(node: onnx.NodeProto) -> bool:
    return node.op_type == "LSTM" and node.domain in ("", "ai.onnx") and any(
        a.name == "layout" and a.i == 1 for a in node.attribute)


def stock_equivalent(model: onnx.ModelProto, *, in_place: bool = False) -> onnx.ModelProto:
    """The model with every layout-1 LSTM (which stock's CPU provider refuses) replaced by its
    layout-0 twin between Transposes: the same network, for stock onnxruntime to run."""
    if not in_place:
        copy = onnx.ModelProto()
        copy.CopyFrom(model)
        model = copy
    taken = {n for g in iter_graphs(model) for node in g.node for n in [*node.input, *node.output, node.name]}
    taken |= {v.name for g in iter_graphs(model) for v in [*getattr(g, "input", []), *getattr(g, "initializer", [])]}

    def fresh(base):
        name, k = base, 1
        while name in taken:
            name, k = f"{base}_{k}", k + 1
        taken.add(name)
        return name

    for graph in iter_graphs(model):
        nodes = []
        for node in graph.node:
            if not _is_layout1_lstm(node):
                nodes.append(node)
                continue
            base = node.name or "lstm"
            for k, perm in ((0, [1, 0, 2]), (5, [1, 0, 2]), (6, [1, 0, 2])):
                if k < len(node.input) and node.input[k]:
                    moved = fresh(f"{base}_layout0_in{k}")
                    nodes.append(onnx.helper.make_node("Transpose", [node.input[k]], [moved], perm=perm,
                                                       name=fresh(f"{base}_layout0_in{k}")))
                    node.input[k] = moved
            for a in node.attribute:
                if a.name == "layout":
                    a.i = 0
            after = []
            for k, perm in ((0, [2, 0, 1, 3]), (1, [1, 0, 2]), (2, [1, 0, 2])):
                if k < len(node.output) and node.output[k]:
                    original = node.output[k]
                    node.output[k] = fresh(f"{base}_layout0_out{k}")
                    after.append(onnx.helper.make_node("Transpose", [node.output[k]], [original], perm=perm,
                                                       name=fresh(f"{base}_layout0_out{k}")))
            nodes.append(node)
            nodes.extend(after)
        if len(nodes) != len(graph.node):
            kept = [onnx.NodeProto() for _ in nodes]
            for dst, src in zip(kept, nodes):
                dst.CopyFrom(src)
            del graph.node[:]
            graph.node.extend(kept)
    return model


# ---------------------------------------------------------------------------------------------
# Tolerances and the comparison

@dataclass(frozen=True)
class Tolerance:
    """Outputs match where |ours - stock| <= atol + rtol * |stock|, everywhere; with `of_max`, rtol
    applies to the largest |stock| of each output rather than each element's."""

    atol: float
    rtol: float = 0.0
    of_max: bool = False

    def __str__(self) -> str:
        scale = "max|stock|" if self.of_max else "|stock|"
        return f"{self.atol:g}" if not self.rtol else f"{self.atol:g} + {self.rtol:g} x {scale}"

    def excess(self, stock: np.ndarray, diff: np.ndarray) -> float:
        """Largest diff beyond the relative part (the check passes where this is <= atol)."""
        magnitude = np.abs(stock.astype(np.float64))
        if self.of_max:
            magnitude = magnitude.max(initial=0.0)
        return float((diff - self.rtol * magnitude).max())


# float32: 1e-4, and 1e-5 of the outputs' magnitude where they are large (an LSTM with unbounded
# activations can reach thousands, where one float32 step is ~1e-4 and summation order shows).
FLOAT32_TOLERANCE = Tolerance(1e-4, 1e-5)
# float16 holds 11 significant bits: allow 4 of its steps (2^-10 each, relative) at the outputs'
# magnitude; ours computes in float32 and rounds once, stock rounds between layers.
FLOAT16_TOLERANCE = Tolerance(4 * 2.0 ** -10, 4 * 2.0 ** -10)


# The bound of each reduced precision mode (docs/ops.md, "Precision modes"): this one table serves
# `lstm-ort optimize --check` and the tests. atol at unit scale, and the same fraction of the
# outputs' magnitude where they are larger (rounding the operands errs relative to their size, as
# FLOAT16_TOLERANCE allows). "auto" may run tf32, so it is held to tf32's bound; fp32 has no entry:
# it is held to the element type's tolerance (default_tolerance), as before precision modes.
PRECISION_TOLERANCES = {
    "tf32": Tolerance(2e-3, 2e-3),
    "fp16": Tolerance(2e-2, 2e-2),
    "bf16": Tolerance(5e-2, 5e-2),
    "auto": Tolerance(2e-3, 2e-3),
}


# int8 FusedLSTM nodes against stock's DynamicQuantizeLSTM on one thread (docs/ops.md, "int8
# weights"): the levels and integer products are the same, but the float arithmetic around them is
# not, and a value within an ulp of a rounding boundary takes the other level. Such a step moves
# a gate by up to a level x |w|, the recurrence carries it on, and a model's own quantized layers
# after the LSTM step their levels too: a part of each output's magnitude, not of each element's.
INT8_TOLERANCE = Tolerance(2e-2, 5e-2, of_max=True)


def default_tolerance(model: onnx.ModelProto, precision: str = DEFAULT_PRECISION) -> Tolerance:
    """By element type (float16 if any graph input or output is float16), loosened to the bound
    of a reduced ``precision`` mode, and to INT8_TOLERANCE for a model with DynamicQuantizeLSTM."""
    values = [*model.graph.input, *model.graph.output]
    if any(v.type.tensor_type.elem_type == onnx.TensorProto.FLOAT16 for v in values):
        tolerance = precision_tolerance(precision, FLOAT16_TOLERANCE)
    else:
        tolerance = precision_tolerance(precision, FLOAT32_TOLERANCE)
    return looser(tolerance, INT8_TOLERANCE) if has_dynamic_quantize_lstm(model) else tolerance


def has_dynamic_quantize_lstm(model: onnx.ModelProto) -> bool:
    return any(n.op_type == "DynamicQuantizeLSTM" for g in iter_graphs(model) for n in g.node)


def precision_tolerance(precision: str, by_type: Tolerance = FLOAT32_TOLERANCE) -> Tolerance:
    """What the outputs of a model whose element type allows ``by_type`` are held to, against FP32
    stock onnxruntime, when its FusedLSTM nodes run in ``precision``: the looser of the two."""
    require_choice("precision", precision, PRECISIONS)
    return looser(by_type, PRECISION_TOLERANCES.get(precision, by_type))


def looser(a: Tolerance, b: Tolerance) -> Tolerance:
    return Tolerance(max(a.atol, b.atol), max(a.rtol, b.rtol), a.of_max or b.of_max)


class CheckUnavailable(Exception):
    """There is nothing to compare against: stock onnxruntime cannot run the original, or the
    inputs or outputs hold no values to compare."""


class CheckFailed(Exception):
    """The optimized model does not run, or its outputs are not those of the original."""


@dataclass
class ParityResult:
    max_abs: float  # largest |ours - stock| (NaN where only one side is NaN)
    excess: float  # largest |ours - stock| beyond the tolerance's relative part: the check passes when <= atol
    compared_with: str  # "stock onnxruntime", or "stock onnxruntime (layout-1 LSTMs as layout 0)", and how

    def passes(self, tolerance: Tolerance) -> bool:
        return bool(self.excess <= tolerance.atol)


class Comparison:
    """Outputs compared so far: the largest |ours - stock| and its excess over the tolerance's
    relative part, NaN once only one side is NaN; and how many values were compared, for a check
    that compared none is no pass (``result`` raises CheckUnavailable)."""

    def __init__(self, tolerance: Tolerance) -> None:
        self.tolerance, self.worst, self.excess, self.values = tolerance, 0.0, 0.0, 0

    def add(self, name: str, ref: np.ndarray, got: np.ndarray, where: str = "") -> None:
        if np.shape(ref) != np.shape(got):
            raise CheckFailed(f"output {name}{where} has shape {list(np.shape(got))}, the original's "
                              f"{list(np.shape(ref))}")
        d = _abs_diff(ref, got)
        self.values += d.size
        if not d.size or np.isnan(self.worst):
            return
        if np.isnan(d).any():
            self.worst = self.excess = float("nan")
            return
        self.worst = max(self.worst, float(d.max()))
        self.excess = max(self.excess, self.tolerance.excess(np.asarray(ref), d))

    def result(self, compared_with: str) -> ParityResult:
        if not self.values:
            raise CheckUnavailable("nothing to compare: every output is empty")
        return ParityResult(self.worst, self.excess, compared_with)


Model = onnx.ModelProto | str | os.PathLike


def require_values(feeds: dict[str, np.ndarray]) -> None:
    """CheckUnavailable for inputs without a value: their outputs would be empty, nothing compared
    (and stock onnxruntime's LSTM aborts the process on an empty batch)."""
    for name, value in feeds.items():
        if np.size(value) == 0:
            raise CheckUnavailable(f"nothing to compare: input {name} has shape {list(np.shape(value))}, no values")


def stock_session(original: Model, *, consume: bool = False,
                  threads: int | None = None) -> tuple[ort.InferenceSession, str]:
    """Stock onnxruntime (CPU) on the original, layout-1 LSTMs as their layout-0 twins, and what it
    is in words; CheckUnavailable when it cannot load it. `consume`: a proto may be changed.
    `threads`: stock's intra-op threads (STOCK_THREADS_INT8 for DynamicQuantizeLSTM models)."""
    compared_with = "stock onnxruntime"
    if isinstance(original, onnx.ModelProto) and has_layout1_lstm(original):
        original = stock_equivalent(original, in_place=consume)
        compared_with += " (layout-1 LSTMs as layout 0)"
    if threads:
        compared_with += f" on {threads} thread{'s' if threads > 1 else ''}"
    try:
        return ort.InferenceSession(_source(original), _quiet(threads), providers=CPU), compared_with
    except Exception as e:
        raise CheckUnavailable(f"stock onnxruntime cannot run the original model: {clean_message(e)}") from e


def optimized_session(optimized: Model, *, consume: bool = False, twin: bool = False) -> ort.InferenceSession:
    """Ours (CPU) on the optimized model, LSTMs the rewrite left in layout 1 as their twins (a
    path's with `twin`); CheckFailed when it cannot load it."""
    if isinstance(optimized, onnx.ModelProto):
        if has_layout1_lstm(optimized):
            optimized = stock_equivalent(optimized, in_place=consume)
    elif twin:
        optimized = stock_equivalent(onnx.load(os.fspath(optimized)), in_place=True)
    try:
        return InferenceSession(_source(optimized), _quiet(), providers=CPU)
    except Exception as e:
        raise CheckFailed(f"the optimized model does not run: {clean_message(e)}") from e


def run_stock(session: ort.InferenceSession, feeds: dict, what: str = "") -> list[np.ndarray]:
    try:
        return session.run(None, _feeds_for(session, feeds))
    except Exception as e:
        raise CheckUnavailable(f"stock onnxruntime cannot run the original model{what}: {clean_message(e)}") from e


def run_optimized(session: ort.InferenceSession, feeds: dict, what: str = "") -> list[np.ndarray]:
    try:
        return session.run(None, _feeds_for(session, feeds))
    except Exception as e:
        raise CheckFailed(f"the optimized model does not run{what}: {clean_message(e)}") from e


def output_names(session: ort.InferenceSession, ours: ort.InferenceSession) -> list[str]:
    names = [o.name for o in session.get_outputs()]
    if len(ours.get_outputs()) != len(names):
        raise CheckFailed(f"the optimized model has {len(ours.get_outputs())} outputs, the original {len(names)}")
    return names


def parity(original: Model, optimized: Model, feeds: dict[str, np.ndarray] | None = None,
           tolerance: Tolerance | None = None, *, consume: bool = False,
           twin_optimized: bool = False, stock_threads: int | None = None) -> ParityResult:
    """Stock onnxruntime on the original against ours on the optimized model, CPU, one run on
    `feeds` (random_feeds of the original if not given). Models may be protos or paths (a path
    lets onnxruntime read the file itself, so no serialized copy is held here); `consume`: the
    protos may be changed. Layout-1 LSTMs (stock's CPU provider refuses them) run as their
    layout-0 twins: the original's always, a path's with `twin_optimized`. `stock_threads`: stock's
    intra-op threads (STOCK_THREADS_INT8 for DynamicQuantizeLSTM models). Raises CheckUnavailable
    or CheckFailed."""
    if feeds is None:
        proto = original if isinstance(original, onnx.ModelProto) else onnx.load(os.fspath(original))
        feeds = random_feeds(proto, np.random.default_rng(0))
        del proto
    require_values(feeds)
    comparison = Comparison(tolerance or FLOAT32_TOLERANCE)
    stock, compared_with = stock_session(original, consume=consume, threads=stock_threads)
    ref, names = run_stock(stock, feeds), [o.name for o in stock.get_outputs()]
    del stock  # before ours loads: one session at a time
    got = run_optimized(optimized_session(optimized, consume=consume, twin=twin_optimized), feeds)
    if len(ref) != len(got):
        raise CheckFailed(f"the optimized model has {len(got)} outputs, the original {len(ref)}")
    for name, a, b in zip(names, ref, got):
        comparison.add(name, a, b)
    return comparison.result(compared_with)


def chained_parity(original: Model, optimized: Model, feeds: dict[str, np.ndarray], carry: dict[str, str],
                   calls: int, tolerance: Tolerance | None = None, stock_threads: int | None = None) -> ParityResult:
    """parity() over `calls` chained calls of a streaming model: after each call, output `out`
    feeds input `carry[out]` of the next one, each side its own outputs, so states drift apart
    only as far as the two computations really do."""
    require_values(feeds)
    stock, compared_with = stock_session(original, threads=stock_threads)
    ours = optimized_session(optimized)
    names = output_names(stock, ours)
    unknown = [f"{o}={i}" for o, i in carry.items() if o not in names or i not in {x.name for x in stock.get_inputs()}]
    if unknown:
        raise CheckUnavailable(f"--carry names no output/input pair of the model: {', '.join(unknown)}")
    comparison = Comparison(tolerance or FLOAT32_TOLERANCE)
    a, b = dict(feeds), dict(feeds)
    for _ in range(calls):
        ref = dict(zip(names, run_stock(stock, a)))
        got = dict(zip(names, run_optimized(ours, b)))
        for name in names:
            comparison.add(name, ref[name], got[name])
        if np.isnan(comparison.worst):
            break
        for out, inp in carry.items():
            a[inp], b[inp] = ref[out], got[out]
    return comparison.result(f"{compared_with} over {calls} chained calls")


# Stock's DynamicQuantizeLSTM quantizes h per step over the rows one thread runs: on one thread
# that is every row, the semantics of FusedLSTM's int8 weights (docs/ops.md, "int8 weights").
STOCK_THREADS_INT8 = 1


def _quiet(threads: int | None = None) -> ort.SessionOptions:
    """Session options that log nothing; `threads`: intra-op threads (None: onnxruntime's default)."""
    options = ort.SessionOptions()
    options.log_severity_level = 4
    if threads:
        options.intra_op_num_threads = threads
    return options


def _source(model: Model):
    return model.SerializeToString() if isinstance(model, onnx.ModelProto) else os.fspath(model)


def _feeds_for(sess, feeds: dict) -> dict:
    names = {i.name for i in sess.get_inputs()}
    return {k: v for k, v in feeds.items() if k in names}


def _abs_diff(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """|a - b| in float64, 0 where both are the same infinity or both NaN, NaN where only one is."""
    a, b = np.asarray(a), np.asarray(b)
    if not np.issubdtype(a.dtype, np.number) or not np.issubdtype(b.dtype, np.number):
        return np.where(a == b, 0.0, np.nan).astype(np.float64)
    x, y = a.astype(np.float64), b.astype(np.float64)
    with np.errstate(invalid="ignore"):
        d = np.abs(x - y)
    same = (x == y) | (np.isnan(x) & np.isnan(y))
    return np.where(same, 0.0, d)


def clean_message(error: BaseException) -> str:
    """onnxruntime's message without its error-code prefix and source locations, on one line."""
    message = re.sub(r"^\[ONNXRuntimeError\] : \d+ : \w+ : ", "", str(error).strip())
    message = re.sub(r"\S+\.(cc|h|cpp):\d+ ", "", message)
    message = re.sub(r"(onnxruntime|onnx)::[\w:<>~]+\([^()]*\)\s*", "", message)
    return " ".join(message.split())[:500]


def max_abs(a: list[np.ndarray], b: list[np.ndarray]) -> float:
    """Largest |a - b| over matching outputs, in float64; NaN where either holds a NaN."""
    assert len(a) == len(b)
    worst = 0.0
    for x, y in zip(a, b):
        assert x.shape == y.shape, (x.shape, y.shape)
        diff = np.abs(x.astype(np.float64) - y.astype(np.float64))
        if np.isnan(diff).any():
            return float("nan")
        worst = max(worst, float(diff.max(initial=0.0)))
    return worst
