"""Rule: an LSTM cell written out in plain ops -> a one-step (T=1) ``lstm_ort.FusedLSTM``.

Pattern, as torch's ``nn.LSTMCell`` exports, tf2onnx writes Keras cells, and streaming models
carry h and c through graph inputs and outputs:

    gates = x @ Wx + h @ Wh (+ bias)      MatMul or Gemm terms, or one MatMul of Concat([x, h])
    a, b, c, d = Split(gates, 4)          or four Slices of the last axis
    c' = Sigmoid(f) * c + Sigmoid(i) * Tanh(g)
    h' = Sigmoid(o) * Tanh(c')

The gate order is read from the dataflow, not assumed: the chunk under Tanh is the cell input,
the Sigmoid multiplied with it the input gate, the one multiplied with c the forget gate, the one
multiplied with Tanh(c') the output gate. So torch (i, f, g, o), Keras (i, f, c, o) and ONNX
(i, o, f, c) orders all match. Condition: weights and biases constant, x and h told apart
(by their widths, or where both are H wide, by h coming from the same tensor as c).
Replacement: FusedLSTM over Unsqueeze(x) with initial states Unsqueeze(h), Unsqueeze(c); h' and
c' read Squeeze(Y_h), Squeeze(Y_c).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx_ir as ir

from lstm_ort.ops.packing import LayerWeights, pack_layers
from lstm_ort.rewriter.fused_node import insert_fused_node
from lstm_ort.rewriter.graph_utils import add_constant, const_array, is_zeros
from lstm_ort.rewriter.rule import OK, CheckResult, Rule

_GATE_ROWS = ("i", "o", "f", "c")  # ONNX's order of W's row blocks


def _op(value: ir.Value | None, *op_types: str) -> ir.Node | None:
    node = value.producer() if value is not None else None
    return node if node is not None and node.op_type in op_types and node.domain in ("", "ai.onnx") else None


def _attr(node: ir.Node, name: str, default=None):
    a = node.attributes.get(name)
    return default if a is None else a.value


@dataclass
class Term:
    """One product in the gate sum: source @ weight, weight as [K, 4H]."""

    source: ir.Value
    weight: np.ndarray
    node: ir.Node


@dataclass
class Cell:
    gates: ir.Value
    chunks: list[ir.Value]  # the four gate chunks, in their order along the last axis
    roles: dict[str, int]  # "i", "f", "c", "o" -> index of its chunk
    h_new: ir.Value
    c_new: ir.Value
    c_prev: ir.Value
    terms: list[Term]
    bias: np.ndarray  # [4H], zeros when the cell has none
    hidden: int
    x: ir.Value | None = None
    h_prev: ir.Value | None = None
    w_x: np.ndarray | None = None  # [I, 4H]
    w_h: np.ndarray | None = None  # [H, 4H]


def _chunks(gates_split: ir.Node) -> tuple[ir.Value, list[ir.Value]] | None:
    """(gates, four chunks) when `gates_split` is a 4-way Split of the last axis into equal parts."""
    if gates_split.op_type != "Split" or len(gates_split.outputs) != 4:
        return None
    gates = gates_split.inputs[0]
    # The last axis of 2-D gates (check() holds x, and so the gates, to rank 2).
    if _attr(gates_split, "axis", 0) not in (-1, 1):
        return None
    sizes = const_array(gates_split.inputs[1]) if len(gates_split.inputs) > 1 else _attr(gates_split, "split")
    if sizes is not None and len(set(int(s) for s in np.atleast_1d(sizes))) != 1:
        return None
    return gates, list(gates_split.outputs)


def _match_cell(h_new_node: ir.Node) -> Cell | None:
    """The cell whose h' = Sigmoid(o) * Tanh(c') is `h_new_node`, or None."""
    if h_new_node.op_type != "Mul" or h_new_node.domain not in ("", "ai.onnx"):
        return None
    for o_side, tc_side in ((0, 1), (1, 0)):
        sig_o, tanh_c = _op(h_new_node.inputs[o_side], "Sigmoid"), _op(h_new_node.inputs[tc_side], "Tanh")
        add = _op(tanh_c.inputs[0], "Add") if tanh_c is not None else None
        if sig_o is None or add is None:
            continue
        muls = [_op(v, "Mul") for v in add.inputs]
        if None in muls:
            continue
        # One Mul is Sigmoid(i) * Tanh(g); the other Sigmoid(f) * c_prev.
        for ig, fc in ((muls[0], muls[1]), (muls[1], muls[0])):
            ig_ops = [(_op(v, "Sigmoid"), _op(v, "Tanh")) for v in ig.inputs]
            sig_i = next((s for s, _ in ig_ops if s is not None), None)
            tanh_g = next((t for _, t in ig_ops if t is not None), None)
            if sig_i is None or tanh_g is None:
                continue
            for f_side in (0, 1):
                sig_f = _op(fc.inputs[f_side], "Sigmoid")
                if sig_f is None:
                    continue
                c_prev = fc.inputs[1 - f_side]
                cell = _with_gates(sig_i, sig_f, tanh_g, sig_o, h_new_node.outputs[0], add.outputs[0], c_prev)
                if cell is not None:
                    return cell
    return None


def _slices(chunk_values: list[ir.Value]) -> tuple[ir.Value, list[ir.Value]] | None:
    """(gates, chunks in axis order) when each value is a Slice of one 2-D tensor's last axis, the
    four covering it in equal parts."""
    spans = []
    for v in chunk_values:
        node = _op(v, "Slice")
        if node is None or len(node.inputs) < 4:
            return None
        starts, ends, axes = (const_array(node.inputs[k]) for k in (1, 2, 3))
        steps = const_array(node.inputs[4]) if len(node.inputs) > 4 and node.inputs[4] is not None else None
        if any(a is None or a.size != 1 for a in (starts, ends, axes)) or (steps is not None and int(steps[0]) != 1):
            return None
        if int(axes.ravel()[0]) not in (-1, 1):
            return None
        spans.append((int(starts.ravel()[0]), int(ends.ravel()[0]), node.inputs[0], v))
    if len({s[2] for s in spans}) != 1:
        return None
    spans.sort(key=lambda s: s[0])
    width = spans[0][1] - spans[0][0]
    if [s[0] for s in spans] != [k * width for k in range(4)] or any(s[1] - s[0] != width for s in spans):
        return None
    return spans[0][2], [s[3] for s in spans]


def _with_gates(sig_i, sig_f, tanh_g, sig_o, h_new, c_new, c_prev) -> Cell | None:
    activations = {"i": sig_i, "f": sig_f, "c": tanh_g, "o": sig_o}
    if len({id(a) for a in activations.values()}) != 4:
        return None
    producers = {a.inputs[0].producer() for a in activations.values()}
    if len(producers) == 1 and None not in producers:
        found = _chunks(producers.pop())
    else:
        found = _slices([a.inputs[0] for a in activations.values()])
    if found is None:
        return None
    gates, chunks = found
    roles = {role: chunks.index(a.inputs[0]) for role, a in activations.items()}
    if len(set(roles.values())) != 4:
        return None
    terms, bias = _gate_sum(gates)
    if terms is None or not terms:
        return None
    hidden = terms[0].weight.shape[1] // 4
    if any(t.weight.shape[1] != 4 * hidden for t in terms) or (bias is not None and bias.size != 4 * hidden):
        return None
    return Cell(gates, chunks, roles, h_new, c_new, c_prev, terms,
                bias if bias is not None else np.zeros(4 * hidden, np.float32), hidden)


def _gate_sum(value: ir.Value, scale: float = 1.0) -> tuple[list[Term] | None, np.ndarray | None]:
    """The products and the constant bias that add up to `value`; (None, None) if anything else does."""
    array = const_array(value)
    if array is not None:
        return [], scale * array.astype(np.float64).reshape(-1)
    node = value.producer()
    if node is None or node.domain not in ("", "ai.onnx"):
        return None, None
    if node.op_type == "Add":
        terms, bias = [], None
        for v in node.inputs:
            t, b = _gate_sum(v, scale)
            if t is None:
                return None, None
            terms += t
            bias = b if bias is None else (bias + b if b is not None else bias)
        return terms, bias
    if node.op_type == "MatMul":
        w = const_array(node.inputs[1])
        if w is None or w.ndim != 2:
            return None, None
        return [Term(node.inputs[0], scale * w.astype(np.float64), node)], None
    if node.op_type == "Gemm":
        if _attr(node, "transA", 0):
            return None, None
        w = const_array(node.inputs[1])
        if w is None or w.ndim != 2:
            return None, None
        w = (w.T if _attr(node, "transB", 0) else w).astype(np.float64) * _attr(node, "alpha", 1.0) * scale
        bias = None
        if len(node.inputs) > 2 and node.inputs[2] is not None:
            c = const_array(node.inputs[2])
            if c is None or c.size != w.shape[1]:
                return None, None
            bias = c.astype(np.float64).reshape(-1) * _attr(node, "beta", 1.0) * scale
        return [Term(node.inputs[0], w, node)], bias
    return None, None


def _same_source(a: ir.Value, b: ir.Value) -> bool:
    """Both read from one tensor by Gather/Slice/Split/Squeeze (silero keeps h and c in one state)."""
    def root(v):
        node = v.producer()
        while node is not None and node.op_type in ("Gather", "Slice", "Split", "Squeeze", "Reshape", "Identity"):
            v = node.inputs[0]
            node = v.producer()
        return v
    return root(a) is root(b)


def _split_x_h(cell: Cell, states: frozenset = frozenset()) -> str | None:
    """Fills cell.x / h_prev / w_x / w_h; returns a reason when they cannot be told apart.
    `states`: values known to be carried state (a loop body's state inputs): h is among them."""
    H = cell.hidden
    if len(cell.terms) == 1:  # one MatMul of Concat([x, h]) (or [h, x])
        term = cell.terms[0]
        concat = _op(term.source, "Concat")
        if concat is None or len(concat.inputs) != 2:
            return "the gate product is neither two products nor one of a Concat of x and h"
        rows = term.weight.shape[0]
        widths = [_width(v) if v not in states else H for v in concat.inputs]
        if widths.count(None) == 1:  # the weight's rows are I + H
            known = next(w for w in widths if w is not None)
            widths = [w if w is not None else rows - known for w in widths]
        if None in widths or sum(widths) != rows:
            return "the widths of the concatenated x and h are unknown"
        parts = [(concat.inputs[0], term.weight[:widths[0]]), (concat.inputs[1], term.weight[widths[0]:])]
    elif len(cell.terms) == 2:
        parts = [(t.source, t.weight) for t in cell.terms]
    else:
        return f"the gates sum {len(cell.terms)} products, not an input and a recurrent one"
    recurrent = [k for k, (_, w) in enumerate(parts) if w.shape[0] == H]
    if len(recurrent) == 2:
        recurrent = [k for k in recurrent if parts[k][0] in states or _same_source(parts[k][0], cell.c_prev)]
    if len(recurrent) != 1:
        return "cannot tell the input x from the recurrent h (both are H wide and neither shares c's source)"
    k = recurrent[0]
    (cell.h_prev, cell.w_h), (cell.x, cell.w_x) = parts[k], parts[1 - k]
    return None


def _width(value: ir.Value) -> int | None:
    shape = value.shape
    return shape[-1] if shape is not None and len(shape) == 2 and isinstance(shape[-1], int) else None


class UnrolledCell(Rule):
    name = "unrolled_cell"

    def find(self, graph) -> list[Cell]:
        cells = []
        for node in graph:
            cell = _match_cell(node)
            if cell is not None:
                cells.append(cell)
        return cells

    def nodes(self, cell: Cell) -> list[ir.Node]:
        return [cell.h_new.producer()]

    def describe(self, cell: Cell) -> str:
        order = "".join(sorted(cell.roles, key=cell.roles.get))
        return f"unrolled cell H={cell.hidden} gate order {order}"

    def check(self, cell: Cell) -> CheckResult:
        reason = _split_x_h(cell)
        if reason:
            return CheckResult.fail(reason)
        for name, value in (("x", cell.x), ("h", cell.h_prev), ("c", cell.c_prev)):
            if value.shape is not None and len(value.shape) != 2:
                return CheckResult.fail(f"{name} has rank {len(value.shape)}, not 2 ([batch, features])")
        if cell.x.shape is None and not any(t.node.op_type == "Gemm" and t.source is cell.x for t in cell.terms):
            return CheckResult.fail("the rank of x is unknown (a MatMul also takes batched inputs)")
        if cell.x.dtype not in (ir.DataType.FLOAT, ir.DataType.FLOAT16, None):
            return CheckResult.fail(f"element type {cell.x.dtype} is not float32/float16")
        return OK

    def rewrite(self, graph, cell: Cell) -> ir.Node:
        # Inserted before the cell's last node, which comes after all of x, h and c; the graph is
        # sorted again at the end, since later uses of h' and c' may precede that node.
        anchor = cell.h_new.producer()
        axis0 = add_constant(graph, anchor, "cell_axis0", np.array([0], np.int64))
        x = insert_op(graph, anchor, "Unsqueeze", cell.x, axis0)
        fused = insert_cell_node(graph, anchor, cell, x, cell.h_prev, cell.c_prev, axis0,
                                 (cell.h_new.producer().name or "cell") + "_fused")
        for value, out in ((cell.h_new, fused.outputs[1]), (cell.c_new, fused.outputs[2])):
            move_value(value, insert_op(graph, anchor, "Squeeze", out, axis0))
        graph.sort()
        return fused


def insert_op(graph, anchor: ir.Node, op_type: str, *inputs: ir.Value) -> ir.Value:
    node = ir.Node("", op_type, inputs)
    graph.insert_before(anchor, node)
    return node.outputs[0]


def move_value(old: ir.Value, new: ir.Value) -> None:
    """Every use, graph-output place and name of `old` to `new`, the same tensor."""
    new.type, new.shape = old.type, old.shape
    ir.convenience.replace_all_uses_with(old, new, replace_graph_outputs=True)
    if old.is_graph_output() or old.name:
        name, old.name = old.name, None
        new.name = name


def insert_cell_node(graph, anchor: ir.Node, cell: Cell, x: ir.Value, h_prev: ir.Value, c_prev: ir.Value,
                     axis0: ir.Value, name: str, direction: str = "forward") -> ir.Node:
    """A one-layer FusedLSTM with the cell's weights over x ([T, B, I]), starting from h_prev and
    c_prev ([B, H]; Unsqueezed here, dropped when known zeros)."""
    H = cell.hidden
    order = [cell.roles[g] for g in _GATE_ROWS]

    def onnx_rows(w):  # [K, 4H] in the model's chunk order -> [4H, K] in ONNX's gate order (i, o, f, c)
        return np.concatenate([w[:, k * H:(k + 1) * H] for k in order], axis=1).T

    layer = LayerWeights(W=onnx_rows(cell.w_x)[None].astype(np.float32),
                         R=onnx_rows(cell.w_h)[None].astype(np.float32),
                         B=np.concatenate([onnx_rows(cell.bias[None])[:, 0], np.zeros(4 * H)])[None].astype(np.float32))
    packed = pack_layers([layer], np.float16 if cell.x.dtype == ir.DataType.FLOAT16 else np.float32)
    h0 = None if is_zeros(h_prev) else insert_op(graph, anchor, "Unsqueeze", h_prev, axis0)
    c0 = None if is_zeros(c_prev) else insert_op(graph, anchor, "Unsqueeze", c_prev, axis0)
    return insert_fused_node(graph, anchor, name=name,
                             attributes={"hidden_size": H, "num_layers": 1, "direction": direction},
                             x=x, w=packed.W, b=packed.B, initial_h=h0, initial_c=c0)
