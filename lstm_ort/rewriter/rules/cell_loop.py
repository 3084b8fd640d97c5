"""Rule: a ``Scan`` or ``Loop`` over time whose body is one LSTM cell -> one ``lstm_ort.FusedLSTM``
over the whole sequence; the loop disappears.

Pattern (the cell as rewriter/cell_pattern.py reads it, or a one-step FusedLSTM that single_lstm
made of a one-step LSTM node, as torch.jit.script exports an LSTMCell, inside the body):

    Scan(h0, c0, X)   body(h, c, x_t) -> (h', c', h')           scan axis 0 or 1, forward or reverse
    Loop(T, "", h0, c0)  body(t, cond, h, c) -> (cond, h', c', h')   with x_t = Gather(X, t)

Condition: the body carries h and c (in either order) and otherwise only values it passes on
unchanged or a sequence it appends h' to (SequenceInsert, from SequenceEmpty, read outside only by
ConcatFromSequence(axis 0, new_axis 1): torch.jit.script's list of outputs); it reads one time
step of one outer sequence, and its scan outputs are h' only; the Loop's trip count is X's length
(Shape(X)[0], or constants that agree). Replacement: FusedLSTM(X, initial_h=h0, initial_c=c0);
final states read Squeeze(Y_h), Squeeze(Y_c), the scanned or appended h' Squeeze(Y) (transposed
where the Scan stacks on the other axis), unchanged values their initial value.
"""

from __future__ import annotations

from dataclasses import dataclass

import onnx_ir as ir

from lstm_ort.ops.identity import is_fused
from lstm_ort.rewriter import opset_nodes, shape_expr
from lstm_ort.rewriter.cell_pattern import Cell, insert_cell_node, match_cell, split_x_h
from lstm_ort.rewriter.fused_node import insert_fused_node
from lstm_ort.rewriter.graph_utils import axes_of, const_array, const_tensor, is_zeros, move_value, slice_bounds
from lstm_ort.rewriter.rule import OK, CheckResult, Rule


@dataclass
class CellLoopMatch:
    node: ir.Node  # the Scan or Loop
    body: ir.Graph
    cell: Cell | None
    reason: str = ""  # why it cannot be rewritten, found while matching
    # Where X ([T, B, I], outer scope), h0 and c0 are read: (node, input index), not the values,
    # since rewriting an earlier loop of a stack replaces the value this one reads.
    sequence_at: tuple[ir.Node, int] | None = None
    h0_at: tuple[ir.Node, int] | None = None
    c0_at: tuple[ir.Node, int] | None = None
    final_h: ir.Value | None = None  # the loop's outputs
    final_c: ir.Value | None = None
    scanned_h: list[ir.Value] | None = None
    direction: str = "forward"
    layout: int = 0  # the sequence's time axis: 0 ([T, B, I]) or 1 ([B, T, I]: a Scan over axis 1, X[:, t])
    scanned_axes: list[int] | None = None  # each scanned h's time axis (None: 0)
    appended_h: list[tuple[ir.Value, int]] | None = None  # ConcatFromSequence outputs of the h' carried, their axis
    unchanged: list[tuple[ir.Value, tuple[ir.Node, int]]] | None = None  # (final, where its initial is read)


def _attr(node: ir.Node, name: str, default=None):
    a = node.attributes.get(name)
    return default if a is None else a.value


def _through_identity(value: ir.Value) -> ir.Value:
    node = value.producer()
    while node is not None and node.op_type == "Identity":
        value = node.inputs[0]
        node = value.producer()
    return value


@dataclass
class OneStep:
    """A one-step FusedLSTM in a loop body: X = Unsqueeze(x, 0), states Unsqueeze(h, 0) and
    Unsqueeze(c, 0), h' = Squeeze(Y_h, 0), c' = Squeeze(Y_c, 0)."""

    node: ir.Node
    x: ir.Value
    h_prev: ir.Value
    c_prev: ir.Value
    h_new: ir.Value
    c_new: ir.Value

    @property
    def hidden(self) -> int:
        return _attr(self.node, "hidden_size")

    order = "iofc"


def _unsqueezed(value: ir.Value | None) -> ir.Value | None:
    node = value.producer() if value is not None else None
    return node.inputs[0] if node is not None and node.op_type == "Unsqueeze" and axes_of(node) == [0] else None


def _squeezed(value: ir.Value) -> ir.Value | None:
    uses = list(value.uses())
    if len(uses) != 1 or value.is_graph_output() or uses[0].node.op_type != "Squeeze" or axes_of(uses[0].node) != [0]:
        return None
    return uses[0].node.outputs[0]


def _one_step(node: ir.Node) -> OneStep | None:
    if (not is_fused(node) or _attr(node, "num_layers", 1) != 1 or _attr(node, "direction", "forward") == "bidirectional"
            or _attr(node, "layout", 0) != 0 or any(k in node.attributes for k in ("rank_input", "rank_recurrent"))
            or (len(node.inputs) > 3 and node.inputs[3] is not None) or node.outputs[0].uses()
            or node.outputs[0].is_graph_output() or len(node.inputs) < 6):
        return None
    found = [_unsqueezed(node.inputs[k]) for k in (0, 4, 5)] + [_squeezed(node.outputs[k]) for k in (1, 2)]
    return None if None in found else OneStep(node, *found)


def _body_cell(body: ir.Graph, states: list[ir.Value]) -> tuple[Cell | OneStep | None, str]:
    """The one cell of a loop body, with x and h told apart (h is one of the carried `states`),
    or the reason why not."""
    cells = [c for c in (match_cell(n) for n in body) if c is not None]
    steps = [s for s in (_one_step(n) for n in body) if s is not None]
    if len(cells) + len(steps) != 1:
        return None, ""
    if steps:
        return steps[0], ""
    return cells[0], split_x_h(cells[0], frozenset(states))


def _states(match: CellLoopMatch, state_inputs: list[ir.Value], state_outputs: list[ir.Value], first_initial: int,
            outer_final: list[ir.Value]) -> str:
    """Pairs the carried values with the cell's h and c, a sequence of h' or values passed on
    unchanged; a reason when something else is carried. The loop node's input first_initial + k
    is the initial value of state k."""
    cell = match.cell
    match.appended_h, match.unchanged = [], []
    for k, (prev, new) in enumerate(zip(state_inputs, state_outputs)):
        new, initial_at = _through_identity(new), (match.node, first_initial + k)
        insert = new.producer()
        if prev is cell.h_prev and new is cell.h_new:
            match.h0_at, match.final_h = initial_at, outer_final[k]
        elif prev is cell.c_prev and new is cell.c_new:
            match.c0_at, match.final_c = initial_at, outer_final[k]
        elif new is prev:
            match.unchanged.append((outer_final[k], initial_at))
        elif (insert is not None and insert.op_type == "SequenceInsert" and len(insert.inputs) == 2
              and insert.inputs[0] is prev and _through_identity(insert.inputs[1]) is cell.h_new
              and len(list(prev.uses())) == 1):
            reason = _appended(match, outer_final[k], initial_at)
            if reason:
                return reason
        else:
            return "the loop carries a value other than h, c, a sequence of h' or one it leaves unchanged"
    if match.h0_at is None or match.c0_at is None:
        return "the carried values are not the cell's h and c"
    return ""


def _appended(match: CellLoopMatch, final: ir.Value, initial_at: tuple[ir.Node, int]) -> str:
    """Records the readers of a carried sequence of h' (torch.jit.script's list of outputs)."""
    initial = initial_at[0].inputs[initial_at[1]]
    start = initial.producer() if initial is not None else None
    if start is None or start.op_type != "SequenceEmpty":
        return "the carried sequence of h' does not start empty"
    readers = [u.node for u in final.uses()]
    if final.is_graph_output() or any(n.op_type != "ConcatFromSequence" or _attr(n, "axis") not in (0, 1, -2, -3)
                                      or _attr(n, "new_axis", 0) != 1 for n in readers):
        return "the carried sequence of h' is read other than by ConcatFromSequence(new_axis 1) on axis 0 or 1"
    match.appended_h += [(n.outputs[0], _attr(n, "axis") % 3) for n in readers]
    return ""


def _scanned(match: CellLoopMatch, body_outputs: list[ir.Value], outer_outputs: list[ir.Value]) -> str:
    if any(_through_identity(v) is not match.cell.h_new for v in body_outputs):
        return "the loop scans out values other than h"
    match.scanned_h = list(outer_outputs)
    return ""


def _match_scan(node: ir.Node) -> CellLoopMatch:
    body = _attr(node, "body")
    M = _attr(node, "num_scan_inputs", 0)
    m = CellLoopMatch(node, body, *_body_cell(body, list(body.inputs[:len(body.inputs) - M])))
    if m.cell is None or m.reason:
        return m
    if len(node.inputs) != len(body.inputs) or M != 1:  # opset 8's Scan has a leading sequence_lens input
        m.reason = "a Scan with other than one scanned input (or opset 8's batched Scan)"
        return m
    N = len(node.inputs) - M
    scan_outputs = len(node.outputs) - N
    # Rank-3 sequences ([T, B, .] or [B, T, .]): negative axes count from the end (opset 11).
    in_axes = [a + 3 if a < 0 else a for a in (_attr(node, "scan_input_axes") or [0])]
    out_axes = [a + 3 if a < 0 else a for a in (_attr(node, "scan_output_axes") or [0] * scan_outputs)]
    if any(a not in (0, 1) for a in [*in_axes, *out_axes]):
        m.reason = "the Scan runs over an axis other than 0 or 1 of a [T, B, .] or [B, T, .] sequence"
        return m
    m.layout, m.scanned_axes = in_axes[0], out_axes
    in_dirs = list(_attr(node, "scan_input_directions") or [0])
    out_dirs = list(_attr(node, "scan_output_directions") or [0] * scan_outputs)
    if set(in_dirs) | set(out_dirs) not in ({0}, {1}):  # LSTM's reverse writes Y[t] where it read x[t]
        m.reason = "the Scan reads and writes time in different directions"
        return m
    m.direction = "reverse" if in_dirs == [1] else "forward"
    if body.inputs[N] is not m.cell.x:
        m.reason = "the cell's input is not the scanned time step"
        return m
    m.sequence_at = (node, N)
    m.reason = (_states(m, list(body.inputs[:N]), list(body.outputs[:N]), 0, list(node.outputs[:N]))
                or _scanned(m, list(body.outputs[N:]), list(node.outputs[N:])))
    return m


def _whole_slice(value: ir.Value) -> ir.Node | None:
    """The Slice when value is all of its input (starts 0, ends past any length, steps 1: the
    `x[:]` of torch.jit.script's `x[:, t]`)."""
    node = value.producer()
    bounds = slice_bounds(node) if node is not None else None
    if bounds is None:
        return None
    starts, ends, _, steps = bounds
    whole = all(s == 0 for s in starts) and all(e >= 2 ** 31 - 1 for e in ends) and steps in (None, [1] * len(starts))
    return node if whole else None


def _trip_count_is_length(trip: ir.Value | None, sequence: ir.Value, axis: int) -> bool:
    """The Loop's trip count is X's time dimension (axis 0, or 1 in a batch-major X): Shape(X)[axis]
    in any of the usual spellings, or a constant equal to X's static length."""
    if trip is None:
        return False
    value = const_array(trip)
    if value is not None:
        dims = sequence.shape
        return dims is not None and len(dims) == 3 and isinstance(dims[axis], int) and \
            int(value.reshape(-1)[0]) == dims[axis]
    found = shape_expr.elements(trip)
    return found is not None and len(found) == 1 and found[0] == shape_expr.dim(sequence, axis)


def _match_loop(node: ir.Node) -> CellLoopMatch:
    body = _attr(node, "body")
    m = CellLoopMatch(node, body, *_body_cell(body, list(body.inputs[2:])))
    if m.cell is None or m.reason:
        return m
    carried = len(node.inputs) - 2
    iteration, cond_in = body.inputs[0], body.inputs[1]
    cond = node.inputs[1] if len(node.inputs) > 1 else None
    cond_const = const_array(cond) if cond is not None else None
    cond_out = _through_identity(body.outputs[0])
    cond_out_const = const_array(cond_out)
    if not ((cond is None or (cond_const is not None and bool(cond_const.reshape(-1)[0])))
            and (cond_out is cond_in or (cond_out_const is not None and bool(cond_out_const.reshape(-1)[0])))):
        m.reason = "the Loop has a condition that may stop it early"
        return m
    gather = m.cell.x.producer()
    reader = _whole_slice(gather.inputs[0]) if gather is not None and gather.inputs else None
    m.sequence_at = (reader, 0) if reader is not None else (gather, 0)
    if gather is None or gather.op_type != "Gather" or _attr(gather, "axis", 0) not in (0, 1) or \
            _through_identity(gather.inputs[1]) is not iteration or \
            m.sequence_at[0].inputs[0].producer() in list(body):
        m.reason = "the cell's input is not X[t] (or X[:, t]) of an outer sequence X at the iteration number t"
        return m
    sequence, m.layout = m.sequence_at[0].inputs[0], _attr(gather, "axis", 0)
    if not _trip_count_is_length(node.inputs[0], sequence, m.layout):
        m.reason = "the Loop's trip count is not the sequence's length"
        return m
    m.reason = (_states(m, list(body.inputs[2:]), list(body.outputs[1:1 + carried]), 2, list(node.outputs[:carried]))
                or _scanned(m, list(body.outputs[1 + carried:]), list(node.outputs[carried:])))
    return m


class CellLoop(Rule):
    name = "cell_loop"

    def find(self, graph) -> list[CellLoopMatch]:
        matches = []
        for node in graph:
            if node.domain not in ("", "ai.onnx") or node.op_type not in ("Scan", "Loop"):
                continue
            m = _match_scan(node) if node.op_type == "Scan" else _match_loop(node)
            if m.cell is not None:
                matches.append(m)
        return matches

    def nodes(self, m: CellLoopMatch) -> list[ir.Node]:
        return [m.node, *([m.cell.node] if isinstance(m.cell, OneStep) else [])]

    def describe(self, m: CellLoopMatch) -> str:
        what = "a one-step LSTM" if isinstance(m.cell, OneStep) else "an unrolled cell"
        return f"{m.node.op_type} over {what} H={m.cell.hidden} gate order {m.cell.order}"

    def check(self, m: CellLoopMatch) -> CheckResult:
        return CheckResult.fail(m.reason) if m.reason else OK

    def rewrite(self, graph, m: CellLoopMatch) -> ir.Node:
        anchor = m.node
        read = lambda at: at[0].inputs[at[1]]  # noqa: E731
        name = (m.node.name or m.node.op_type) + "_fused"
        if isinstance(m.cell, OneStep):
            fused = _insert_step_node(graph, anchor, m.cell.node, read(m.sequence_at), read(m.h0_at), read(m.c0_at),
                                      name, m.direction, m.layout)
        else:
            fused = insert_cell_node(graph, anchor, m.cell, read(m.sequence_at), read(m.h0_at), read(m.c0_at), name,
                                     direction=m.direction, layout=m.layout)
        state_axis = m.layout  # Y_h: [1, B, H] (layout 0) or [B, 1, H]
        for value, out in ((m.final_h, fused.outputs[1]), (m.final_c, fused.outputs[2])):
            if value.uses() or value.is_graph_output():
                move_value(value, opset_nodes.squeeze(graph, anchor, out, [state_axis]))
        for value, axis in zip(m.scanned_h, m.scanned_axes or [0] * len(m.scanned_h)):
            if value.uses() or value.is_graph_output():
                sequence = opset_nodes.squeeze(graph, anchor, fused.outputs[0], [1 + m.layout])
                if axis != m.layout:
                    sequence = opset_nodes.transpose(graph, anchor, sequence, [1, 0, 2])
                move_value(value, sequence)
        for value, axis in m.appended_h or []:  # h' stacked on a new axis 0 or 1
            sequence = opset_nodes.squeeze(graph, anchor, fused.outputs[0], [1 + m.layout])
            if axis != m.layout:
                sequence = opset_nodes.transpose(graph, anchor, sequence, [1, 0, 2])
            move_value(value, sequence)
        for final, initial_at in m.unchanged or []:
            if final.uses() or final.is_graph_output():
                move_value(final, opset_nodes.node(graph, anchor, "Identity", [read(initial_at)]))
        appended = {id(v) for v, _ in m.appended_h or []}
        graph.remove([n for n in graph if n.op_type == "ConcatFromSequence" and id(n.outputs[0]) in appended], safe=True)
        graph.remove(m.node, safe=True)
        graph.sort()
        return fused


def _insert_step_node(graph, anchor: ir.Node, step: ir.Node, x: ir.Value, h0: ir.Value, c0: ir.Value, name: str,
                      direction: str, layout: int) -> ir.Node:
    """The loop body's one-step FusedLSTM over the whole sequence: its attributes and packed weights."""
    weights = {k: const_tensor(step.inputs[i]) if len(step.inputs) > i and step.inputs[i] is not None else None
               for k, i in (("w", 1), ("b", 2), ("p", 6))}
    attributes = {k: v for k, v in step.attributes.items() if k not in ("direction", "layout")}
    attributes["direction"] = ir.AttrString("direction", direction)
    attributes["layout"] = ir.AttrInt64("layout", layout)
    h0, c0 = (None if is_zeros(v) else opset_nodes.unsqueeze(graph, anchor, v, [layout]) for v in (h0, c0))
    return insert_fused_node(graph, anchor, name=name, attributes=attributes, x=x, initial_h=h0, initial_c=c0,
                             **weights)
