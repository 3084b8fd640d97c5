"""Rule: a chain of unrolled LSTM cells over time -> one ``lstm_ort.FusedLSTM`` over the sequence.

Pattern: cells (rewriter/cell_pattern.py) where each one's c' is the next one's c and its h' the
next one's h, as torch's ``nn.LSTMCell`` called in a Python loop and Keras' ``LSTM(unroll=True)``
export. Step k reads x_k = one time step of one sequence S: Gather(S, t_k) on axis 0 or 1 (torch's
``x[:, t]``), or Squeeze of a Split or Slice of S into single steps (tf2onnx's unstack); S may be
read through a flip (a Slice with step -1, torch's ``flip``) or through Transposes that cancel.
The first cell may lack the recurrent product (its h was zeros, folded away with the bias).

Condition, else the chain is left as it is with the reason (never cut into one-step nodes):
every step has the same weights, bias, gate order, activation and peepholes; the steps read every
time step of S once, in order or in reverse order (S's length is fixed and equals the chain's);
each step's h' is used only by the next step, the output sequence (Concat of Unsqueeze(h'_k) in
time order or reversed) and as the input of another chain's steps (a stacked layer); each step's
c' only by the next step; no value inside a cell is used outside it. The last step's h' and c'
may be used anywhere (they are Y_h and Y_c).
Replacement: FusedLSTM(S, direction forward or reverse, layout from S's time axis) with the
first cell's h and c as initial states unless proven zeros; the output sequence reads Squeeze(Y)
(transposed or reversed as the Concat had it); a stacked layer's steps read Gather(Y, t_k), which
makes them a chain over that sequence in turn; h'/c' of the last step read Squeeze(Y_h / Y_c).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import onnx_ir as ir

from lstm_ort.rewriter import opset_nodes, shape_expr
from lstm_ort.rewriter.cell_pattern import (Cell, Part, attr, insert_cell_node, match_cell,
                                           op, operands, split_x_h)
from lstm_ort.rewriter.graph_utils import axes_of, const_array, move_value, slice_bounds
from lstm_ort.rewriter.rule import OK, CheckResult, Rule

_BIAS_TOLERANCE = 1e-6  # relative: a first cell's bias folded with its zero h's product


@dataclass
class Chain:
    cells: list[Cell]
    x_readers: set[ir.Node] = field(default_factory=set)  # nodes by which any chain's cells read their x
    reason: str = ""  # found while matching
    # Filled by check():
    sequence: ir.Value | None = None
    layout: int = 0
    times: list[int] = field(default_factory=list)  # the time step each cell reads
    direction: str = "forward"
    stack: ir.Node | None = None  # the Concat that stacks the steps' h' into the output sequence
    stack_times: list[int] = field(default_factory=list)  # its inputs' time steps
    weights: Cell | None = None  # a cell with both products (the weights of every step)

    def stack_inputs(self) -> set[ir.Node]:
        return {v.producer() for v in self.stack.inputs} if self.stack is not None else set()


def _cell_nodes(cell: Cell) -> set[ir.Node]:
    """The nodes computing h' and c' from x, h and c (constants aside)."""
    stops = {id(v) for v in (cell.x, cell.h_prev, cell.c_prev) if v is not None}
    found, todo = set(), [cell.h_new.producer(), cell.c_new.producer()]
    while todo:
        node = todo.pop()
        if node is None or node in found or node.op_type == "Constant":
            continue
        found.add(node)
        todo += [v.producer() for v in node.inputs if v is not None and id(v) not in stops]
    return found


def _escapes(cell: Cell, nodes: set[ir.Node]) -> str:
    for node in nodes:
        for value in node.outputs:
            if value is cell.h_new or value is cell.c_new:
                continue
            if value.is_graph_output() or any(use.node not in nodes for use in value.uses()):
                return f"{value.name or node.op_type} inside a cell is used outside it"
    return ""


def _strip_cancelling_transposes(value: ir.Value) -> ir.Value:
    """Transpose(Transpose(v, p), q) with q after p the identity (Keras' stacked layers) -> v."""
    while True:
        outer = op(value, "Transpose")
        inner = op(outer.inputs[0], "Transpose") if outer is not None else None
        if inner is None:
            return value
        p, q = inner.attributes.get("perm"), outer.attributes.get("perm")
        if p is None or q is None or [list(p.value)[k] for k in q.value] != list(range(len(p.value))):
            return value
        value = inner.inputs[0]


def _time_step(x: ir.Value) -> tuple[ir.Value, int, int] | None:
    """(S, axis, index) when x is one step of S along `axis`: Gather(S, index), or Squeeze of a
    one-step Slice or of one output of a Split into single steps."""
    node = x.producer()
    if node is None or node.domain not in ("", "ai.onnx"):
        return None
    if node.op_type == "Gather":
        index = const_array(node.inputs[1])
        if index is None or index.ndim != 0:
            return None
        return node.inputs[0], int(attr(node, "axis", 0)), int(index)
    if node.op_type != "Squeeze" or axes_of(node) is None or len(axes_of(node)) != 1:
        return None
    axis = axes_of(node)[0]
    cut = node.inputs[0].producer()
    if cut is None:
        return None
    if cut.op_type == "Slice":
        bounds = slice_bounds(cut)
        if bounds is None or bounds[2] != [axis] or bounds[3] not in (None, [1]) or len(bounds[0]) != 1:
            return None
        start, end = bounds[0][0], bounds[1][0]
        one_step = end == start + 1 and (start >= 0 or end < 0) or start == -1 and end > 2 ** 62  # x[k:k+1], x[-1:]
        return (cut.inputs[0], axis, start) if one_step else None
    if cut.op_type == "Split" and attr(cut, "axis", 0) == axis:
        sizes = const_array(cut.inputs[1]) if len(cut.inputs) > 1 and cut.inputs[1] is not None else None
        if sizes is None and "split" in cut.attributes:
            sizes = np.asarray(attr(cut, "split"))
        if sizes is not None and set(np.asarray(sizes).reshape(-1).tolist()) != {1}:
            return None
        return cut.inputs[0], axis, list(cut.outputs).index(node.inputs[0])
    return None


def _flipped(value: ir.Value, axis: int, length: int) -> ir.Value | None:
    """v when value is v reversed along `axis` (a Slice with step -1 over the whole axis)."""
    node = op(value, "Slice")
    bounds = slice_bounds(node) if node is not None else None
    if bounds is None:
        return None
    starts, ends, axes, steps = bounds
    if len(starts) != 1 or axes is None or [a % 3 for a in axes] != [axis] or steps != [-1]:
        return None
    start, end = starts[0], ends[0]
    start = min(start + length if start < 0 else start, length - 1)
    end = end + length if end < 0 else end
    return node.inputs[0] if start == length - 1 and end < 0 else None


def _full_reverse(node: ir.Node, length: int) -> ir.Value | None:
    """v when `node` = ReverseSequence(v, lengths) with every length the whole time axis (tf2onnx's
    ReverseV2: lengths Expand(Shape(.)[time], [batch]))."""
    if node.op_type != "ReverseSequence" or len(node.inputs) != 2:
        return None
    expand = op(node.inputs[1], "Expand")
    source = expand.inputs[0] if expand is not None else node.inputs[1]
    found = shape_expr.elements(source)
    time_axis = attr(node, "time_axis", 0)
    whole = shape_expr.dim(node.inputs[0], time_axis)
    return node.inputs[0] if found is not None and set(found) == {whole} and whole == shape_expr.Product(length) else None


def _flip_reader(value: ir.Value, axis: int, length: int) -> ir.Value | None:
    """The output of a flip along `axis` that is all `value` is for (through Transposes that cancel
    on the way: tf2onnx's ReverseV2), if so."""
    def reader(v: ir.Value) -> ir.Node | None:  # the one node reading v's elements (a Shape reads none)
        uses = [u.node for u in v.uses() if u.node.op_type != "Shape"]
        return uses[0] if len(uses) == 1 and not v.is_graph_output() else None

    while (node := reader(value)) is not None:
        out = node.outputs[0]
        if _flipped(out, axis, length) is value or _full_reverse(node, length) is value and \
                attr(node, "time_axis", 0) == axis:
            return out
        after = reader(out) if node.op_type == "Transpose" else None
        if after is None or after.op_type != "Transpose" or _strip_cancelling_transposes(after.outputs[0]) is not value:
            return None
        value = after.outputs[0]
    return None


def _time_order(chain: Chain) -> str:
    """Fills sequence, layout, times, direction from the steps' x; a reason when they are not one
    sequence read whole, forward or backward."""
    steps = [_time_step(cell.x) for cell in chain.cells]
    if None in steps:
        return "a step's input is not one time step of a sequence (Gather, or Squeeze of a Split or Slice)"
    sources = {id(s) for s, _, _ in steps}
    axes = {a for _, a, _ in steps}
    if len(sources) != 1 or len(axes) != 1:
        return "the steps read different sequences"
    sequence, axis = steps[0][0], steps[0][1]
    shape = sequence.shape
    if shape is None or len(shape) != 3:
        return "the sequence's rank is not known to be 3"
    axis %= 3
    length = shape[axis]
    if axis not in (0, 1):
        return f"the steps cut the sequence along axis {axis}, not its time axis 0 or 1"
    if not isinstance(length, int):
        return f"the sequence's length is not fixed (the chain has {len(steps)} steps)"
    if length != len(steps):
        return f"the chain has {len(steps)} steps, the sequence {length}"
    times = [t + length if t < 0 else t for _, _, t in steps]
    source = _flipped(sequence, axis, length)
    if source is not None:
        sequence, times = source, [length - 1 - t for t in times]
    if times == list(range(length)):
        chain.direction = "forward"
    elif times == list(range(length - 1, -1, -1)):
        chain.direction = "reverse"
    else:
        return "the steps read the time steps in an order that is neither forward nor reverse"
    chain.sequence, chain.layout, chain.times = _strip_cancelling_transposes(sequence), axis, times
    return ""


def _same(a: Part | None, b: Part | None) -> bool:
    if a is None or b is None:
        return a is b
    if a.key == b.key:
        return True
    return (a.hi - a.lo, a.term.columns) == (b.hi - b.lo, b.term.columns) and np.array_equal(a.array(), b.array())


def _same_cell_math(cell: Cell, model: Cell) -> str:
    if cell.hidden != model.hidden or cell.roles != model.roles:
        return "the steps differ in hidden size or gate order"
    if not cell.activation.same_as(model.activation):
        return "the steps differ in their gates' activation"
    if cell.peepholes.keys() != model.peepholes.keys() or any(
            not np.array_equal(cell.peepholes[k], model.peepholes[k]) for k in cell.peepholes):
        return "the steps differ in their peepholes"
    scale = max(1.0, float(np.abs(model.bias).max(initial=0)))
    if not np.allclose(cell.bias, model.bias, rtol=0, atol=_BIAS_TOLERANCE * scale):
        return "the steps differ in their bias"
    if not _same(cell.x_part, model.x_part) or (cell.h_part is not None and not _same(cell.h_part, model.h_part)):
        return "the steps differ in their weights"
    return ""


def _head_operands(head: Cell, model: Cell) -> str:
    """Tells the first cell's x from its h by the next cell's weights; a first cell with one
    product has no recurrent one (its h was zeros, folded into the bias)."""
    if len(head.terms) == 1 and op(head.terms[0].source, "Concat") is None:
        term = head.terms[0]
        head.x, head.x_part = term.source, Part(term, 0, term.rows)
        return ""
    parts, reason = operands(head)
    if reason:
        return reason
    for x_k, h_k in ((0, 1), (1, 0)):
        if _same(parts[x_k][1], model.x_part) and _same(parts[h_k][1], model.h_part):
            (head.x, head.x_part), (head.h_prev, head.h_part) = parts[x_k], parts[h_k]
            return ""
    return "the steps differ in their weights"


def _reader_nodes(cell: Cell) -> set[ir.Node]:
    """The nodes by which a cell reads its x: its product's node, or the Concat of x and h."""
    term = cell.x_part.term
    concat = op(term.source, "Concat")
    return {concat if concat is not None and term.source is not cell.x else term.node}


def _find_stack(chain: Chain) -> str:
    """The Concat of Unsqueeze(h'_k) along the time axis that the steps' outputs form, if any."""
    unsqueezes = {}
    for k, cell in enumerate(chain.cells):
        for use in cell.h_new.uses():
            if use.node.op_type == "Unsqueeze" and use.node.domain in ("", "ai.onnx"):
                unsqueezes[use.node] = k
    concats = {u.node for node in unsqueezes for u in node.outputs[0].uses() if u.node.op_type == "Concat"}
    if not concats:
        return ""
    if len(concats) > 1:
        return "the steps' outputs are stacked more than once"
    concat = concats.pop()
    axis = attr(concat, "axis", 0)
    try:
        steps = [unsqueezes[v.producer()] for v in concat.inputs]
    except KeyError:
        return "the output sequence stacks more than the chain's steps"
    if sorted(steps) != list(range(len(chain.cells))) or any(axes_of(v.producer()) not in ([axis], [axis - 3])
                                                              for v in concat.inputs):
        return "the output sequence does not stack every step once along its new axis"
    if any(len(list(v.uses())) != 1 or v.is_graph_output() for v in concat.inputs):
        return "an unsqueezed step output is used besides the output sequence"
    if axis % 3 not in (0, 1):
        return f"the output sequence stacks the steps along axis {axis}"
    chain.stack, chain.stack_times = concat, [chain.times[k] for k in steps]
    length = len(chain.cells)
    if chain.stack_times not in (list(range(length)), list(range(length - 1, -1, -1))):
        return "the output sequence holds the steps in an order other than time's or its reverse"
    return ""


def _uses(chain: Chain, nodes: list[set[ir.Node]]) -> str:
    cells = chain.cells
    for k, cell in enumerate(cells[:-1]):
        readers = nodes[k + 1] | chain.x_readers | chain.stack_inputs()
        if cell.h_new.is_graph_output() or cell.c_new.is_graph_output():
            return f"step {k}'s h or c is a graph output"
        stray = [u.node for u in cell.h_new.uses() if u.node not in readers]
        if stray:
            return f"step {k}'s h is used by {stray[0].op_type} besides the next step and the output sequence"
        if any(u.node not in nodes[k] and u.node not in nodes[k + 1] for u in cell.c_new.uses()):
            return f"step {k}'s c is used besides the next step"
    return ""


def _chains(cells: list[Cell]) -> list[list[Cell]]:
    """Cells linked by c (one's c' is the next one's c), first to last, two or more long."""
    by_c_prev: dict[int, list[Cell]] = {}
    for cell in cells:
        by_c_prev.setdefault(id(cell.c_prev), []).append(cell)
    produced = {id(cell.c_new) for cell in cells}
    chains = []
    for head in cells:
        if id(head.c_prev) in produced:
            continue
        chain = [head]
        while len(by_c_prev.get(id(chain[-1].c_new), [])) == 1:
            chain.append(by_c_prev[id(chain[-1].c_new)][0])
        if len(chain) > 1:
            chains.append(chain)
    return chains


class CellChain(Rule):
    name = "cell_chain"

    def find(self, graph) -> list[Chain]:
        cells = [cell for cell in (match_cell(node) for node in graph) if cell is not None]
        chains = [Chain(c) for c in _chains(cells)]
        for chain in chains:
            chain.reason = self._operands(chain)
        readers = set()
        for chain in chains:
            if not chain.reason:
                for cell in chain.cells:
                    readers |= _reader_nodes(cell)
        for chain in chains:
            chain.x_readers = readers
        return chains

    @staticmethod
    def _operands(chain: Chain) -> str:
        cells = chain.cells
        for k in range(1, len(cells)):
            reason = split_x_h(cells[k], frozenset([cells[k - 1].h_new]))
            if reason:
                return f"step {k}: {reason}"
            if cells[k].h_prev is not cells[k - 1].h_new:
                return f"step {k}'s recurrent input is not step {k - 1}'s h"
        return _head_operands(cells[0], cells[1])

    def nodes(self, chain: Chain) -> list[ir.Node]:
        return [chain.cells[0].h_new.producer()]

    def describe(self, chain: Chain) -> str:
        cell = chain.cells[0]
        return f"chain of {len(chain.cells)} unrolled cells H={cell.hidden} gate order {cell.order}"

    def check(self, chain: Chain) -> CheckResult:
        # Read the operands again: a chain rewritten before this one (the layer below) changed
        # what these cells read as x.
        chain.reason = chain.reason or self._operands(chain)
        if chain.reason:
            return CheckResult.fail(chain.reason)
        model = chain.cells[1]
        for cell in chain.cells:
            reason = _same_cell_math(cell, model)
            if reason:
                return CheckResult.fail(reason)
        if model.x.dtype not in (ir.DataType.FLOAT, ir.DataType.FLOAT16, None):
            return CheckResult.fail(f"element type {model.x.dtype} is not float32/float16")
        nodes = [_cell_nodes(cell) for cell in chain.cells]
        for cell, found in zip(chain.cells, nodes):
            reason = _escapes(cell, found)
            if reason:
                return CheckResult.fail(reason)
        reason = _time_order(chain) or _find_stack(chain) or _uses(chain, nodes)
        if reason:
            return CheckResult.fail(reason)
        chain.weights = model
        return OK

    def rewrite(self, graph, chain: Chain) -> ir.Node:
        head, last = chain.cells[0], chain.cells[-1]
        anchor = head.h_new.producer()
        fused = insert_cell_node(graph, anchor, chain.weights, chain.sequence, head.h_prev, head.c_prev,
                                 (anchor.name or "cell") + "_chain", direction=chain.direction,
                                 layout=chain.layout)
        # Y: [T, 1, B, H] (layout 0) or [B, T, 1, H]; the sequence of h' in the node's layout:
        sequence = opset_nodes.squeeze(graph, anchor, fused.outputs[0], [1 + chain.layout])
        # Its shape, which a stacked layer's chain checks: S's with H for I.
        sequence.shape = ir.Shape([*list(chain.sequence.shape)[:2], chain.weights.hidden])
        sequence.type = chain.sequence.type
        if chain.stack is not None:
            stacked, axis = sequence, attr(chain.stack, "axis", 0) % 3
            if axis != chain.layout:
                stacked = opset_nodes.transpose(graph, anchor, stacked, [1, 0, 2])
            # The steps stacked in reverse time order, unless the stack's only reader flips it back
            # (torch's flip of a reverse pass's outputs, tf2onnx's ReverseV2 of Keras' backward layer).
            target, reverse = chain.stack.outputs[0], chain.stack_times[0] != 0
            flip = _flip_reader(target, axis, len(chain.cells))
            if flip is not None:
                target, reverse = flip, not reverse
            if reverse:
                stacked = opset_nodes.gather(graph, anchor, stacked, list(range(len(chain.cells) - 1, -1, -1)), axis)
            move_value(target, stacked)
        own = set().union(*(_cell_nodes(cell) for cell in chain.cells), chain.stack_inputs(), {chain.stack})
        # A stacked layer's steps read their step of the sequence (the last one too: a chain
        # over that sequence in turn); other uses of the last h' and c' read Y_h and Y_c.
        for cell, t in zip(chain.cells, chain.times):
            foreign = [u for u in cell.h_new.uses() if u.node not in own and (cell is not last or u.node in chain.x_readers)]
            if foreign:
                step = opset_nodes.gather(graph, anchor, sequence, t, chain.layout)
                for use in foreign:
                    use.node.replace_input_with(use.idx, step)
        state_axis = chain.layout  # Y_h: [1, B, H] (layout 0) or [B, 1, H]
        for value, out in ((last.h_new, fused.outputs[1]), (last.c_new, fused.outputs[2])):
            move_value(value, opset_nodes.squeeze(graph, anchor, out, [state_axis]))
        graph.sort()
        return fused
