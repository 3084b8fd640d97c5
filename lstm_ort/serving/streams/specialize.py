"""A kind's own model: the model with the step shapes of one kind fixed (the batch axis left free)
and the values its steps share (the inputs without a batch axis) made constants, folded by
onnxscript's constant folding, so that the shape tests and branches that hinge on them go before the
first call instead of running in every call (and a dense layer over a sequence, as tf2onnx writes
it, becomes one MatMul: tensordot.py).

Exports are full of them: silero-vad 16k branches on its ``sr`` input and, inside, on the sizes
of its tensors (nested Ifs that squeeze an axis where it is 1), 413 nodes where a call of several
streams needs 51 and a call of one 39; each node is a kernel of onnxruntime's run on every call
(this 2-core machine: a call of one stream 90-100 -> 76-83 us, of 8 streams 185 -> 165 us).

A folded model is used only where it is proved: ``prove`` runs it and the model it came from on
the kind's own feeds, one stream and two, and refuses it, with the reason, where their outputs
differ beyond float32 rounding (docs/streams.md, *Exactness*).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence

import numpy as np
import onnx
from onnx import numpy_helper

from lstm_ort.runtime.model_io import iter_graphs
from lstm_ort.serving.streams.tensordot import collapse_tensordots

# The batch axis of a kind's inputs and carried inputs, a symbolic dimension in its own model.
BATCH_DIM = "streams"

# One kind's folding at a time: two would only take turns on the GIL, and onnxscript does not say
# its passes are safe on two threads at once.
_OPTIMIZER = threading.Lock()

# A folded model is at most this much larger than the model it came from (constant folding that
# materialises large tensors would cost each call memory traffic instead of saving launches).
_MAX_GROWTH = 1.05


def fixed_inputs(model: onnx.ModelProto, shapes: Mapping[str, Sequence[int]], batch_axes: Mapping[str, int | None],
                 constants: Mapping[str, np.ndarray]) -> onnx.ModelProto:
    """A copy of ``model`` whose inputs in ``shapes`` (one stream's shape each) have those dims,
    the axis in ``batch_axes`` left free, and whose inputs in ``constants`` are those values."""
    fixed = onnx.ModelProto()
    fixed.CopyFrom(model)
    graph = fixed.graph
    for inp in list(graph.input):
        if inp.name in constants:
            graph.input.remove(inp)
            for init in [t for t in graph.initializer if t.name == inp.name]:
                graph.initializer.remove(init)
            value = np.asarray(constants[inp.name])
            graph.initializer.append(numpy_helper.from_array(value, inp.name))
        elif inp.name in shapes:
            dims = inp.type.tensor_type.shape.dim
            del dims[:]
            for axis, size in enumerate(shapes[inp.name]):
                dim = dims.add()
                if axis == batch_axes.get(inp.name):
                    dim.dim_param = BATCH_DIM
                else:
                    dim.dim_value = int(size)
    return fixed


def folded(model: onnx.ModelProto, shapes: Mapping[str, Sequence[int]], batch_axes: Mapping[str, int | None],
           constants: Mapping[str, np.ndarray]) -> tuple[onnx.ModelProto | None, str]:
    """``fixed_inputs``, its dense layers over sequences as one MatMul each (tensordot.py), folded
    (_optimize): (the model, '') or (None, why not)."""
    try:
        with _OPTIMIZER:
            fixed = fixed_inputs(model, shapes, batch_axes, constants)
            collapse_tensordots(fixed)
            out = _optimize(fixed)
    except Exception as e:  # noqa: BLE001 - any failure of the folding leaves the kind on the model as it came
        return None, f"onnxscript's constant folding failed on it: {type(e).__name__}: {e}"
    before, after = _count_nodes(model), _count_nodes(out)
    if after >= before:
        return None, f"folding removed no node ({before} nodes)"
    if out.ByteSize() > _MAX_GROWTH * model.ByteSize():
        return None, f"folding grew the model from {model.ByteSize()} to {out.ByteSize()} bytes"
    return out, ""


def kind_models(batched: onnx.ModelProto, single: onnx.ModelProto | None, example: Mapping[str, np.ndarray],
                shared: Mapping[str, np.ndarray], input_axes: Mapping[str, int | None],
                states: Mapping[str, np.ndarray], state_axes: Mapping[str, int | None],
                run_batched: Callable[[dict], list],
                make_run: Callable[[bytes], Callable[[dict], list]]) -> tuple[bytes, bytes, str]:
    """A kind's own models, folded and proved: (batched, single, why not), each model b'' where it
    is not made (``why`` says why; '' where both are).

    ``batched``: the model of the kind's calls of several streams; ``single``: of one stream, where
    it has its own (None: the same). ``example``: one step's feeds; ``shared``: those the kind's
    steps share (made constants); ``input_axes``: the others' batch axes (None: the kind runs one
    stream a call); ``states``: one stream's carried inputs (their shapes and types), batched on
    ``state_axes``. ``run_batched`` runs ``batched`` as it is, the reference; ``make_run`` a folded
    model. The proof runs the kind's example for one stream and for two, states drawn at random."""
    shapes = {n: v.shape for n, v in example.items() if n not in shared}
    shapes.update({n: v.shape for n, v in states.items()})
    axes = {**input_axes, **state_axes}
    rng = np.random.default_rng(0)
    sizes = (1, 2) if any(a is not None for a in axes.values()) else (1,)
    probes = [_stacked(example, input_axes, states, state_axes, n, rng) for n in sizes]
    made, reasons = [], []
    # the model of one stream's calls takes one stream's shapes, the batch axis too
    jobs = (("of several streams", batched, probes, axes), ("of one stream", single, probes[:1], {}))
    for label, model, runs, free in jobs:
        if model is None:
            made.append(b"")
            continue
        out, why = folded(model, shapes, free, shared)
        if out is not None:
            out = out.SerializeToString()
            try:
                why = prove(run_batched, make_run(out), runs)
            except Exception as e:  # noqa: BLE001 - a folded model onnxruntime refuses or fails is not used
                why = f"it failed to run: {type(e).__name__}: {e}"
            why = why and f"the folded model is not the model: {why}"
        made.append(b"" if why else out)
        if why:
            reasons.append(f"the model of calls {label}: {why}")
    return made[0], made[1], "; ".join(reasons)


def _stacked(example, input_axes, states, state_axes, n: int, rng) -> dict:
    """Feeds of ``n`` streams: the example's rows repeated (finite: a first step of NaNs proves
    nothing either way), each stream's states its own."""
    feeds = {}
    for name, v in example.items():
        if v.dtype.kind == "f":
            v = np.nan_to_num(v, nan=0.0, posinf=0.0, neginf=0.0)
        axis = input_axes.get(name)
        feeds[name] = v if axis is None else np.concatenate([v] * n, axis=axis)
    for name, one in states.items():
        shape = list(one.shape)
        axis = state_axes.get(name)
        if axis is not None:
            shape[axis] *= n
        value = 0.5 * rng.standard_normal(shape) if one.dtype.kind == "f" else np.zeros(shape)
        feeds[name] = value.astype(one.dtype)
    return feeds


def _optimize(model: onnx.ModelProto) -> onnx.ModelProto:
    """onnxscript's constant folding (with its shape inference and its partial evaluation of Shape,
    Gather, If and friends) to a fixed point, unused nodes removed. Not its whole `optimize`: the
    rewrite rules that come with it failed now and then on silero-vad (a ValueError in their
    replacement, once in a few runs of the same model), and folding is what a kind needs. It also
    folds the small ConstantOfShape nodes it keeps by default (to spare a model large tensors):
    exporters build pads and shapes with them (silero-vad's reflection pads), and a Pad of unknown
    pads hides every length after it."""
    # imported here: a StreamBatcher that never folds (specialize=False) never loads onnxscript
    import onnx_ir as ir
    import onnxscript.optimizer

    ir_model = ir.serde.deserialize_model(model)
    for _ in range(_FOLDING_ROUNDS):
        result = onnxscript.optimizer.fold_constants(ir_model, onnx_shape_inference=True,
                                                     should_fold=_fold_small_constant_of_shape)
        onnxscript.optimizer.remove_unused_nodes(ir_model)
        if not result.modified:
            break
    return ir.serde.serialize_model(ir_model)


_FOLDING_ROUNDS = 4


def _fold_small_constant_of_shape(node) -> bool | None:
    if node.op_type != "ConstantOfShape" or node.domain not in ("", "ai.onnx"):
        return None
    shape = node.inputs[0].const_value if node.inputs and node.inputs[0] is not None else None
    return shape is not None and int(np.prod(shape.numpy())) <= _SMALL_CONSTANT or None


_SMALL_CONSTANT = 4096  # elements


def prove(run_original: Callable[[dict], list], run_folded: Callable[[dict], list],
          feeds: Sequence[dict]) -> str:
    """'' where the folded model's outputs match the original's on every feeds in ``feeds`` within
    float32 rounding (relative to each output's size); else why not."""
    for full in feeds:
        want, got = run_original(full), run_folded(full)
        for k, (w, g) in enumerate(zip(want, got)):
            w, g = np.asarray(w), np.asarray(g)
            if w.shape != g.shape or w.dtype != g.dtype:
                return f"output {k} came back as {g.dtype}{g.shape}, the model gives {w.dtype}{w.shape}"
            if w.dtype.kind == "f":
                scale = max(1.0, float(np.abs(w).max(initial=0.0)))
                worst = float(np.abs(w.astype(np.float64) - g).max(initial=0.0))
                if not worst <= 1e-5 * scale:
                    return f"output {k} differs by {worst:.3g} (outputs up to {scale:.3g})"
            elif not np.array_equal(w, g):
                return f"output {k} differs"
    return ""


def _count_nodes(model: onnx.ModelProto) -> int:
    """The nodes that run (a Constant is an initializer to onnxruntime), subgraphs included."""
    return sum(node.op_type != "Constant" for graph in iter_graphs(model) for node in graph.node)
