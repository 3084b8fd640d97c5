"""The plain ONNX nodes rules write around a FusedLSTM (squeezes, slices, gathers, ...), each in the
form the graph's own opset defines: axes as attributes before opset 13 (Squeeze, Unsqueeze) and
bounds as attributes before opset 10 (Slice), inputs after. Every rule builds such nodes here, so
a model keeps the opset it came with.

Each builder inserts its node before `at` (after it with ``after=True``) and returns its output.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from lstm_ort.rewriter.graph_utils import add_constant, default_opset, unique_name


def _opset(graph) -> int:
    return default_opset(graph) or 13


def _insert(graph, at: ir.Node, node: ir.Node, after: bool) -> ir.Value:
    node.name = unique_name(graph, node.name or node.op_type.lower())
    node.outputs[0].name = unique_name(graph, node.name + "_out")
    if after:
        graph.insert_after(at, node)
    else:
        graph.insert_before(at, node)
    return node.outputs[0]


def _ints(graph, at: ir.Node, name: str, values) -> ir.Value:
    """A constant int64 input: an initializer, or in a function a Constant node before `at` (so
    before a node inserted right after `at` too)."""
    return add_constant(graph, at, name, np.asarray(values, np.int64))


def node(graph, at: ir.Node, op_type: str, inputs, attributes: dict | None = None, *, name: str = "",
         after: bool = False) -> ir.Value:
    """Any default-domain node whose form is the same in every opset the rules meet."""
    built = ir.Node("", op_type, list(inputs), ir.convenience.convert_attributes(attributes or {}), name=name)
    return _insert(graph, at, built, after)


def _axes_op(graph, at, op_type: str, value: ir.Value, axes: list[int], name: str, after: bool) -> ir.Value:
    if _opset(graph) < 13:
        return node(graph, at, op_type, [value], {"axes": list(axes)}, name=name, after=after)
    return node(graph, at, op_type, [value, _ints(graph, at, f"{name or op_type}_axes", axes)], name=name,
                after=after)


def unsqueeze(graph, at: ir.Node, value: ir.Value, axes: list[int], *, name: str = "", after: bool = False) -> ir.Value:
    return _axes_op(graph, at, "Unsqueeze", value, axes, name, after)


def squeeze(graph, at: ir.Node, value: ir.Value, axes: list[int], *, name: str = "", after: bool = False) -> ir.Value:
    return _axes_op(graph, at, "Squeeze", value, axes, name, after)


def slice_axis(graph, at: ir.Node, value: ir.Value, start: int, end: int, axis: int, *, name: str = "",
               after: bool = False) -> ir.Value:
    """value[start:end] along `axis` (step 1)."""
    if _opset(graph) < 10:  # Slice-1: bounds as attributes
        return node(graph, at, "Slice", [value], {"starts": [start], "ends": [end], "axes": [axis]}, name=name,
                    after=after)
    base = name or "slice"
    bounds = [_ints(graph, at, f"{base}_{k}", [v]) for k, v in (("starts", start), ("ends", end), ("axes", axis))]
    return node(graph, at, "Slice", [value, *bounds], name=name, after=after)


def gather(graph, at: ir.Node, value: ir.Value, indices, axis: int, *, name: str = "", after: bool = False) -> ir.Value:
    """Gather(value, indices) along `axis`: an int picks one entry (that axis goes), a list reorders.
    The same in every opset, so it also reverses time (a negative-step Slice needs opset 10)."""
    index = _ints(graph, at, f"{name or 'gather'}_indices", indices)
    return node(graph, at, "Gather", [value, index], {"axis": axis}, name=name, after=after)


def transpose(graph, at: ir.Node, value: ir.Value, perm: list[int], *, name: str = "", after: bool = False) -> ir.Value:
    return node(graph, at, "Transpose", [value], {"perm": list(perm)}, name=name, after=after)


def reshape(graph, at: ir.Node, value: ir.Value, shape: list[int], *, name: str = "", after: bool = False) -> ir.Value:
    return node(graph, at, "Reshape", [value, _ints(graph, at, f"{name or 'reshape'}_shape", shape)], name=name,
                after=after)

