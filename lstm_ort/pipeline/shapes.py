"""The shapes of a model's values as exporters leave them, and what a Reshape does to them.

Exporters size their glue at run time: torch's dynamo exporter reshapes Y with a shape computed
from ``Shape(Y)`` (``Shape -> Slice -> Mul -> Concat``), both torch exporters size zero states
from ``Shape(X)``, and a fixed-shape export writes the call's T and B as constants. A pipeline
cuts every call into items of other sizes, so it must know what each such Reshape keeps: ONNX's
own shape inference with data propagation (``onnx.shape_inference.infer_shapes(data_prop=True)``)
gives every value's dims (ints, or the symbols of the inputs' dims), and ``resolve_reshape``
proves the time and batch axes go through a Reshape unchanged and writes the constant shape a
stage uses instead (0 for those axes, so any item size works). Shape arithmetic itself (the
``Shape`` nodes and what they feed) is left out of the stages: ``shape_values`` finds it.
"""

from __future__ import annotations

import math

import numpy as np
import onnx
from onnx import helper

from lstm_ort.graph.axes import Axes
from lstm_ort.ops.identity import num_directions
from lstm_ort.ops.spec import attribute as attr
from lstm_ort.pipeline.unsupported import Unsupported

Dim = int | str | None  # a static size, a symbol (the same symbol: the same size), or unknown

# Ops that compute on shape values (1-D int64 tensors made from Shape/Size and constants).
SHAPE_ARITHMETIC = {"Shape", "Size", "Slice", "Gather", "Concat", "Unsqueeze", "Squeeze", "Reshape", "Mul", "Add",
                    "Sub", "Div", "Cast", "Identity", "Constant", "Max", "Min", "Abs", "Neg", "Range"}
_LARGE = 1024  # initializers above this many bytes leave the copy shape inference reads


def shape_values(graph: onnx.GraphProto, consts: dict) -> set[str]:
    """Values computed only from the shapes of other values (and constants): the outputs of
    Shape/Size and of arithmetic on such values. Their nodes are shape arithmetic, no data flows
    through them."""
    out: set[str] = set()
    for node in graph.node:  # graph order is topological
        if node.op_type in ("Shape", "Size"):
            out.update(o for o in node.output if o)
        elif node.op_type in SHAPE_ARITHMETIC and node.op_type != "Constant":
            var = [i for i in node.input if i and i not in consts]
            if var and all(i in out for i in var):
                out.update(o for o in node.output if o)
    return out


def infer_dims(model: onnx.ModelProto, fused: list[onnx.NodeProto], state_axis: int) -> dict[str, list[Dim] | None]:
    """Every value's dims by ONNX shape inference with data propagation, on a copy without the
    large weights. FusedLSTM has no ONNX schema, so its outputs' shapes are given (from its X:
    Y [T, D, B, H] or [B, T, D, H], states [layers*D, B, H] or [B, layers*D, H]) and inference
    runs again from there."""
    light = onnx.ModelProto()
    light.CopyFrom(model)
    g = light.graph
    for init in list(g.initializer):
        if init.data_type != onnx.TensorProto.INT64 and _nbytes(init) > _LARGE:
            g.input.append(helper.make_tensor_value_info(init.name, init.data_type, list(init.dims)))
            g.initializer.remove(init)
    fused_outputs = {o for n in fused for o in n.output if o}
    kept = [vi for vi in g.value_info if vi.name not in fused_outputs]
    del g.value_info[:]
    g.value_info.extend(kept)
    dims = _infer(light)
    if fused:
        x = dims.get(fused[0].input[0])
        layout = int(attr(fused[0], "layout", 0))
        t_axis, b_axis = (0, 1) if layout == 0 else (1, 0)
        T, B = (x[t_axis], x[b_axis]) if x and len(x) == 3 else (None, None)
        elem = _elem_type(model, fused[0])
        for n in fused:
            D = num_directions(attr(n, "direction", "forward"))
            H = int(attr(n, "hidden_size"))
            rows = int(attr(n, "num_layers", 1)) * D
            y = [T, D, B, H] if layout == 0 else [B, T, D, H]
            state = [rows, B, H] if state_axis == 0 else [B, rows, H]
            for name, shape in zip(n.output, (y, state, state)):
                if name:
                    g.value_info.append(helper.make_tensor_value_info(name, elem, shape))
        dims = _infer(light)
    return dims


def _infer(model: onnx.ModelProto) -> dict[str, list[Dim] | None]:
    try:
        inferred = onnx.shape_inference.infer_shapes(model, data_prop=True)
    except Exception as e:  # noqa: BLE001 - inference is a help, not a requirement
        raise Unsupported(f"ONNX shape inference failed on this model: {e}") from e
    g = inferred.graph
    out = {}
    for vi in list(g.input) + list(g.value_info) + list(g.output):
        tt = vi.type.tensor_type
        if tt.HasField("shape") or vi.name not in out:  # an output declared without a shape keeps the inferred one
            out[vi.name] = [_dim(d) for d in tt.shape.dim] if tt.HasField("shape") else None
    return out


def _dim(d) -> Dim:
    if d.HasField("dim_value"):
        return d.dim_value
    # "unk__N" is inference's name for a size it could not tell: unknown, not a symbol to match.
    return None if not d.dim_param or d.dim_param.startswith("unk__") else d.dim_param


def _nbytes(t: onnx.TensorProto) -> int:
    return len(t.raw_data) or 4 * (len(t.float_data) + len(t.int32_data)) + 8 * (len(t.int64_data) + len(t.double_data))


def _elem_type(model: onnx.ModelProto, node: onnx.NodeProto) -> int:
    for init in model.graph.initializer:
        if init.name == node.input[1]:
            return init.data_type
    return onnx.TensorProto.FLOAT


def resolve_reshape(node: onnx.NodeProto, ax: Axes, in_dims: list[Dim] | None, out_dims: list[Dim] | None,
                    const_shape) -> tuple[list[int], dict[str, int]]:
    """For a Reshape of a value whose time/batch axes are ``ax``: the constant shape a stage
    writes instead (0 for every axis up to the last of time and batch, which must go through
    unchanged; static sizes after), and the sizes the model pins the time or batch axis to
    ({"time": 5} when it reshapes to 5 where T was: a model that runs only at T=5, as torch's
    dynamo exporter writes). Raises Unsupported, naming the node, when the Reshape could move
    the time or batch axis or its shape cannot be told."""
    where = f"Reshape node {node.name!r}"
    allowzero = int(attr(node, "allowzero", 0))
    if const_shape is not None:
        target: list[Dim] = [int(s) for s in np.asarray(const_shape).ravel()]
        if allowzero and 0 in target:
            raise Unsupported(f"{where}: allowzero=1 with a 0 in its shape (an empty axis)")
        for p, s in enumerate(target):
            if s == 0:  # copies the input's size
                target[p] = in_dims[p] if in_dims and p < len(in_dims) else None
            elif s == -1:
                target[p] = None
    elif out_dims is not None:
        target = list(out_dims)
    else:
        raise Unsupported(f"{where}: its shape is computed and ONNX shape inference cannot tell it")
    if in_dims is None:
        raise Unsupported(f"{where}: the rank and sizes of its input are unknown")
    lead = max(a for a in (ax.time, ax.batch) if a is not None)
    if len(target) <= lead:
        raise Unsupported(f"{where} merges the time or batch axis into another (shape {target})")
    pins: dict[str, int] = {}
    unknown = [p for p, t in enumerate(target) if t is None]
    for p in range(lead + 1):
        t, d = target[p], in_dims[p]
        if t is None or t == d:
            continue
        role = "time" if p == ax.time else "batch" if p == ax.batch else None
        if role and isinstance(t, int) and not isinstance(d, int) and not any(u > lead for u in unknown):
            pins[role] = t  # the model is right only where this axis is t (a traced example's size)
            continue
        raise Unsupported(f"{where} changes axis {p} ({d} -> {t}), which the pipeline cuts or keeps in place")
    tail_in = in_dims[lead + 1:]
    if any(not isinstance(d, int) for d in tail_in):
        raise Unsupported(f"{where}: the sizes after the time and batch axes are not static ({in_dims})")
    total = math.prod(tail_in)
    tail = target[lead + 1:]
    known = [t for t in tail if t is not None]
    if any(not isinstance(t, int) for t in known):
        raise Unsupported(f"{where}: its shape after the time and batch axes is not static ({target})")
    if len(unknown) > 1 or (unknown and unknown[0] <= lead and any(t is None for t in tail)):
        raise Unsupported(f"{where}: more than one size of its shape is unknown ({target})")
    if unknown and unknown[0] > lead:
        if total % max(1, math.prod(known)):
            raise Unsupported(f"{where}: {in_dims} cannot be reshaped to {target}")
        tail = [total // max(1, math.prod(known)) if t is None else t for t in tail]
    if math.prod(tail) != total:
        raise Unsupported(f"{where} merges or splits the time and batch axes ({in_dims} -> {target}), which the "
                          f"pipeline cuts")
    return [0] * (lead + 1) + [int(t) for t in tail], pins
