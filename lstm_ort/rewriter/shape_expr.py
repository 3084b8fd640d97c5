"""What a shape tensor computed in the graph holds, symbolically: exporters with a dynamic batch
build Reshape targets and zero states from Shape(x) (torch's dynamo flattens a bidirectional
layer's output by Concat(Shape(y)[0:1], Shape(y)[1:2], Shape(y)[2] * Shape(y)[3])).

Each element of a 1-D int tensor is read as a product: an int coefficient times dimensions of
values, `Dim(value, axis)`; a dimension the value's shape knows statically counts as its int.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx_ir as ir

from lstm_ort.rewriter.graph_utils import axes_of, const_array, slice_bounds


@dataclass(frozen=True)
class Product:
    coefficient: int
    dims: tuple = ()  # sorted (id(value), axis) pairs

    def __mul__(self, other: Product) -> Product:
        return Product(self.coefficient * other.coefficient, tuple(sorted(self.dims + other.dims)))


def dim(value: ir.Value, axis: int) -> Product:
    shape = value.shape
    if shape is not None and isinstance(shape[axis], int):
        return Product(shape[axis])
    return Product(1, ((id(value), axis),))


def elements(value: ir.Value | None, depth: int = 0) -> list[Product] | None:
    """The elements of a 1-D (or scalar) int tensor as products, or None where not known."""
    if value is None or depth > 32:
        return None
    array = const_array(value)
    if array is not None:
        return [Product(int(v)) for v in np.asarray(array).reshape(-1)] if array.dtype.kind in "iu" else None
    node = value.producer()
    if node is None or node.domain not in ("", "ai.onnx"):
        return None
    inner = (lambda k: elements(node.inputs[k], depth + 1)) if node.inputs else None
    op = node.op_type
    if op == "Shape":
        source = node.inputs[0]
        if source.shape is None:
            return None
        rank = len(source.shape)
        start = node.attributes["start"].value if "start" in node.attributes else 0
        end = node.attributes["end"].value if "end" in node.attributes else rank
        start, end = (max(0, min(rank, b + rank if b < 0 else b)) for b in (start, end))
        return [dim(source, k) for k in range(start, end)]
    if op == "Concat":
        parts = [elements(v, depth + 1) for v in node.inputs]
        return None if any(p is None for p in parts) else [e for p in parts for e in p]
    if op in ("Identity", "Cast", "Squeeze", "Unsqueeze", "Reshape", "Flatten"):
        return inner(0)
    if op == "Slice":
        found, bounds = inner(0), slice_bounds(node)
        if found is None or bounds is None or (bounds[2] not in (None, [0], [-1])) or bounds[3] not in (None, [1]):
            return None
        return found[slice(bounds[0][0], bounds[1][0])]
    if op == "Gather":
        index = const_array(node.inputs[1])
        if index is None or (node.attributes["axis"].value if "axis" in node.attributes else 0) != 0:
            return None
        picks = [int(k) for k in np.asarray(index).reshape(-1)]
        shape = node.inputs[0].producer()
        if (shape is not None and shape.op_type == "Shape" and not shape.attributes
                and shape.inputs[0].shape is None and min(picks) >= 0):
            return [dim(shape.inputs[0], k) for k in picks]  # Shape(v)[k] of a v of unknown rank
        found = inner(0)
        return None if found is None else [found[k] for k in picks]
    if op == "Mul":
        a, b = inner(0), elements(node.inputs[1], depth + 1)
        if a is None or b is None or len(a) != len(b) and 1 not in (len(a), len(b)):
            return None
        if len(a) == 1:
            a = a * len(b)
        if len(b) == 1:
            b = b * len(a)
        return [x * y for x, y in zip(a, b)]
    if op == "ReduceProd":
        found = inner(0)
        if found is None or axes_of(node) not in (None, [0], [-1]) or (len(node.inputs) > 1 and axes_of(node) is None):
            return None
        product = Product(1)
        for e in found:
            product = product * e
        return [product]
    return None
