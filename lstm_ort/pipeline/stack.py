"""The layer stack a pipeline splits: one FusedLSTM node, or a chain of them.

``lstm-ort optimize`` joins an exported ``nn.LSTM(num_layers=L)`` into one FusedLSTM node where
its stack rule can prove the glue between layers; where it cannot (torch's dynamo exporter with a
dynamic batch reshapes each layer's Y with a shape computed from ``Shape(Y)``; tf2onnx transposes
each Keras layer's Y back to batch-major and the next layer's X to time-major) the layers stay
separate nodes. A pipeline takes either: ``find_stack`` follows each node's X back through such
glue to the previous node's Y, proves the glue is exactly the stacking of docs/ops.md (Y's
direction axis folded into the features: ``[T, D, B, H] -> [T, B, D*H]``, or the layout-1 twin)
by tracking which of Y's axes every dim holds through Transpose, Reshape, Squeeze and Unsqueeze,
and concatenates the nodes' packed weights layer-major (as the stack rule does), so the chain is
one stack of layers.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import numpy as np
import onnx

from lstm_ort.graph.axes import node_axes, norm, squeezed, transposed, unsqueezed
from lstm_ort.ops.identity import is_fused, num_directions
from lstm_ort.ops.spec import attribute as attr
from lstm_ort.pipeline.shapes import Dim
from lstm_ort.pipeline.unsupported import Unsupported
from lstm_ort.runtime.nodes import node_ranks, node_shapes

GLUE_OPS = {"Transpose", "Reshape", "Squeeze", "Unsqueeze", "Identity"}
_SAME_ATTRS_EXCEPT = {"num_layers"}


@dataclass
class Stack:
    nodes: list  # FusedLSTM nodes, first layer to last
    glue: list  # the nodes between them
    layers: int
    directions: int
    input_size: int
    hidden: int
    layout: int
    direction: str
    elem_type: int
    attributes: list  # the nodes' attributes but num_layers (the same on every node)
    W: np.ndarray
    B: np.ndarray | None
    P: np.ndarray | None
    sequence_lens: str | None
    node_rows: list = field(default_factory=list)  # node m: its rows [a, b) of the stack's states (l*D + d)

    @property
    def x(self) -> str:
        return self.nodes[0].input[0]

    @property
    def y(self) -> str:
        return self.nodes[-1].output[0] if self.nodes[-1].output else ""


def _input(node: onnx.NodeProto, k: int) -> str:
    return node.input[k] if len(node.input) > k else ""


def fused_nodes(graph: onnx.GraphProto) -> list[onnx.NodeProto]:
    return [n for n in graph.node if is_fused(n)]


def find_stack(model: onnx.ModelProto, consts: dict, producers: dict, consumers: dict, shape_vals: set,
               dims: dict, opset: int) -> Stack:
    g = model.graph
    fused = fused_nodes(g)
    if not fused:
        raise Unsupported("the model has no FusedLSTM node (run `lstm-ort optimize` first)")
    for n in fused:
        if node_ranks(n).any:
            raise Unsupported(f"FusedLSTM node {n.name!r} has factored weights (optimize --low-rank): a pipeline "
                              f"splits whole-weight stacks only")
    previous, glue_of = {}, {}
    for n in fused:
        found = _previous_layer(n, producers)
        if found is not None:
            previous[id(n)], glue_of[id(n)] = found
    heads = [n for n in fused if id(n) not in previous]
    if len(heads) != 1:
        names = ", ".join(f"{n.name!r}" for n in heads)
        raise Unsupported(f"the model has {len(heads)} FusedLSTM stacks (nodes {names} each start one): a pipeline "
                          f"splits one stack of layers")
    nxt = {id(p): n for n in fused if (p := previous.get(id(n))) is not None}
    chain = [heads[0]]
    while id(chain[-1]) in nxt:
        chain.append(nxt[id(chain[-1])])
    if len(chain) != len(fused):
        raise Unsupported("two FusedLSTM nodes read the same layer's Y: a pipeline splits one chain of layers")
    first = chain[0]
    shapes = {id(n): s for n, s in node_shapes(model)}
    if shapes.get(id(first)) is None:
        raise Unsupported(f"FusedLSTM node {first.name!r}: its W is not an initializer, its layers cannot be split")
    reference = {a.name: a for a in first.attribute if a.name not in _SAME_ATTRS_EXCEPT}
    for n in chain:
        for k, what in ((1, "W"), (2, "B"), (6, "P")):
            if _input(n, k) and _input(n, k) not in consts:
                raise Unsupported(f"FusedLSTM node {n.name!r}: its {what} is not a constant")
        mine = {a.name: a for a in n.attribute if a.name not in _SAME_ATTRS_EXCEPT}
        if mine != reference:
            raise Unsupported(f"FusedLSTM nodes {first.name!r} and {n.name!r} differ in attributes: they are not "
                              f"one stack")
        if _input(n, 3) != _input(first, 3):
            raise Unsupported(f"FusedLSTM nodes {first.name!r} and {n.name!r} read different sequence_lens")
    glue = []
    for n in chain[1:]:
        path = glue_of[id(n)]
        _check_glue(path, previous[id(n)], n, consts, consumers, shape_vals, dims, opset, g.output)
        glue.extend(path)
    s0 = shapes[id(first)]
    D, H, I = s0.directions, s0.hidden_size, s0.input_size
    layout = int(attr(first, "layout", 0))
    direction = attr(first, "direction", "forward")
    counts = [int(attr(n, "num_layers", 1)) for n in chain]
    W, B, P = _joined_weights(chain, counts, consts, D, H)
    elem_type = next(i.data_type for i in g.initializer if i.name == first.input[1])
    rows, start = [], 0
    for c in counts:
        rows.append((start * D, (start + c) * D))
        start += c
    return Stack(chain, glue, sum(counts), D, I, H, layout, direction, elem_type,
                 [a for a in first.attribute if a.name not in _SAME_ATTRS_EXCEPT], W, B, P,
                 _input(first, 3) or None, rows)


def _previous_layer(node: onnx.NodeProto, producers: dict):
    """(the FusedLSTM whose Y reaches this node's X through glue ops only, the glue from Y on)."""
    path, value = [], node.input[0]
    while True:
        prod = producers.get(value)
        if prod is None:
            return None
        if is_fused(prod):
            return (prod, path[::-1]) if prod.output[0] == value else None
        if prod.op_type not in GLUE_OPS:
            return None
        path.append(prod)
        value = prod.input[0]


def _joined_weights(chain, counts, consts, D: int, H: int):
    """W, B, P of the chain, packed layer-major as one node's (docs/ops.md): the nodes' packed
    arrays one after another; a node without B or P adds zeros (what a missing one means)."""
    W = np.concatenate([np.asarray(consts[n.input[1]]).ravel() for n in chain])
    parts = {}
    for k, width in ((2, 4 * H), (6, 3 * H)):  # packed B: Wb + Rb, 4H per direction
        if not any(_input(n, k) for n in chain):
            parts[k] = None
            continue
        parts[k] = np.concatenate([np.asarray(consts[_input(n, k)]).ravel() if _input(n, k)
                                   else np.zeros(c * D * width, W.dtype) for n, c in zip(chain, counts)])
    return W, parts[2], parts[6]


# -- the glue between two layers ---------------------------------------------------------------

class _Size:
    """A dim's size as a monomial: an integer times symbols (T, B), so T*B and B*T are equal."""

    def __init__(self, coef: int = 1, symbols: Counter | None = None):
        self.coef, self.symbols = coef, symbols or Counter()

    @classmethod
    def of(cls, dim: Dim) -> _Size | None:
        if dim is None:
            return None
        return cls(dim) if isinstance(dim, int) else cls(1, Counter([dim]))

    def __mul__(self, other: _Size) -> _Size:
        return _Size(self.coef * other.coef, self.symbols + other.symbols)

    def __truediv__(self, other: _Size) -> _Size | None:
        if other.coef == 0 or self.coef % other.coef or other.symbols - self.symbols:
            return None
        return _Size(self.coef // other.coef, self.symbols - other.symbols)

    def __eq__(self, other) -> bool:
        return isinstance(other, _Size) and (self.coef, +self.symbols) == (other.coef, +other.symbols)

    def __repr__(self) -> str:
        return "*".join([str(self.coef)] * (self.coef != 1 or not self.symbols) + sorted(self.symbols.elements()))


def _check_glue(path, a: onnx.NodeProto, b: onnx.NodeProto, consts, consumers, shape_vals, dims, opset,
                graph_outputs) -> None:
    """Raises Unsupported unless ``path`` takes A's Y to exactly the stacked X of B. Each dim is
    tracked as the tuple of Y's axes it holds (row-major), size-1 axes left out."""
    value = a.output[0]
    outputs = {o.name for o in graph_outputs}
    for node in path:  # nothing but the next layer reads Y or the glue (shape arithmetic aside)
        if value in outputs:
            raise Unsupported(f"graph output {value!r} is the Y of FusedLSTM node {a.name!r}, a layer inside the "
                              f"stack: a pipeline stage hands Y only to the next layer")
        for use in consumers.get(value, []):
            if use is not node and not all(o in shape_vals for o in use.output if o):
                raise Unsupported(f"{use.op_type} node {use.name!r} reads the Y of layer node {a.name!r} between "
                                  f"layers: a pipeline stage hands Y only to the next layer")
        value = node.output[0]
    layout = int(attr(a, "layout", 0))
    D = num_directions(attr(a, "direction", "forward"))
    H = int(attr(a, "hidden_size"))
    y_dims = dims.get(a.output[0])
    if not y_dims or len(y_dims) != 4:
        raise Unsupported(f"FusedLSTM node {a.name!r}: the sizes of its Y are unknown")
    names = ["T", "D", "B", "H"] if layout == 0 else ["B", "T", "D", "H"]
    # An unknown T or B gets a symbol of its own: a constant shape with 0 for it still proves out.
    sizes = {n: _Size.of(d) or _Size(1, Counter([f"?{n}"])) for n, d in zip(names, y_dims)}
    sizes["D"], sizes["H"] = _Size(D), _Size(H)
    ones = {n for n, s in sizes.items() if s == _Size(1)}
    groups = [tuple(n for n in (name,) if n not in ones) for name in names]
    for node in path:
        groups = _apply(node, groups, sizes, consts, dims, opset)
    want = [("T",), ("B",), ("D", "H")] if layout == 0 else [("B",), ("T",), ("D", "H")]
    want = [tuple(n for n in grp if n not in ones) for grp in want]
    if groups != want:
        raise Unsupported(f"the glue from FusedLSTM node {a.name!r} to {b.name!r} "
                          f"({', '.join(n.op_type for n in path)}) is not the stacking of layers "
                          f"(Y's axes end as {groups}, the next layer reads {want})")


def _apply(node, groups, sizes, consts, dims, opset) -> list[tuple]:
    op, where = node.op_type, f"{node.op_type} node {node.name!r} between layers"
    if op == "Identity":
        return groups
    if op == "Transpose":
        return transposed(groups, attr(node, "perm"))
    if op in ("Squeeze", "Unsqueeze"):
        axes = node_axes(node, consts.get)
        if not axes:
            raise Unsupported(f"{where}: its axes are not given")
        if op == "Unsqueeze":
            return unsqueezed(groups, axes, ())
        if any(groups[norm(a, len(groups))] for a in axes):
            raise Unsupported(f"{where} squeezes an axis of Y that is not 1")
        return squeezed(groups, axes)
    # Reshape: the flattened axes, cut again at the target's sizes.
    shape = consts.get(node.input[1]) if len(node.input) > 1 else None
    if shape is not None:
        target: list[_Size | None] = []
        for k, s in enumerate(int(v) for v in np.asarray(shape).ravel()):
            if s == 0 and not attr(node, "allowzero", 0):
                target.append(_product(groups[k], sizes) if k < len(groups) else None)
            else:
                target.append(None if s == -1 else _Size(s))
    else:
        out = dims.get(node.output[0])
        if out is None:
            raise Unsupported(f"{where}: its computed shape cannot be told (ONNX shape inference)")
        target = [_Size.of(d) for d in out]
    flat = [n for grp in groups for n in grp]
    total = _product(flat, sizes)
    unknown = [k for k, t in enumerate(target) if t is None]
    if len(unknown) > 1:
        raise Unsupported(f"{where}: more than one size of its shape is unknown")
    if unknown:
        known = _Size()
        for t in target:
            if t is not None:
                known = known * t
        rest = total / known
        if rest is None:
            raise Unsupported(f"{where}: cannot tell the size it infers")
        target[unknown[0]] = rest
    out_groups, pos = [], 0
    for t in target:
        grp, size = [], _Size()
        while not size == t and pos < len(flat):
            size = size * sizes[flat[pos]]
            grp.append(flat[pos])
            pos += 1
        if not size == t:
            raise Unsupported(f"{where} does not cut Y's axes where they meet ({target})")
        out_groups.append(tuple(grp))
    if pos != len(flat):
        raise Unsupported(f"{where} does not keep all of Y's axes")
    return out_groups


def _product(names, sizes) -> _Size:
    out = _Size()
    for n in names:
        out = out * sizes[n]
    return out
