"""A dense layer over a sequence as one MatMul: tf2onnx exports Keras' ``Dense`` on a [B, T, K]
tensor as TensorFlow's Tensordot, ``Reshape(x, [-1, K])`` -> ``MatMul(W)`` -> ``Reshape`` back to a
shape computed from ``Shape(x)`` (Shape, Cast, Gather, Concat, Cast): seven nodes where ONNX's
MatMul, which broadcasts over the leading axes, needs one. In a stream kind's model every node is
paid on every call (the g2p-id decoder's call of one stream ~30.5 -> ~28 us, of 8 58 -> 56, of 16
110 -> 80, this 2-core machine).

The rewrite needs the shape computed to be ``x``'s leading axes and W's columns, whatever the
batch: the computation, which reads nothing but ``Shape(x)`` and constants, is run by onnx's
reference evaluator on sample shapes of ``x`` (its known axes as they are, each unknown one
1, 2 and 5) and must give that every time. Used on a kind's fixed model (specialize.py), whose
result is then proved against the model as any folding is.
"""

from __future__ import annotations

import itertools

import numpy as np
import onnx
from onnx import helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from lstm_ort.runtime.model_io import constant_tensors, producers, reader_counts

# The ops a computed shape may take (what exporters build shapes with).
_SHAPE_OPS = {"Shape", "Cast", "Gather", "Concat", "Slice", "Squeeze", "Unsqueeze", "Identity", "Reshape"}
_SAMPLE_SIZES = (1, 2, 5)


def collapse_tensordots(model: onnx.ModelProto) -> int:
    """Rewrites, in place, each Reshape -> MatMul -> Reshape of the main graph that is one MatMul;
    returns how many."""
    graph = model.graph
    shapes = _known_shapes(model)
    constants = constant_tensors(model)  # protos: read only where a rewrite needs them
    producer = producers(graph)
    readers = reader_counts(graph)  # a graph output, or a value a subgraph reads, is never read once
    position = {id(n): k for k, n in enumerate(graph.node)}
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 17)
    collapsed = {}
    for back in graph.node:
        found = _tensordot(back, producer, readers, constants, shapes, (position, opset))
        if found is not None:
            x, weights = found
            collapsed[id(back)] = helper.make_node("MatMul", [x, weights], [back.output[0]],
                                                   name=f"{back.name or back.output[0]}__matmul")
    if collapsed:
        nodes = [collapsed.get(id(n), n) for n in graph.node]
        del graph.node[:]
        graph.node.extend(nodes)  # the flattening Reshape, its MatMul and the shape's nodes go unread
    return len(collapsed)


def _tensordot(back, producer, readers, constants, shapes, where) -> tuple[str, str] | None:
    """(x, W) where ``back`` is the last Reshape of a Tensordot that one MatMul(x, W) computes."""
    if back.op_type != "Reshape" or back.domain or len(back.input) < 2:
        return None
    matmul = producer.get(back.input[0])
    if matmul is None or matmul.op_type != "MatMul" or matmul.domain \
            or readers.get(matmul.output[0]) != 1:
        return None
    flat, weights = producer.get(matmul.input[0]), constants.get(matmul.input[1])
    if flat is None or flat.op_type != "Reshape" or flat.domain or weights is None or len(weights.dims) != 2:
        return None
    k, m = weights.dims
    flat_shape = constants.get(flat.input[1]) if len(flat.input) > 1 else None
    if flat_shape is None or numpy_helper.to_array(flat_shape).tolist() != [-1, k] \
            or readers.get(flat.output[0]) != 1:
        return None
    x = flat.input[0]
    dims = shapes.get(x)
    if dims is None or len(dims) < 2 or dims[-1] != k:
        return None
    evaluate = _shape_of(back.input[1], x, producer, constants, *where)
    if evaluate is None:
        return None
    for sample in _samples(dims):
        try:
            got = evaluate(np.array(sample, np.int64))
        except Exception:  # noqa: BLE001 - a computation the reference cannot run is not proved
            return None
        if np.asarray(got).tolist() != [*sample[:-1], m]:
            return None
    return x, matmul.input[1]


def _shape_of(name: str, x: str, producer, constants, position, opset):
    """The computation of ``name`` from Shape(x) (a function of x's shape), where it reads nothing
    else but constants; else None."""
    nodes, todo, seen, shape_out = [], [name], set(), None
    while todo:
        value = todo.pop()
        if value in seen or value in constants or not value:
            continue
        seen.add(value)
        node = producer.get(value)
        if node is None or node.domain or node.op_type not in _SHAPE_OPS:
            return None
        if node.op_type == "Shape":
            if node.input[0] != x or node.attribute or (shape_out is not None and shape_out != node.output[0]):
                return None
            shape_out = node.output[0]
            continue
        nodes.append(node)
        todo.extend(node.input)
    if shape_out is None:
        return None
    if name == shape_out:
        return lambda shape: shape
    used = {i for n in nodes for i in n.input}
    inits = [constants[k] for k in used if k in constants]
    graph = helper.make_graph(sorted(nodes, key=lambda n: position[id(n)]), "shape",
                              [helper.make_tensor_value_info(shape_out, onnx.TensorProto.INT64, [None])],
                              [onnx.ValueInfoProto(name=name)], inits)
    evaluator = ReferenceEvaluator(helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)]))
    return lambda shape: evaluator.run(None, {shape_out: shape})[0]


def _samples(dims):
    """Shapes ``x`` may take: its known axes as they are, each unknown one of a few sizes."""
    choices = [[d] if isinstance(d, int) else list(_SAMPLE_SIZES) for d in dims]
    return [list(s) for s in itertools.product(*choices)]


def _known_shapes(model: onnx.ModelProto) -> dict[str, list]:
    """Each value's dims (an int where known, None where not), from onnx's shape inference."""
    try:
        inferred = onnx.shape_inference.infer_shapes(model)
    except Exception:  # noqa: BLE001 - no shapes, no rewrite
        return {}
    out = {}
    for vi in [*inferred.graph.input, *inferred.graph.value_info, *inferred.graph.output]:
        t = vi.type.tensor_type
        if t.HasField("shape"):
            out[vi.name] = [d.dim_value if d.HasField("dim_value") else None for d in t.shape.dim]
    return out
