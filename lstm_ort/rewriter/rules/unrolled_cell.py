"""Rule: one LSTM cell written out in plain ops (rewriter/cell_pattern.py) -> a one-step (T=1)
``lstm_ort.FusedLSTM``: streaming models that carry h and c through graph inputs and outputs.

Condition: weights and biases constant, x and h told apart by their widths (where both are H
wide either serves for one step, exactly: x W + h R is the same sum; h is then the operand from
c's tensor, else a graph input, x the h' of a one-step node below if any). Cells chained over time (one's c' is the next one's
c) are cell_chain's: a chain it refused is left as it is, never cut into one-step nodes, which
would run slower than the cells (the chain's finding says why).
Replacement: FusedLSTM over Unsqueeze(x) with initial states Unsqueeze(h), Unsqueeze(c); h' and
c' read Squeeze(Y_h), Squeeze(Y_c). A cell whose x is the h' of a one-step FusedLSTM made here
(stacked streaming cells) reads that node's Y instead, so stack_lstm joins the two into one node.
"""

from __future__ import annotations

import onnx_ir as ir

from lstm_ort.ops.identity import is_fused
from lstm_ort.rewriter import opset_nodes
from lstm_ort.rewriter.cell_pattern import Cell, attr, insert_cell_node, match_cell, op, split_x_h
from lstm_ort.rewriter.graph_utils import axes_of, move_value
from lstm_ort.rewriter.rule import OK, CheckResult, Rule


def _one_step_y(x: ir.Value) -> ir.Value | None:
    """For x = Squeeze(Y_h, 0) of a one-layer, one-direction FusedLSTM over one time step: that
    node's Y, whose only step is the same h."""
    squeeze = op(x, "Squeeze")
    if squeeze is None or not is_fused(squeeze.inputs[0].producer()):
        return None
    fused = squeeze.inputs[0].producer()
    one_step = op(fused.inputs[0], "Unsqueeze")  # this rule's X: Unsqueeze(x, 0) of a [B, I] x
    if (squeeze.inputs[0] is not fused.outputs[1] or axes_of(squeeze) != [0] or one_step is None
            or axes_of(one_step) != [0] or one_step.inputs[0].shape is None or len(one_step.inputs[0].shape) != 2
            or attr(fused, "num_layers", 1) != 1 or attr(fused, "direction", "forward") != "forward"
            or attr(fused, "layout", 0) != 0):
        return None
    return fused.outputs[0]


def _pick_x(operands: list[ir.Value]) -> int:
    """Which of two H-wide operands of one step to read as x (either gives the step's outputs
    exactly, since one step computes x W + h R whichever is which): the h of a one-step node below
    (stacked streaming cells, so the layers join), else one that is not a graph input."""
    for k, value in enumerate(operands):
        if _one_step_y(value) is not None:
            return k
    inputs = [v.is_graph_input() for v in operands]
    return inputs.index(False) if inputs.count(False) == 1 else 0


class UnrolledCell(Rule):
    name = "unrolled_cell"

    def find(self, graph) -> list[Cell]:
        cells = [cell for cell in (match_cell(node) for node in graph) if cell is not None]
        states = {id(cell.c_new) for cell in cells}
        carried = {id(cell.c_prev) for cell in cells}
        return [cell for cell in cells if id(cell.c_prev) not in states and id(cell.c_new) not in carried]

    def nodes(self, cell: Cell) -> list[ir.Node]:
        return [cell.h_new.producer()]

    def describe(self, cell: Cell) -> str:
        return f"unrolled cell H={cell.hidden} gate order {cell.order}"

    def check(self, cell: Cell) -> CheckResult:
        reason = split_x_h(cell, pick_x=_pick_x)
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
        stacked = _one_step_y(cell.x)
        if stacked is not None:
            x = opset_nodes.squeeze(graph, anchor, stacked, [1])  # [1, 1, B, H] -> [1, B, H]
        else:
            x = opset_nodes.unsqueeze(graph, anchor, cell.x, [0])
        fused = insert_cell_node(graph, anchor, cell, x, cell.h_prev, cell.c_prev,
                                 (cell.h_new.producer().name or "cell") + "_fused")
        for value, out in ((cell.h_new, fused.outputs[1]), (cell.c_new, fused.outputs[2])):
            move_value(value, opset_nodes.squeeze(graph, anchor, out, [0]))
        graph.sort()
        return fused
