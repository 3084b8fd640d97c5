"""Rule: a forward and a reverse one-layer FusedLSTM over the same sequence -> one bidirectional
FusedLSTM (cell chains over x and its flip, a pair of Scans, torch's two ``LSTMCell`` loops of a
bidirectional layer).

Pattern: FusedLSTM F (direction forward) and R (reverse), one layer each, reading the same X (one
value, or the same op on it twice, as two Transposes of one input).
Condition: the same hidden size, layout, clip, input_forget and activations; the same
sequence_lens (or none); constant W, B and P; initial states on both or on neither; neither reads
the other's outputs (one node cannot run both then).
Replacement: one node, W/B/P joined forward block first, states joined by a Concat on the state
axis. F's outputs read the direction-0 Slice of the new outputs, R's the direction-1 Slice. Where
the two output sequences (Squeeze of the direction axis) meet only in a Concat on the feature axis,
forward first (a bidirectional layer's output as torch and Keras build it), that Concat reads Y
with the directions side by side instead (Reshape [0, 0, -1], after a Transpose in layout 0):
the glue stack_lstm joins to a next layer.
"""

from __future__ import annotations

from dataclasses import dataclass

import onnx_ir as ir

from lstm_ort.ops.identity import ELEMENT_TYPES, is_fused
from lstm_ort.rewriter import opset_nodes
from lstm_ort.rewriter.cell_pattern import attr
from lstm_ort.rewriter.fused_node import insert_fused_node
from lstm_ort.rewriter.graph_utils import axes_of, const_tensor, move_value, same_tensor
from lstm_ort.rewriter.lazy_weights import merged
from lstm_ort.rewriter.rule import OK, CheckResult, Rule

_SAME = ("hidden_size", "layout", "clip", "input_forget", "activations", "activation_alpha", "activation_beta")
_FACTORED = ("rank_input", "rank_recurrent")


@dataclass
class Pair:
    forward: ir.Node
    reverse: ir.Node


def _input(node: ir.Node, index: int) -> ir.Value | None:
    return node.inputs[index] if index < len(node.inputs) else None


def _one_layer(node: ir.Node, direction: str) -> bool:
    return (is_fused(node) and attr(node, "direction", "forward") == direction and attr(node, "num_layers", 1) == 1
            and not any(name in node.attributes for name in _FACTORED))


def _depends_on(value: ir.Value | None, node: ir.Node) -> bool:
    """Whether `value` is computed from an output of `node`."""
    seen, todo = set(), [value]
    while todo:
        v = todo.pop()
        producer = v.producer() if v is not None else None
        if producer is None or producer in seen:
            continue
        if producer is node:
            return True
        seen.add(producer)
        todo += list(producer.inputs)
    return False


def _direction_sequence(y: ir.Value, axis: int) -> ir.Node | None:
    """The one Squeeze of the direction axis that is Y's only use (and its output's only place)."""
    uses = list(y.uses())
    if len(uses) != 1 or y.is_graph_output():
        return None
    squeeze = uses[0].node
    if squeeze.op_type != "Squeeze" or axes_of(squeeze) not in ([axis], [axis - 4]):
        return None
    return squeeze


def _side_by_side(pair: Pair, axis: int) -> ir.Node | None:
    """The Concat [forward sequence, reverse sequence] on the feature axis, if that is all the two
    sequences are for."""
    ends = [_direction_sequence(n.outputs[0], axis) for n in (pair.forward, pair.reverse)]
    if None in ends:
        return None
    uses = [list(s.outputs[0].uses()) for s in ends]
    if any(len(u) != 1 for u in uses) or any(s.outputs[0].is_graph_output() for s in ends):
        return None
    concat = uses[0][0].node
    if (concat.op_type != "Concat" or list(concat.inputs) != [s.outputs[0] for s in ends]
            or attr(concat, "axis", 0) not in (2, -1)):
        return None
    return concat


class BidirectionalPair(Rule):
    name = "bidirectional_pair"

    def find(self, graph) -> list[Pair]:
        pairs, taken = [], set()
        reverse = [node for node in graph if _one_layer(node, "reverse")]
        for node in graph:
            if not _one_layer(node, "forward"):
                continue
            other = next((r for r in reverse if r not in taken and same_tensor(r.inputs[0], node.inputs[0])), None)
            if other is not None:
                pairs.append(Pair(node, other))
                taken.add(other)
        return pairs

    def nodes(self, pair: Pair) -> list[ir.Node]:
        return [pair.forward, pair.reverse]

    def describe(self, pair: Pair) -> str:
        return f"forward and reverse FusedLSTM H={attr(pair.forward, 'hidden_size')} over one sequence"

    def check(self, pair: Pair) -> CheckResult:
        f, r = pair.forward, pair.reverse
        differ = [name for name in _SAME if attr(f, name) != attr(r, name)]
        if differ:
            return CheckResult.fail(f"the directions differ in {', '.join(differ)}")
        if _input(f, 3) is not _input(r, 3):
            return CheckResult.fail("the directions read different sequence_lens")
        for index, name in ((4, "initial_h"), (5, "initial_c")):
            if (_input(f, index) is None) != (_input(r, index) is None):
                return CheckResult.fail(f"one direction has an {name}, the other none (its zeros have no tensor)")
        for node in (f, r):
            for index, name in ((1, "W"), (2, "B"), (6, "P")):
                value = _input(node, index)
                if value is not None and const_tensor(value) is None:
                    return CheckResult.fail(f"{name} of {node.name} is not a constant")
        if len({const_tensor(n.inputs[1]).dtype for n in (f, r)}) != 1:
            return CheckResult.fail("the directions' weights differ in element type")
        if any(_depends_on(v, r) for v in f.inputs) or any(_depends_on(v, f) for v in r.inputs):
            return CheckResult.fail("one direction reads the other's outputs")
        return OK

    def rewrite(self, graph, pair: Pair) -> ir.Node:
        f, r = pair.forward, pair.reverse
        layout, H = attr(f, "layout", 0), attr(f, "hidden_size")
        state_axis, direction_axis = (0, 1) if layout == 0 else (1, 2)
        dtype = ELEMENT_TYPES[const_tensor(f.inputs[1]).dtype]

        def joined(index: int, width: int):
            present = [_input(n, index) is not None for n in (f, r)]
            if not any(present):
                return None
            return merged([const_tensor(n.inputs[index]) if has else width for n, has in zip((f, r), present)], dtype)

        def state(index: int):
            if _input(f, index) is None:
                return None
            return opset_nodes.node(graph, f, "Concat", [f.inputs[index], r.inputs[index]], {"axis": state_axis},
                                    name=f"{f.name}_bidirectional_state")

        attributes = {k: v for k, v in f.attributes.items() if k not in ("direction", "activations", "activation_alpha",
                                                                          "activation_beta")}
        attributes["direction"] = ir.AttrString("direction", "bidirectional")
        if "activations" in f.attributes:
            attributes["activations"] = ir.AttrString("activations", ",".join([attr(f, "activations")] * 2))
            for name in ("activation_alpha", "activation_beta"):
                if name in f.attributes:
                    attributes[name] = ir.AttrFloat32s(name, list(attr(f, name)) * 2)
        fused = insert_fused_node(graph, f, name=(f.name or "lstm") + "_bidirectional", attributes=attributes,
                                  x=f.inputs[0], w=joined(1, 0), b=joined(2, 4 * H), p=joined(6, 3 * H),
                                  seq_lens=_input(f, 3), initial_h=state(4), initial_c=state(5))
        side_by_side = _side_by_side(pair, direction_axis)
        if side_by_side is not None:
            y = fused.outputs[0]
            if layout == 0:  # [T, 2, B, H] -> [T, B, 2, H]
                y = opset_nodes.transpose(graph, fused, y, [0, 2, 1, 3], after=True)
            move_value(side_by_side.outputs[0], opset_nodes.reshape(graph, y.producer(), y, [0, 0, -1], after=True))
        for d, node in enumerate((f, r)):
            for k, axis in ((0, direction_axis), (1, state_axis), (2, state_axis)):
                value = node.outputs[k]
                if value.uses() or value.is_graph_output():
                    move_value(value, opset_nodes.slice_axis(graph, fused, fused.outputs[k], d, d + 1, axis,
                                                             after=True))
        graph.remove([f, r], safe=True)
        graph.sort()
        return fused
