"""Inputs for any model: random feeds valid for each input's role, exact conversions of given
values, and where the inputs hold their batch entries (the checks compare entries alone)."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import numpy_helper

from lstm_ort.graph.axes import DEFAULT_DOMAINS, RECURRENT, node_axes, squeezed, transposed, unsqueezed
from lstm_ort.ops.identity import is_fused
from lstm_ort.ops.spec import attribute

# Ops that hand an integer input on unchanged in value (so its role is where it ends up).
_PASS_THROUGH = {"Cast", "CastLike", "Identity", "Reshape", "Squeeze", "Unsqueeze", "Flatten", "Expand"}
_KEEPS_AXES = {"Cast", "CastLike", "Identity", "Slice", "Split"}  # an input's axes stay where they are
_LARGE_BYTES = 1 << 16


def fed_inputs(model: onnx.ModelProto) -> dict[str, int | None]:
    """The inputs a call feeds (graph inputs that are not initializers), each with its declared
    rank (None where the model declares no shape)."""
    inits = {i.name for i in model.graph.initializer}
    return {vi.name: len(vi.type.tensor_type.shape.dim) if vi.type.tensor_type.HasField("shape") else None
            for vi in model.graph.input if vi.name not in inits}


def check_shapes(model: onnx.ModelProto, shapes: dict[str, list[int]]) -> None:
    """ValueError, naming the input, for a shape given (optimize --shape) to a name that is no fed
    input of the model, or with a rank other than the input's: never silently left unused."""
    inputs = fed_inputs(model)
    for name, shape in shapes.items():
        if name not in inputs:
            raise ValueError(f"{name!r} is none of the model's inputs ({', '.join(inputs) or 'none'})")
        if inputs[name] is not None and len(shape) != inputs[name]:
            raise ValueError(f"input {name!r} has rank {inputs[name]}; the shape given, {list(shape)}, has "
                             f"{len(shape)} dims")


def check_carry(model: onnx.ModelProto, carry: dict[str, str]) -> None:
    """ValueError, naming the pair, where an OUTPUT=INPUT pair (optimize --carry) names no output or
    no fed input of the model."""
    outputs, inputs = [o.name for o in model.graph.output], list(fed_inputs(model))
    for out, inp in carry.items():
        for name, names, what in ((out, outputs, "outputs"), (inp, inputs, "inputs")):
            if name not in names:
                raise ValueError(f"{out}={inp}: {name!r} is none of the model's {what} ({', '.join(names) or 'none'})")


def random_feeds(model: onnx.ModelProto, rng: np.random.Generator, dim: int = 3,
                 shapes: dict[str, list[int]] | None = None) -> dict[str, np.ndarray]:
    """Inputs for every graph input: `shapes` where given (`--shape`), else unknown dimensions
    (symbolic, absent, or -1 as Paddle writes them) become `dim` (one value per symbolic name);
    floats are standard normal, and integers get values valid for their role: sequence lengths
    (an LSTM/GRU/RNN's sequence_lens, FusedLSTM's) spread over [1, T], token ids (a Gather's
    indices) below the size of the gathered axis, anything else 1. A
    shape given for no input, or of another rank, is a ValueError (check_shapes)."""
    inits = {i.name for i in model.graph.initializer}
    symbols: dict[str, int] = {}
    given = shapes or {}
    check_shapes(model, given)
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
    stock = node.domain in DEFAULT_DOMAINS and node.op_type in RECURRENT
    if not (stock or is_fused(node)) or index == 0:
        return None
    layout = attribute(node, "layout", 0)
    lengths, states = (4, (5, 6)) if stock else (3, (4, 5))
    if index == lengths:
        return "lengths", 0
    if index in states:
        return "states", 1 - layout
    return "weights", None


def _moved_axes(node: onnx.NodeProto, index: int, where: list | None, consts: dict):
    """Where the input's axes are in `node`'s output (as input_batch_axes tracks them), or _STOP
    where the op is not one that keeps or moves axes knowably."""
    if node.domain not in DEFAULT_DOMAINS or index != 0:
        return _STOP
    if node.op_type in _KEEPS_AXES:
        return where
    if where is None:
        return _STOP
    if node.op_type == "Transpose":
        perm = attribute(node, "perm")
        return transposed(where, perm) if perm is None or sorted(perm) == list(range(len(where))) else _STOP
    if node.op_type in ("Unsqueeze", "Squeeze"):
        axes = node_axes(node, consts.get)
        if not axes:
            return _STOP
        return squeezed(where, axes) if node.op_type == "Squeeze" else unsqueezed(where, axes)
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
            lengths = 3 if is_fused(node) else RECURRENT.get(node.op_type) if node.domain in DEFAULT_DOMAINS else None
            if lengths in index:
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
