"""Is a model ragged-exact? Which input carries the sequences, and where are its time and batch axes?

Walks the main graph forward from each candidate input under both hypotheses (time axis 0 and
batch axis 1, or the reverse), following every value that depends on it and where its time and
batch axes sit. The hypothesis under which the input reaches a FusedLSTM's (or LSTM's) X in that
node's layout wins. Along the way, every op that could let padded time steps change the real
ones is flagged: ops that pick, reduce, slice, convolve or reshape along the time (or batch)
axis, ops not known to act per time step, reads of the padded shape, and recurrent nodes without
``sequence_lens`` whose results past-the-end padding would change (reverse directions, final
states). A model is ragged-exact when nothing is flagged and every output's batch axis is known.

The walk is the one axis analysis of graph/axes.py (a handler per op); what is read here is the
hypotheses, the recurrent nodes and the verdict. The batcher (serving) and the rewriter's
``--sequence-lens-input`` share it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import onnx

from lstm_ort.graph.axes import UNKNOWN, AxisWalk, Axes, recurrent_outputs, recurrent_x

SEQUENCE_LENS = "sequence_lens"  # the input name `optimize(sequence_lens_input=True)` adds


@dataclass
class RaggedLayout:
    """What the batcher needs to know about a model, and whether padding can change its results."""

    input: str  # the model input that carries the sequences
    time_axis: int
    batch_axis: int
    sequence_lens: str | None  # the int32 [batch] model input wired into the recurrent nodes, if any
    outputs: dict[str, Axes]  # model output -> its axes (rank None where unknown; absent if it ignores the input)
    recurrent_nodes: list[int] = field(default_factory=list)  # indices in graph.node of the LSTMs X reaches
    reasons: list[str] = field(default_factory=list)  # why padding could change results

    @property
    def exact(self) -> bool:
        return not self.reasons

    def describe(self) -> str:
        head = (f"input {self.input!r} (time axis {self.time_axis}, batch axis {self.batch_axis}), "
                f"sequence_lens: {self.sequence_lens or 'none'}")
        if self.exact:
            return head + "; ragged-exact"
        return head + "; not ragged-exact: " + "; ".join(self.reasons)


class NoSequenceInput(ValueError):
    """No model input reaches a FusedLSTM's X with a consistent time and batch axis."""


def analyze(model: onnx.ModelProto, input_name: str | None = None) -> RaggedLayout:
    graph = model.graph
    inits = {i.name for i in graph.initializer}
    inputs = {i.name: i for i in graph.input if i.name not in inits}
    if input_name is not None:
        if input_name not in inputs:
            raise NoSequenceInput(f"model has no input {input_name!r} (inputs: {', '.join(inputs) or 'none'})")
        candidates = [input_name]
    else:
        candidates = [n for n, vi in inputs.items() if _rank(vi) is None or _rank(vi) >= 2]
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 13)
    found = []
    for name in candidates:
        rank = _rank(inputs[name])
        for time, batch in ((0, 1), (1, 0)):
            walk = _Walk(graph, opset, name, Axes(rank if rank is not None else 3, time, batch))
            if walk.matched and not walk.mismatched:
                found.append(walk)
    if not found:
        hint = f" {input_name!r}" if input_name else ""
        raise NoSequenceInput(f"no model input{hint} reaches a FusedLSTM (or LSTM) input X with its time and batch "
                              "axes where the node's layout expects them")
    if len({w.input for w in found}) > 1:
        raise NoSequenceInput("more than one model input reaches a FusedLSTM: choose one with input_name "
                              f"({', '.join(sorted({w.input for w in found}))})")
    walk = found[0]
    return RaggedLayout(walk.input, walk.start.time, walk.start.batch, walk.sequence_lens,
                        walk.outputs(), walk.matched, walk.reasons)


def _rank(vi: onnx.ValueInfoProto) -> int | None:
    t = vi.type.tensor_type
    return len(t.shape.dim) if t.HasField("shape") else None


class _Walk(AxisWalk):
    """One hypothesis: `input` has axes `start`; follows every value computed from it."""

    def __init__(self, graph: onnx.GraphProto, opset: int, input_name: str, start: Axes):
        super().__init__(graph, opset, {input_name: start})
        self.input, self.start = input_name, start
        self.seq_len_inputs = {i.name for i in graph.input
                               if i.type.tensor_type.elem_type == onnx.TensorProto.INT32 and _rank(i) == 1}
        self.sequence_lens: str | None = None
        self.matched: list[int] = []
        self.mismatched = False
        used = {i for n in graph.node for i in n.input if i}
        self._consumers = used | {o.name for o in graph.output}
        self.walk(graph)

    def outputs(self) -> dict[str, Axes]:
        outs = {o.name: self.values[o.name] for o in self.graph.output if o.name in self.values}
        for name, axes in outs.items():
            if axes.batch is None and not any(name in r for r in self.reasons):
                self.reasons.append(f"output {name!r}: no batch axis found, so it cannot be split per sequence")
        return outs

    def recurrent(self, index: int, node: onnx.NodeProto, seq_lens_index: int) -> list[Axes]:
        x = self.values.get(node.input[0])
        layout = int(self.attr(node, "layout", 0))
        if x is None or any(i in self.values for i in node.input[1:seq_lens_index]):
            self.flag(node, "takes weights computed from the input")
            return [UNKNOWN] * len(node.output)
        if x != recurrent_x(layout):
            self.mismatched = True
            return [UNKNOWN] * len(node.output)
        self.matched.append(index)
        lens = node.input[seq_lens_index] if len(node.input) > seq_lens_index else ""
        direction = self.attr(node, "direction", "forward")
        states_used = any(o in self._consumers for o in node.output[1:] if o)
        if lens and lens in self.seq_len_inputs:
            if self.sequence_lens not in (None, lens):
                self.flag(node, f"reads sequence_lens {lens!r}, another node {self.sequence_lens!r}")
            self.sequence_lens = lens
        elif lens:
            self.flag(node, f"takes sequence_lens {lens!r}, computed in the graph rather than a model input")
        elif direction != "forward" or states_used:
            what = "its reverse direction" if direction != "forward" else "its final states"
            self.flag(node, f"has no sequence_lens: padded steps change {what} (optimize with sequence_lens_input)")
        return recurrent_outputs(layout, len(node.output))
