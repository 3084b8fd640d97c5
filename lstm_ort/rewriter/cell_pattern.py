"""An LSTM cell written out in plain ops, as exporters write one time step: finding it in a graph,
telling its input from its recurrent state, and its weights in ONNX's terms. The rules that turn
cells into FusedLSTM nodes (unrolled_cell, cell_chain, cell_loop) share it.

    gates = x @ Wx + h @ Wh (+ bias)      MatMul or Gemm terms, or one MatMul of Concat([x, h])
    a, b, c, d = Split(gates, 4)          or four Slices of the last axis
    c' = f(F) * c + f(I) * Tanh(G)        F, I: a gate chunk, plus a constant and a peephole P * c
    h' = f(O) * Tanh(c')                  O: a chunk, plus a constant and a peephole P * c'

The gate order is read from the dataflow, not assumed: the chunk under Tanh is the cell input,
the gate multiplied with it the input gate, the one multiplied with c the forget gate, the one
multiplied with Tanh(c') the output gate. So torch (i, f, g, o), Keras (i, f, c, o) and ONNX
(i, o, f, c) orders all match. f is Sigmoid, or a hard sigmoid (HardSigmoid, or the
clip(a*x + b, 0, 1) forms exporters write for Keras' `hard_sigmoid`), the same for all three gates.

Weights are read when a rule needs them (Term.array): a chain of 50 cells at H=512 would
otherwise hold every step's copy.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import onnx_ir as ir

from lstm_ort.ops.packing import LayerWeights, pack_layers
from lstm_ort.rewriter.fused_node import insert_fused_node
from lstm_ort.rewriter.graph_utils import const_array, const_shape, is_zeros, slice_bounds
from lstm_ort.rewriter import opset_nodes

GATE_ROWS = ("i", "o", "f", "c")  # ONNX's order of W's row blocks
_HARD_SIGMOID_TOLERANCE = 1e-6


def op(value: ir.Value | None, *op_types: str) -> ir.Node | None:
    """The producer of `value` when it is a default-domain node of one of `op_types`."""
    node = value.producer() if value is not None else None
    return node if node is not None and node.op_type in op_types and node.domain in ("", "ai.onnx") else None


def attr(node: ir.Node, name: str, default=None):
    a = node.attributes.get(name)
    return default if a is None else a.value


@dataclass(frozen=True)
class Activation:
    """The gates' activation f, in FusedLSTM's words."""

    name: str = "Sigmoid"
    alpha: float | None = None
    beta: float | None = None

    def same_as(self, other: Activation) -> bool:
        if self.name != other.name:
            return False
        return self.name == "Sigmoid" or (abs(self.alpha - other.alpha) <= _HARD_SIGMOID_TOLERANCE
                                          and abs(self.beta - other.beta) <= _HARD_SIGMOID_TOLERANCE)


@dataclass
class Term:
    """One product in the gate sum: source @ weight, the weight a constant [K, 4H] (or [4H, K]
    given transposed, as Gemm's transB reads it), times `scale`."""

    node: ir.Node  # the MatMul or Gemm
    weight: ir.Value
    transposed: bool
    scale: float

    @property
    def source(self) -> ir.Value:
        """What the product reads now (a rule may have rewired it since the match)."""
        return self.node.inputs[0]

    @property
    def rows(self) -> int:
        shape = const_shape(self.weight)
        return shape[1] if self.transposed else shape[0]

    @property
    def columns(self) -> int:
        shape = const_shape(self.weight)
        return shape[0] if self.transposed else shape[1]

    def array(self, lo: int = 0, hi: int | None = None) -> np.ndarray:
        """Rows lo:hi of the [K, 4H] weight, float64."""
        w = const_array(self.weight)
        w = w.T if self.transposed else w
        return w[lo:hi].astype(np.float64) * self.scale


@dataclass(frozen=True)
class Part:
    """The rows of a term's weight that one operand (x or h) meets."""

    term: Term
    lo: int
    hi: int

    def array(self) -> np.ndarray:
        return self.term.array(self.lo, self.hi)

    @property
    def key(self) -> tuple:
        """Equal keys: the same weights (the same constant, read the same way)."""
        return (id(self.term.weight), self.term.transposed, self.term.scale, self.lo, self.hi)


@dataclass
class Cell:
    gates: ir.Value
    chunks: list[ir.Value]  # the four gate chunks, in their order along the last axis
    roles: dict[str, int]  # "i", "f", "c", "o" -> index of its chunk
    h_new: ir.Value
    c_new: ir.Value
    c_prev: ir.Value
    terms: list[Term]
    bias: np.ndarray  # [4H] in the chunks' order, float64 (the gate chunks' added constants included)
    hidden: int
    activation: Activation = field(default_factory=Activation)
    peepholes: dict[str, np.ndarray] = field(default_factory=dict)  # "i", "f", "o" -> [H]
    x: ir.Value | None = None
    h_prev: ir.Value | None = None  # None with h_part None: no recurrent product (h was zeros, folded away)
    x_part: Part | None = None
    h_part: Part | None = None

    @property
    def order(self) -> str:
        return "".join(sorted(self.roles, key=self.roles.get))


# ---- finding a cell ----

def _scalar(value: ir.Value) -> float | None:
    array = const_array(value)
    return float(array.reshape(-1)[0]) if array is not None and array.size == 1 else None


def _affine(value: ir.Value) -> tuple[ir.Value, float, float]:
    """(z, a, b) with value = a * z + b, walking Add/Sub/Mul/Div by scalar constants."""
    a, b = 1.0, 0.0
    while True:
        node = op(value, "Add", "Sub", "Mul", "Div")
        if node is None or len(node.inputs) != 2:
            return value, a, b
        left, right = _scalar(node.inputs[0]), _scalar(node.inputs[1])
        if right is not None and left is None:
            value, k = node.inputs[0], right
        elif left is not None and right is None and node.op_type in ("Add", "Mul"):
            value, k = node.inputs[1], left
        else:
            return value, a, b
        if node.op_type == "Add":
            b += a * k
        elif node.op_type == "Sub":
            b -= a * k
        elif node.op_type == "Mul":
            a *= k
        elif k != 0:
            a /= k
        else:
            return value, a, b


def _clip_bounds(node: ir.Node) -> tuple[float, float] | None:
    if len(node.inputs) > 1:  # Clip-11: min and max inputs
        if len(node.inputs) < 3 or node.inputs[1] is None or node.inputs[2] is None:
            return None
        lo, hi = _scalar(node.inputs[1]), _scalar(node.inputs[2])
        return None if lo is None or hi is None else (lo, hi)
    lo, hi = attr(node, "min"), attr(node, "max")  # Clip-6
    return None if lo is None or hi is None else (float(lo), float(hi))


def gate_activation(value: ir.Value) -> tuple[Activation, ir.Value] | None:
    """(f, its input) when `value` = f(input) with f Sigmoid or a hard sigmoid:
    HardSigmoid(alpha, beta), or s * clip(a*z + b, 0, hi) with s*hi = 1 (Keras 2's
    clip(0.2x + 0.5, 0, 1), Keras 3's relu6(x + 3) / 6 through tf2onnx)."""
    node = op(value, "Sigmoid", "HardSigmoid")
    if node is not None:
        if node.op_type == "Sigmoid":
            return Activation(), node.inputs[0]
        return Activation("HardSigmoid", float(attr(node, "alpha", 0.2)), float(attr(node, "beta", 0.5))), node.inputs[0]
    inner, scale, shift = _affine(value)
    clip = op(inner, "Clip")
    if clip is None or shift != 0.0 or scale <= 0:
        return None
    bounds = _clip_bounds(clip)
    if bounds is None or bounds[0] != 0.0 or abs(scale * bounds[1] - 1.0) > _HARD_SIGMOID_TOLERANCE:
        return None
    z, a, b = _affine(clip.inputs[0])
    return Activation("HardSigmoid", scale * a, scale * b), z


def _pre_activation(value: ir.Value, states: tuple[ir.Value, ...]) -> tuple[ir.Value, list[ir.Value], np.ndarray | None, ir.Value | None]:
    """(chunk, constants added, peephole P, the state P multiplies): value = chunk + constants + P * state,
    `state` one of `states`."""
    constants, peephole, state = [], None, None
    while (add := op(value, "Add")) is not None and len(add.inputs) == 2:
        for k in (0, 1):
            other = add.inputs[1 - k]
            if const_array(other) is not None:
                constants.append(other)
                value = add.inputs[k]
                break
            mul = op(other, "Mul")
            if peephole is None and mul is not None:
                found = [(const_array(mul.inputs[j]), mul.inputs[1 - j]) for j in (0, 1)]
                found = [(p, s) for p, s in found if p is not None and s in states]
                if found:
                    peephole, state = found[0]
                    value = add.inputs[k]
                    break
        else:
            break
    return value, constants, peephole, state


def match_cell(h_new_node: ir.Node) -> Cell | None:
    """The cell whose h' = f(O) * Tanh(c') is `h_new_node`, or None."""
    if h_new_node.op_type != "Mul" or h_new_node.domain not in ("", "ai.onnx"):
        return None
    for o_side, tc_side in ((0, 1), (1, 0)):
        act_o, tanh_c = gate_activation(h_new_node.inputs[o_side]), op(h_new_node.inputs[tc_side], "Tanh")
        add = op(tanh_c.inputs[0], "Add") if tanh_c is not None else None
        if act_o is None or add is None:
            continue
        muls = [op(v, "Mul") for v in add.inputs]
        if None in muls:
            continue
        # One Mul is f(I) * Tanh(G); the other f(F) * c_prev.
        for ig, fc in ((muls[0], muls[1]), (muls[1], muls[0])):
            for i_side in (0, 1):
                act_i, tanh_g = gate_activation(ig.inputs[i_side]), op(ig.inputs[1 - i_side], "Tanh")
                if act_i is None or tanh_g is None:
                    continue
                for f_side in (0, 1):
                    act_f = gate_activation(fc.inputs[f_side])
                    if act_f is None:
                        continue
                    cell = _with_gates({"i": act_i, "f": act_f, "o": act_o}, tanh_g, h_new_node.outputs[0],
                                       add.outputs[0], fc.inputs[1 - f_side])
                    if cell is not None:
                        return cell
    return None


def _with_gates(acts: dict, tanh_g: ir.Node, h_new, c_new, c_prev) -> Cell | None:
    activation = acts["i"][0]
    if not all(a.same_as(activation) for a, _ in acts.values()):
        return None
    parts = {role: _pre_activation(z, (c_prev,) if role != "o" else (c_new,)) for role, (_, z) in acts.items()}
    parts["c"] = _pre_activation(tanh_g.inputs[0], ())
    values = [parts[r][0] for r in ("i", "f", "c", "o")]
    if len({id(v) for v in values}) != 4:
        return None
    producers = {v.producer() for v in values}
    found = _split_chunks(producers.pop()) if len(producers) == 1 and None not in producers else _slice_chunks(values)
    if found is None:
        return None
    gates, chunks = found
    roles = {role: chunks.index(parts[role][0]) for role in ("i", "f", "c", "o")}
    terms, bias = gate_sum(gates)
    if not terms:
        return None
    hidden = terms[0].columns // 4
    if any(t.columns != 4 * hidden for t in terms):
        return None
    bias = np.zeros(4 * hidden) if bias is None else bias_row(bias, 4 * hidden)
    if bias is None:
        return None
    peepholes = {}
    for role, (_, constants, peephole, _) in parts.items():
        k = roles[role]
        for constant in constants:
            row = bias_row(const_array(constant).astype(np.float64), hidden)
            if row is None:
                return None
            bias[k * hidden:(k + 1) * hidden] += row
        if peephole is not None:
            row = bias_row(peephole.astype(np.float64), hidden)
            if row is None:
                return None
            peepholes[role] = row
    return Cell(gates, chunks, roles, h_new, c_new, c_prev, terms, bias, hidden, activation, peepholes)


def bias_row(array: np.ndarray, width: int) -> np.ndarray | None:
    """`array` as one row of `width` (a scalar broadcast, or equal rows of a constant that
    folding made from a zero state's product), or None."""
    if array.size == 1:
        return np.full(width, float(array.reshape(-1)[0]))
    if array.shape[-1] != width:
        return None
    rows = array.reshape(-1, width)
    return rows[0].astype(np.float64).copy() if (rows == rows[0]).all() else None


def _split_chunks(gates_split: ir.Node) -> tuple[ir.Value, list[ir.Value]] | None:
    """(gates, four chunks) when `gates_split` is a 4-way Split of the last axis into equal parts."""
    if gates_split.op_type != "Split" or len(gates_split.outputs) != 4:
        return None
    gates = gates_split.inputs[0]
    # The last axis of 2-D gates (the rules hold x, and so the gates, to rank 2).
    if attr(gates_split, "axis", 0) not in (-1, 1):
        return None
    sizes = const_array(gates_split.inputs[1]) if len(gates_split.inputs) > 1 else attr(gates_split, "split")
    if sizes is not None and len(set(int(s) for s in np.atleast_1d(sizes))) != 1:
        return None
    return gates, list(gates_split.outputs)


def _slice_chunks(chunk_values: list[ir.Value]) -> tuple[ir.Value, list[ir.Value]] | None:
    """(gates, chunks in axis order) when each value is a Slice of one 2-D tensor's last axis, the
    four covering it in equal parts."""
    spans = []
    for v in chunk_values:
        node = op(v, "Slice")
        bounds = slice_bounds(node) if node is not None else None
        if bounds is None:
            return None
        starts, ends, axes, steps = bounds
        if len(starts) != 1 or axes not in ([-1], [1]) or steps not in (None, [1]):
            return None
        spans.append((starts[0], ends[0], node.inputs[0], v))
    if len({id(s[2]) for s in spans}) != 1:
        return None
    spans.sort(key=lambda s: s[0])
    width = spans[0][1] - spans[0][0]
    if [s[0] for s in spans] != [k * width for k in range(4)] or any(s[1] - s[0] != width for s in spans):
        return None
    return spans[0][2], [s[3] for s in spans]


def gate_sum(value: ir.Value, scale: float = 1.0) -> tuple[list[Term] | None, np.ndarray | None]:
    """The products and the constant bias that add up to `value`; (None, None) if anything else does."""
    array = const_array(value)
    if array is not None:
        return [], scale * array.astype(np.float64)
    node = value.producer()
    if node is None or node.domain not in ("", "ai.onnx"):
        return None, None
    if node.op_type == "Add":
        terms, bias = [], None
        for v in node.inputs:
            t, b = gate_sum(v, scale)
            if t is None:
                return None, None
            terms += t
            if b is not None:
                try:
                    bias = b if bias is None else bias + b
                except ValueError:  # shapes that do not broadcast: not a bias
                    return None, None
        return terms, bias
    if node.op_type == "MatMul":
        shape = const_shape(node.inputs[1])
        if shape is None or len(shape) != 2:
            return None, None
        return [Term(node, node.inputs[1], False, scale)], None
    if node.op_type == "Gemm":
        shape = const_shape(node.inputs[1])
        if attr(node, "transA", 0) or shape is None or len(shape) != 2:
            return None, None
        term = Term(node, node.inputs[1], bool(attr(node, "transB", 0)), scale * attr(node, "alpha", 1.0))
        bias = None
        if len(node.inputs) > 2 and node.inputs[2] is not None:
            c = const_array(node.inputs[2])
            if c is None or c.shape[-1] != term.columns:
                return None, None
            bias = c.astype(np.float64) * attr(node, "beta", 1.0) * scale
        return [term], bias
    return None, None


# ---- telling x from h ----

def same_source(a: ir.Value, b: ir.Value) -> bool:
    """Both read from one tensor by Gather/Slice/Split/Squeeze (silero keeps h and c in one state)."""
    def root(v):
        node = v.producer()
        while node is not None and node.op_type in ("Gather", "Slice", "Split", "Squeeze", "Reshape", "Identity"):
            v = node.inputs[0]
            node = v.producer()
        return v
    return root(a) is root(b)


def _width(value: ir.Value) -> int | None:
    shape = value.shape
    return shape[-1] if shape is not None and len(shape) == 2 and isinstance(shape[-1], int) else None


def operands(cell: Cell, states: frozenset = frozenset()) -> tuple[list[tuple[ir.Value, Part]], str]:
    """The cell's (source, weight rows) operands: two (x and h, in any order) or a reason."""
    H = cell.hidden
    if len(cell.terms) == 1:  # one MatMul of Concat([x, h]) (or [h, x])
        term = cell.terms[0]
        concat = op(term.source, "Concat")
        if concat is None or len(concat.inputs) != 2:
            return [], "the gate product is neither two products nor one of a Concat of x and h"
        rows = term.rows
        widths = [_width(v) if v not in states else H for v in concat.inputs]
        if widths.count(None) == 1:  # the weight's rows are I + H
            known = next(w for w in widths if w is not None)
            widths = [w if w is not None else rows - known for w in widths]
        if None in widths or sum(widths) != rows:
            return [], "the widths of the concatenated x and h are unknown"
        return [(concat.inputs[0], Part(term, 0, widths[0])), (concat.inputs[1], Part(term, widths[0], rows))], ""
    if len(cell.terms) == 2:
        return [(t.source, Part(t, 0, t.rows)) for t in cell.terms], ""
    return [], f"the gates sum {len(cell.terms)} products, not an input and a recurrent one"


AMBIGUOUS = "cannot tell the input x from the recurrent h (both are H wide and neither shares c's source)"


def split_x_h(cell: Cell, states: frozenset = frozenset(), pick_x=None) -> str | None:
    """Fills cell.x / h_prev / x_part / h_part; returns a reason when they cannot be told apart.
    `states`: values known to be the recurrent h (a loop body's state inputs, the previous cell's h').
    `pick_x`: for one step alone, where either H-wide operand may serve as h (the step's outputs
    are the same), given both operands it returns the index of the one to read as x."""
    parts, reason = operands(cell, states)
    if reason:
        return reason
    recurrent = [k for k, (_, p) in enumerate(parts) if p.hi - p.lo == cell.hidden]
    if len(recurrent) == 2:
        recurrent = [k for k in recurrent if parts[k][0] in states or same_source(parts[k][0], cell.c_prev)]
        if len(recurrent) != 1 and pick_x is not None:
            recurrent = [1 - pick_x([v for v, _ in parts])]
    if len(recurrent) != 1:
        return AMBIGUOUS
    k = recurrent[0]
    (cell.h_prev, cell.h_part), (cell.x, cell.x_part) = parts[k], parts[1 - k]
    return None


# ---- the cell as FusedLSTM weights ----

def layer_weights(cell: Cell, recurrent: Part | None = None) -> LayerWeights:
    """ONNX W, R, B (and P) of the cell; `recurrent` stands in for a cell with no recurrent product."""
    H = cell.hidden
    order = [cell.roles[g] for g in GATE_ROWS]

    def onnx_rows(w):  # [K, 4H] in the model's chunk order -> [4H, K] in ONNX's gate order (i, o, f, c)
        return np.concatenate([w[:, k * H:(k + 1) * H] for k in order], axis=1).T

    r = recurrent or cell.h_part
    R = onnx_rows(r.array()) if r is not None else np.zeros((4 * H, H))
    P = None
    if cell.peepholes:
        zero = np.zeros(H)
        P = np.concatenate([cell.peepholes.get(g, zero) for g in ("i", "o", "f")])[None].astype(np.float32)
    return LayerWeights(W=onnx_rows(cell.x_part.array())[None].astype(np.float32), R=R[None].astype(np.float32),
                        B=np.concatenate([onnx_rows(cell.bias[None])[:, 0], np.zeros(4 * H)])[None].astype(np.float32),
                        P=P)


def activation_attributes(activation: Activation, directions: int = 1) -> dict:
    """FusedLSTM attributes for the gates' activation (none for the default Sigmoid)."""
    if activation.name == "Sigmoid":
        return {}
    return {"activations": ",".join([activation.name, "Tanh", "Tanh"] * directions),
            "activation_alpha": [activation.alpha] * directions, "activation_beta": [activation.beta] * directions}


def insert_cell_node(graph, at: ir.Node, cell: Cell, x: ir.Value, h_prev: ir.Value | None, c_prev: ir.Value | None,
                     name: str, *, direction: str = "forward", layout: int = 0,
                     recurrent: Part | None = None) -> ir.Node:
    """A one-layer FusedLSTM with the cell's weights over x ([T, B, I], or [B, T, I] in layout 1),
    starting from h_prev and c_prev ([B, H]; given the state axis here, dropped when proven zeros)."""
    dtype = np.float16 if x.dtype == ir.DataType.FLOAT16 else np.float32
    packed = pack_layers([layer_weights(cell, recurrent)], dtype)
    state_axis = 0 if layout == 0 else 1
    h0, c0 = (None if v is None or is_zeros(v) else opset_nodes.unsqueeze(graph, at, v, [state_axis])
              for v in (h_prev, c_prev))
    attributes = {"hidden_size": cell.hidden, "num_layers": 1, "direction": direction, "layout": layout,
                  **activation_attributes(cell.activation)}
    return insert_fused_node(graph, at, name=name, attributes=attributes, x=x, w=packed.W, b=packed.B,
                             initial_h=h0, initial_c=c0, p=packed.P)
