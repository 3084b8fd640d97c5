"""Kinds of steps: feeds of the same shapes (and the same values of the inputs without a batch
axis) are one kind, analysed once for where they carry the batch (lstm_ort.graph.batch_axes), so
that steps of one kind can share a call (docs/streams.md, *Where the batch axis is*)."""

from __future__ import annotations

import itertools
import threading
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import onnx

from lstm_ort.graph.batch_axes import BatchLayout, batch_layout
from lstm_ort.graph.trace import TraceFailed
from lstm_ort.ops.identity import INT8_WEIGHT_TYPE, is_fused
from lstm_ort.ops.spec import attribute
from lstm_ort.runtime.messages import clean_message
from lstm_ort.runtime.model_io import iter_graphs
from lstm_ort.runtime.nodes import set_attribute
from lstm_ort.serving.streams.errors import StreamError
from lstm_ort.serving.streams.feeds import StepInputs

_MAX_STACKED_HYPOTHESES = 16


@dataclass(frozen=True)
class Kind:
    signature: tuple  # each step input's shape, in the model's order
    layout: BatchLayout
    shared: dict[str, np.ndarray]  # the inputs without a batch axis and the values that chose this kind
    example: dict[str, np.ndarray] = field(default_factory=dict, compare=False)  # the step that found it

    def values(self, feeds: dict[str, np.ndarray]) -> tuple[bytes, ...]:
        """The bytes of ``feeds``' shared inputs: with the signature, which group of this kind."""
        return tuple(np.ascontiguousarray(feeds[n]).tobytes() for n in self.shared)

    def stacks(self, name: str) -> int | None:
        """The axis of ``name`` that holds the streams' rows (None: one value for all), as the
        analysis found it, also where something else keeps this kind from batching."""
        return self.layout.inputs.get(name)


def int8_nodes(model: onnx.ModelProto) -> list[onnx.NodeProto]:
    """The FusedLSTM nodes with int8 weights, subgraphs included."""
    int8 = {t.name for t in model.graph.initializer if t.data_type == INT8_WEIGHT_TYPE}
    return [n for g in iter_graphs(model) for n in g.node if is_fused(n) and len(n.input) > 1 and n.input[1] in int8]


def with_row_scales(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` (in place) with its int8 FusedLSTM nodes quantizing each batch row with its own
    scales (attribute int8_scales="row", docs/ops.md): a stream batched with others then gets, bit
    for bit, what it gets alone, where one scale per call would let a loud stream move a quiet
    one's result."""
    for node in int8_nodes(model):
        set_attribute(node, "int8_scales", "row")
    return model


def per_call_quantized(model: onnx.ModelProto) -> str:
    """Why steps of this model must run one stream per call even where the batch axes allow more:
    a FusedLSTM with int8 weights and one scale per call (int8_scales "call", the default), so
    streams batched together would change each other's results; '' where none does."""
    for node in int8_nodes(model):
        if attribute(node, "int8_scales", "call") != "row":
            return (f"FusedLSTM node {node.name or node.output[0]!r} quantizes its input and h with one scale per call "
                    "(int8 weights, int8_scales 'call'): streams batched together would change each other's results")
    return ""


class Kinds:
    """``run_alone(feeds)``: runs one stream's full feeds through onnxruntime (raising its error),
    for feeds the analysis cannot run."""

    def __init__(self, model: onnx.ModelProto, inputs: StepInputs, run_alone: Callable[[dict], object]):
        self.model, self.inputs, self._run_alone = model, inputs, run_alone
        self._kinds: dict[tuple, list[Kind]] = {}
        self._per_call = per_call_quantized(model)
        self._lock = threading.Lock()
        self.fallback_reasons: list[str] = []

    @property
    def batched(self) -> bool | None:
        with self._lock:
            kinds = [k for ks in self._kinds.values() for k in ks]
        return None if not kinds else all(k.layout.batched for k in kinds)

    def signature(self, feeds: dict[str, np.ndarray]) -> tuple:
        return tuple(feeds[n].shape for n in self.inputs.needed)

    def of(self, feeds: dict[str, np.ndarray], state_shapes: dict) -> Kind:
        """The kind of one stream's checked feeds, analysed the first time (raising StreamError
        for feeds that cannot be a step)."""
        signature = self.signature(feeds)
        kind = self._known(feeds, signature)
        if kind is None:
            with self._lock:
                kind = self._known(feeds, signature)
                if kind is None:
                    kind = self._analyze(feeds, signature, state_shapes)
                    self._note(kind)
                    self._kinds.setdefault(signature, []).append(kind)
        return kind

    def only(self, signature: tuple) -> bool:
        """Whether feeds of these shapes are one kind whatever their values."""
        return len(self._kinds.get(signature, ())) == 1

    def _known(self, feeds, signature) -> Kind | None:
        for kind in self._kinds.get(signature, ()):
            if all(np.array_equal(feeds[n], v) for n, v in kind.shared.items()):
                return kind
        return None

    def stacked(self, feeds: dict[str, np.ndarray], n: int, state_shapes: dict) -> Kind:
        """The kind of which ``feeds`` stack ``n`` streams' rows (step_batch). A known kind they
        fit; else each input's batch axis found by analysing one stream's rows under each
        hypothesis of where the rows are (an axis of size n), keeping the one the analysis
        confirms; never a guess from sizes that merely coincide."""
        with self._lock:
            known = [k for ks in self._kinds.values() for k in ks if self._fits(k, feeds, n)]
        if known:
            return known[0]
        if n == 1:
            return self.of(feeds, state_shapes)
        choices = []
        for name in self.inputs.needed:
            v = feeds[name]
            axes = [k for k, d in enumerate(v.shape) if d == n]
            choices.append(axes + [None])  # None: shared by the streams (fed once)
        confirmed = []
        for hypothesis in itertools.islice(itertools.product(*choices), _MAX_STACKED_HYPOTHESES):
            if all(a is None for a in hypothesis):
                continue
            one = {name: feeds[name] if a is None else np.take(feeds[name], [0], axis=a)
                   for name, a in zip(self.inputs.needed, hypothesis)}
            try:
                one = self.inputs.check(one)
                kind = self._analyze(one, self.signature(one), state_shapes, quiet=True)
            except StreamError:
                continue
            if all(kind.stacks(name) == a for name, a in zip(self.inputs.needed, hypothesis)):
                confirmed.append((hypothesis, one))
        if not confirmed:
            raise StreamError("step_batch: cannot tell the batch axes of these stacked feeds (step one stream's feeds "
                              "first, or give each input its rows on its batch axis)")
        if len({h for h, _ in confirmed}) > 1:
            raise StreamError(f"step_batch: the stacked feeds fit more than one layout of the batch "
                              f"({'; '.join(str(dict(zip(self.inputs.needed, h))) for h, _ in confirmed)}): step one "
                              "stream's feeds first (or call layout(feeds)) so the kind is known")
        return self.of(confirmed[0][1], state_shapes)

    def _fits(self, kind: Kind, feeds: dict, n: int) -> bool:
        for name, shape in zip(self.inputs.needed, kind.signature):
            v = feeds[name]
            axis = kind.stacks(name)
            if axis is None:
                if v.shape != shape or (name in kind.shared and not np.array_equal(v, kind.shared[name])):
                    return False
            elif v.shape != shape[:axis] + (n,) + shape[axis + 1:]:
                return False
        return True

    def _analyze(self, feeds: dict[str, np.ndarray], signature: tuple, state_shapes: dict, quiet: bool = False) -> Kind:
        self._check_batch_size(feeds)
        full = dict(feeds)
        for name, shape in state_shapes.items():
            if shape is None:
                raise StreamError(f"the shape of carried input {name!r} is not known yet: open a stream with "
                                  "initial=... first")
            full[name] = np.zeros(shape, self.inputs.types[name][0])
        try:
            layout = batch_layout(self.model, full, carried=set(self.inputs.carry.values()))
        except TraceFailed as e:
            try:  # a bad feed, or a model the reference cannot run? onnxruntime says
                self._run_alone(full)
            except Exception as run_error:  # noqa: BLE001 - onnxruntime's own message is the answer
                raise StreamError(f"these feeds fail when the model runs them alone: {clean_message(run_error)}") \
                    from None
            layout = BatchLayout({n: None for n in full}, {}, reasons=[f"the batch analysis could not run the "
                                                                       f"model: {e}"])
        if layout.batched:
            layout.reasons += self._check_carried(layout)
        if layout.batched and self._per_call:
            layout.reasons.append(self._per_call)
        # One stream per call shares nothing: any values of these shapes take that path.
        shared = [n for n in self.inputs.needed if layout.inputs.get(n) is None] if layout.batched else []
        return Kind(signature, layout, {n: feeds[n].copy() for n in shared}, {n: v.copy() for n, v in feeds.items()})

    def _note(self, kind: Kind) -> None:
        if kind.layout.batched:
            return
        message = (f"StreamBatcher: steps with feeds of shapes {dict(zip(self.inputs.needed, kind.signature))} run one "
                   f"stream per call: {'; '.join(kind.layout.reasons)}")
        self.fallback_reasons.append(message)
        warnings.warn(message, RuntimeWarning, stacklevel=5)

    def _check_carried(self, layout: BatchLayout) -> list[str]:
        reasons = []
        for out, inp in self.inputs.carry.items():
            a_out, a_in = layout.outputs.get(out), layout.inputs.get(inp)
            if a_out is None or a_in is None or a_out != a_in or layout.rows.get(out) != 1:
                reasons.append(f"carried output {out!r} has the batch on axis {a_out} "
                               f"({layout.rows.get(out)} rows a stream), input {inp!r} on axis {a_in}")
        return reasons

    def _check_batch_size(self, feeds: dict[str, np.ndarray]) -> None:
        """A feed that differs from a batched kind of step only on a batch axis: a batch of several."""
        for signature, kinds in list(self._kinds.items()):
            kind = kinds[0]
            if not kind.layout.batched:
                continue
            for name, known in zip(self.inputs.needed, signature):
                axis, shape = kind.layout.inputs.get(name), feeds[name].shape
                if axis is None or shape == known or len(shape) != len(known):
                    continue
                if all(s == k for j, (s, k) in enumerate(zip(shape, known)) if j != axis):
                    raise StreamError(f"input {name!r} has {shape[axis]} on its batch axis {axis} (shape {shape}): "
                                      "a step is one stream's feeds, batch 1")
