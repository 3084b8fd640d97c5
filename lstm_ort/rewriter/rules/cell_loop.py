"""Rule: a ``Scan`` or ``Loop`` over time whose body is one LSTM cell -> one ``lstm_ort.FusedLSTM``
over the whole sequence; the loop disappears.

Pattern (the cell as unrolled_cell reads it, inside the body):

    Scan(h0, c0, X)   body(h, c, x_t) -> (h', c', h')           scan axis 0 or 1, forward or reverse
    Loop(T, "", h0, c0)  body(t, cond, h, c) -> (cond, h', c', h')   with x_t = Gather(X, t)

Condition: the body carries exactly h and c (in either order), reads one time step of one outer
sequence, and its scan outputs are h' only; the Loop's trip count is X's length (Shape(X)[0], or
constants that agree). Replacement: FusedLSTM(X, initial_h=h0, initial_c=c0); final states read
Squeeze(Y_h), Squeeze(Y_c), the scanned h' reads Squeeze(Y, axis 1).
"""

from __future__ import annotations

from dataclasses import dataclass

import onnx_ir as ir

from lstm_ort.rewriter import opset_nodes
from lstm_ort.rewriter.graph_utils import const_array, move_value
from lstm_ort.rewriter.rule import OK, CheckResult, Rule
from lstm_ort.rewriter.cell_pattern import Cell, activation_refusal, insert_cell_node, match_cell, split_x_h


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
    layout: int = 0  # the sequence's time axis: 0 ([T, B, I]) or 1 ([B, T, I], a Scan over axis 1)
    scanned_axes: list[int] | None = None  # each scanned h's time axis (None: 0)


def _attr(node: ir.Node, name: str, default=None):
    a = node.attributes.get(name)
    return default if a is None else a.value


def _through_identity(value: ir.Value) -> ir.Value:
    node = value.producer()
    while node is not None and node.op_type == "Identity":
        value = node.inputs[0]
        node = value.producer()
    return value


def _body_cell(body: ir.Graph, states: list[ir.Value]) -> tuple[Cell | None, str]:
    """The one cell of a loop body, with x and h told apart (h is one of the carried `states`),
    or the reason why not."""
    cells = [c for c in (match_cell(n) for n in body) if c is not None]
    if len(cells) != 1:
        return None, ""
    return cells[0], split_x_h(cells[0], frozenset(states)) or activation_refusal(cells[0])


def _states(match: CellLoopMatch, state_inputs: list[ir.Value], state_outputs: list[ir.Value], first_initial: int,
            outer_final: list[ir.Value]) -> str:
    """Pairs the carried values with the cell's h and c; a reason when they are not exactly those.
    The loop node's input first_initial + k is the initial value of state k."""
    cell = match.cell
    if len(state_inputs) != 2:
        return f"the loop carries {len(state_inputs)} values, not h and c"
    for k in (0, 1):
        prev, new = state_inputs[k], _through_identity(state_outputs[k])
        if prev is cell.h_prev and new is cell.h_new:
            match.h0_at, match.final_h = (match.node, first_initial + k), outer_final[k]
        elif prev is cell.c_prev and new is cell.c_new:
            match.c0_at, match.final_c = (match.node, first_initial + k), outer_final[k]
        else:
            return "the carried values are not the cell's h and c"
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


def _trip_count_is_length(trip: ir.Value | None, sequence: ir.Value) -> bool:
    """The Loop's trip count is X's first dimension: Shape(X)[0] in any of the usual spellings, or a
    constant equal to X's static length."""
    if trip is None:
        return False
    value = const_array(trip)
    if value is not None:
        dims = sequence.shape
        return dims is not None and isinstance(dims[0], int) and int(value.reshape(-1)[0]) == dims[0]
    node = trip.producer()
    while node is not None and node.op_type in ("Squeeze", "Reshape", "Cast", "Identity"):
        node = node.inputs[0].producer()
    if node is None:
        return False
    if node.op_type == "Shape":  # Shape(X, start=0, end=1)
        return node.inputs[0] is sequence and _attr(node, "start", 0) == 0 and _attr(node, "end", None) == 1
    if node.op_type in ("Gather", "Slice"):
        shape = node.inputs[0].producer()
        index = const_array(node.inputs[1])
        if shape is None or shape.op_type != "Shape" or shape.inputs[0] is not sequence or index is None:
            return False
        if node.op_type == "Gather":
            return int(index.reshape(-1)[0]) == 0 and _attr(node, "axis", 0) == 0
        end = const_array(node.inputs[2]) if len(node.inputs) > 2 else None
        return int(index.reshape(-1)[0]) == 0 and end is not None and int(end.reshape(-1)[0]) == 1
    return False


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
    if gather is None or gather.op_type != "Gather" or _attr(gather, "axis", 0) != 0 or \
            _through_identity(gather.inputs[1]) is not iteration or gather.inputs[0].producer() in list(body):
        m.reason = "the cell's input is not X[t] of an outer sequence X at the iteration number t"
        return m
    m.sequence_at = (gather, 0)
    if not _trip_count_is_length(node.inputs[0], gather.inputs[0]):
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
        return [m.node]

    def describe(self, m: CellLoopMatch) -> str:
        order = "".join(sorted(m.cell.roles, key=m.cell.roles.get))
        return f"{m.node.op_type} over an unrolled cell H={m.cell.hidden} gate order {order}"

    def check(self, m: CellLoopMatch) -> CheckResult:
        return CheckResult.fail(m.reason) if m.reason else OK

    def rewrite(self, graph, m: CellLoopMatch) -> ir.Node:
        anchor = m.node
        read = lambda at: at[0].inputs[at[1]]  # noqa: E731
        fused = insert_cell_node(graph, anchor, m.cell, read(m.sequence_at), read(m.h0_at), read(m.c0_at),
                                 (m.node.name or m.node.op_type) + "_fused", direction=m.direction, layout=m.layout)
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
        graph.remove(m.node, safe=True)
        return fused
