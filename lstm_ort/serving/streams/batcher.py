"""StreamBatcher: many concurrent streams of a stateful model, the steps of different streams run
as one call, the carried state of every stream kept by the batcher (docs/streams.md).

Each stream steps as it would through its own ``InferenceSession.run(None, feeds)`` with batch 1:
``step`` takes those feeds without the carried inputs and returns that call's outputs, in output
order. The step path is native (custom_ops/streams, the extension ``_engine``): the stream table,
queues, grouping, stacking, the onnxruntime call, splitting and waking the callers run in C++
with the GIL released; a caller's thread leads a call itself when a call slot is free, taking
every step of its kind queued then. Python here does what a step does only once per kind: the
checks of feeds it has not seen (feeds.py) and the analysis of where a kind carries the batch
(kinds.py), registering the kind with the engine. reference.py is the same contract in Python,
the reference the tests compare against.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
import weakref
from concurrent.futures import Future

import numpy as np
import onnx
import onnxruntime as ort

from lstm_ort.graph.batch_axes import BatchLayout
from lstm_ort.runtime.library import get_library_path
from lstm_ort.runtime.model_io import load_model
from lstm_ort.runtime.session import InferenceSession
from lstm_ort.serving.batch.batcher import normalize_providers
from lstm_ort.serving.streams import _engine
from lstm_ort.serving.streams.convs import convs_as_2d
from lstm_ort.serving.streams.device import grow_model, reader_model, wrapped_model, writer_model
from lstm_ort.serving.streams.device import state_axes as state_axes_of
from lstm_ort.serving.streams.errors import BatcherShutDown, StreamError, closed, engine_error
from lstm_ort.serving.streams.feeds import StepInputs
from lstm_ort.serving.streams.kinds import Kind, Kinds, with_row_scales
from lstm_ort.serving.streams.native_session import (api_base, engine_model, engine_options, engine_providers,
                                                     refuse_session_graphs, wide_from_us)
from lstm_ort.serving.streams.options import check_batcher_options, step_pair, stream_id, stream_ids
from lstm_ort.serving.streams.specialize import kind_models
from lstm_ort.serving.streams.stats import StreamStats, snapshot
from lstm_ort.serving.streams.step_future import StepFuture, in_a_callback, settle

CUDA = "CUDAExecutionProvider"


class StreamBatcher:
    """Serves many streams of one stateful model; see the module docstring and docs/streams.md.

    ``model``: an (optimized) model, path, bytes or ModelProto. ``carry``: each state output ->
    the input it feeds on the next step (``{"stateN": "state"}``). ``max_batch``: steps per call at
    most. ``max_wait_ms``: the most a step waits for company before its call runs (it waits only
    while calls of the size at hand cannot keep up with the arrivals: see docs/streams.md, *How
    steps are batched*). ``workers``: calls in flight at once (default 1 on the CPU, 2 on CUDA).
    ``batch_convs``: run 1-D convolutions as one 2-D convolution over the batch (default: on CPU;
    convs.py; calls of one stream run the model as it came). ``specialize``: each kind of step
    gets models of its own, its shapes and shared inputs folded in (default: on; specialize.py;
    ``specialized`` says, by group, why not where one did not).
    ``device_states``: keep the states on the session's device (default: with CUDA).
    """

    def __init__(self, model, carry: dict[str, str], providers=None, session_options: ort.SessionOptions | None = None,
                 max_batch: int = 256, max_wait_ms: float = 2.0, *, device_states: bool | None = None,
                 batch_convs: bool | None = None, workers: int | None = None, specialize: bool | None = None):
        check_batcher_options(max_batch, max_wait_ms, workers)
        # int8 nodes quantize each stream's rows with their own scales: batched, each stream's result
        # is, bit for bit, its own (kinds.with_row_scales).
        self.model = with_row_scales(load_model(os.fspath(model) if isinstance(model, os.PathLike) else model))
        self._in = StepInputs(self.model, carry)
        self.carry = self._in.carry
        providers = normalize_providers(providers)
        refuse_session_graphs(providers)
        on_cuda = bool(providers) and any((p if isinstance(p, str) else p[0]) == CUDA for p in providers)
        self.batch_convs = (not on_cuda) if batch_convs is None else bool(batch_convs)
        session_model = self.model
        self.convs_rewritten = 0
        if self.batch_convs:
            session_model = onnx.ModelProto()
            session_model.CopyFrom(self.model)
            self.convs_rewritten = convs_as_2d(session_model)
        self.session_model, self.session_options = session_model, session_options
        model_bytes = session_model.SerializeToString()
        # Python's session: what the kinds' analysis falls back on, and how onnxruntime resolves
        # the providers and their options, which the engine's own session then takes.
        self.session = InferenceSession(model_bytes, session_options, providers=providers)
        self.output_names = [o.name for o in self.session.get_outputs()]
        self.max_batch, self.max_wait = max_batch, max_wait_ms / 1e3
        on_device = CUDA in self.session.get_providers()
        self.device_states = on_device if device_states is None else bool(device_states)
        # One worker's call in flight on the CPU (a second one takes cores its clients' Python
        # needs: 8 client threads made 29k steps/s with two, 58k with one, g2p-id decoder on 2
        # cores), and beside it one a submitter runs on its own thread (engine.h: what one `run`
        # per step from that thread would do); two on a GPU, so one call's host work overlaps the
        # other's device work. On the CPU a call's callers wake one another in turn, sparing the
        # worker, whose time is the calls' (g2p-id, 8 clients: median 36k -> 59-60k steps/s); on
        # a GPU the worker wakes them all, and they come back sooner (4,096 silero-vad streams x 32
        # clients on an H200: 23.0k steps/s, 20.8k in turn).
        self.workers = workers if workers is not None else (2 if on_device else 1)
        self._kinds = Kinds(self.model, self._in, lambda full: self.session.run(None, full))
        self.fallback_reasons = self._kinds.fallback_reasons
        self._groups: dict[tuple, int] = {}  # (signature, shared values) -> the engine's group
        self._learn_lock = threading.Lock()
        self._states: dict[str, tuple[int, ...]] | None = None
        options = engine_options(session_options)
        if not on_device and not self.device_states and not options.get("intra_op_num_threads"):  # the host runner
            options.update(host_threads(os.cpu_count() or 1, wide_from_us(session_options, WIDE_FROM_US)))
        if self.convs_rewritten and not self.device_states:  # a lone stream runs the model as it came
            options["single_model"] = engine_model(self.model.SerializeToString(), session_options)
        self._engine = _engine.Engine(
            api_base(), engine_model(model_bytes, session_options), get_library_path(), options,
            engine_providers(self.session, providers), [(n, _onnx_type(d)) for n, d in zip(self._in.needed, self._in.needed_dtypes)],
            list(self.carry.items()),
            {"max_batch": max_batch, "max_wait": self.max_wait, "max_calls": self.workers, "workers": self.workers,
             "submitter_calls": 0 if on_device else 1, "callers_wake_in_turn": not on_device,
             "pad_below": _tf32_from(self.model, max_batch) if on_device else 0},
            engine_error, settle, self.device_states)
        self._opset = next((o.version for o in session_model.opset_import if o.domain in ("", "ai.onnx")), 0)
        if self.device_states and self._opset < 11:
            raise ValueError(f"device states need ScatterND (opset 11), the model imports opset {self._opset}")
        self._device_axes: set[tuple[int, ...]] = set()
        # Each kind's own models (specialize.py), made on a thread of their own, so a kind's first
        # step does not wait for them. `specialized`: group -> '' or why (not all).
        self.specialize = True if specialize is None else bool(specialize)
        self.specialized: dict[int, str] = {}
        self._specializers: list[threading.Thread] = []
        self._specialized_bytes = 0  # the kinds' own models, held by their sessions
        self._finalizer = weakref.finalize(self, _engine.Engine.shutdown, self._engine, True)

    # -- streams ---------------------------------------------------------------------------------
    def open(self, initial: dict[str, np.ndarray] | None = None) -> int:
        """A new stream; its carried inputs start as zeros unless ``initial`` gives them (one
        stream's values, batch axis of size 1). Returns its id."""
        with self._learn_lock:
            values = self._in.initial_states(initial or {}, self._states)
            if self._states is None:
                self._set_states({n: v.shape for n, v in values.items()})
        return self._engine.open([np.ascontiguousarray(v).tobytes() for v in values.values()])

    def close(self, stream: int) -> None:
        """Ends a stream: its queued steps fail with StreamClosed; a step already running
        completes and its state is dropped."""
        self._engine.close(stream_id(stream))

    def state(self, stream: int) -> dict[str, np.ndarray]:
        """A copy of the stream's carried inputs as its next step will read them."""
        return dict(zip(self.carry.values(), self._engine.state(stream_id(stream))))

    def layout(self, feeds: dict[str, np.ndarray]) -> BatchLayout:
        """The batch layout of steps with one stream's ``feeds`` (analysed once per kind): which
        axis of each input and output carries the streams, as step_batch stacks them."""
        return self._learn(self._in.check(feeds)).layout

    @property
    def open_streams(self) -> int:
        return self._engine.open_streams()

    @property
    def wide_calls(self) -> int:
        """Calls run so far on the engine's wide session (host_threads: on the CPU where the session
        options left the thread count open, a lone caller's calls and those of a size that took
        WIDE_FROM_US or more on one thread)."""
        return int(self._engine.stats()["wide_calls"])

    @property
    def batched(self) -> bool | None:
        """Whether the kinds of steps seen so far run batched (None before the first step);
        ``fallback_reasons`` says why not where they do not."""
        return self._kinds.batched

    # -- steps -----------------------------------------------------------------------------------
    def step(self, stream: int, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        """One step of ``stream``: what ``InferenceSession.run(None, feeds)`` returns for it alone."""
        out = self._engine.step(stream, feeds)
        if out is None:  # a kind not seen before, or feeds to check in full
            stream, feeds = self._prepare(stream, feeds)
            out = self._engine.step(stream, feeds)
            if out is None:
                raise RuntimeError(f"StreamBatcher: the step path refused feeds it registered ({_describe(feeds)})")
        return out

    def submit(self, stream: int, feeds: dict[str, np.ndarray], *, run_here: bool = True) -> Future:
        """Queues one step of ``stream``; the Future gives its outputs (a list, in output order).
        Steps of one stream run in the order submitted, one at a time. Bad feeds raise here.
        The feeds are copied: the caller may reuse its arrays at once. ``run_here``: where the
        engine is idle and no other step is expected during the call, the step runs on this
        thread and the Future is done when submit returns (no hand-over to a worker,
        docs/streams.md); False: always the workers' (a step submitted from a step's
        done-callback is always queued too)."""
        future = StepFuture()
        self._submit(stream, feeds, future, run_here and not in_a_callback())
        return future

    async def astep(self, stream: int, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        """``step`` for an event loop: the step is queued for the workers (the loop never runs a
        call) and its result set in this loop, a call's results at once."""
        future = asyncio.get_running_loop().create_future()
        self._submit(stream, feeds, future, False)
        return await future

    def _submit(self, stream, feeds, future, run_here: bool) -> None:
        if not self._engine.submit(stream, feeds, future, run_here):
            stream, feeds = self._prepare(stream, feeds)
            if not self._engine.submit(stream, feeds, future, run_here):
                raise RuntimeError(f"StreamBatcher: the step path refused feeds it registered ({_describe(feeds)})")

    def step_many(self, steps, return_exceptions: bool = False) -> list:
        """Several steps (``[(stream, feeds), ...]``, a stream may appear more than once: in order)
        submitted at once and waited for together; their outputs in the order given. A step that
        fails raises its error once all are done (the others' states are kept), or with
        ``return_exceptions`` stands in its place. Bad feeds raise before any step is queued."""
        steps = steps if type(steps) is list else list(steps)
        if not steps:
            return []
        out = self._engine.step_many(steps, return_exceptions)
        if out is None:
            steps = [self._prepare(*step_pair(p)) for p in steps]
            out = self._engine.step_many(steps, return_exceptions)
            if out is None:
                raise RuntimeError("StreamBatcher: the step path refused feeds it registered")
        return out

    def step_batch(self, streams, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        """Steps of several streams already stacked: ``feeds`` as ``run(None, feeds)`` would take
        them for ``len(streams)`` streams, each input's rows on its batch axis in the order of
        ``streams`` (an input without a batch axis: one value for all). Returns the outputs as that
        call returns them, stacked the same way. One call, run on the caller's thread (no waiting
        for company, no per-step Python: for servers that gather a tick's chunks themselves); the
        streams must be distinct, open and have no step in flight. A kind of step never seen
        before is analysed from the first stream's rows."""
        ids = stream_ids(streams)
        feeds = self._in.check_stacked(feeds)
        self._require_states()
        kind = self._kinds.stacked(feeds, len(ids), self._states)
        if not kind.layout.batched:
            raise StreamError(f"step_batch: this kind of step runs one stream per call ({'; '.join(kind.layout.reasons)}):"
                              " use step_many")
        group = self._group(kind, kind.values(feeds))
        return self._engine.step_stacked(ids, group, [_c_order(feeds[n]) for n in self._in.needed])

    def wait_specialized(self, timeout: float | None = None) -> dict[int, str]:
        """Waits (up to ``timeout`` seconds) until the kinds seen so far have their own models or
        the reasons they have none; returns ``specialized``. Steps never need to wait for it."""
        deadline = None if timeout is None else time.monotonic() + timeout
        for t in list(self._specializers):
            t.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
        return dict(self.specialized)

    def cuda_graphs(self) -> dict[int, tuple[int, str]]:
        """By kind (group) seen: (its calls of one stream run on its CUDA graph so far, '' or why it
        has none). Only kinds that get models of their own (``specialize``, the first four, within
        their budget) get a graph; ``specialized`` says why a kind did not (docs/streams.md)."""
        out = {}
        for group, why_no_models in list(self.specialized.items()):
            calls, why = self._engine.graph_use(group)
            out[group] = (calls, why) if calls >= 0 else (0, f"it has no sessions of its own: {why_no_models}")
        return out

    # -- counters and life -----------------------------------------------------------------------
    def stats(self) -> StreamStats:
        return snapshot(self._engine.stats(), self.open_streams)

    def reset_stats(self) -> None:
        self._engine.reset_stats()

    def shutdown(self, wait: bool = True) -> None:
        """Stops taking steps; the ones already submitted still run."""
        self._engine.shutdown(wait)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.shutdown()

    # -- what a step does once per kind ----------------------------------------------------------
    def _prepare(self, stream, feeds) -> tuple[int, dict[str, np.ndarray]]:
        """The slow path of a step the engine did not take: the checks (raising StreamError for
        bad feeds), the kind learnt; returns the step as the engine takes it."""
        stream = stream_id(stream)
        if self._engine.stopping():
            raise BatcherShutDown("the batcher is shut down")
        if not self._engine.is_open(stream):
            raise closed(stream)
        feeds = {n: _c_order(v) for n, v in self._in.check(feeds).items()}
        self._learn(feeds)
        return stream, feeds

    def _learn(self, feeds: dict[str, np.ndarray]) -> Kind:
        self._require_states()
        kind = self._kinds.of(feeds, self._states)
        self._group(kind, kind.values(feeds))
        return kind

    def _require_states(self) -> None:
        if self._states is None:
            missing = [n for n, s in self._in.state_shapes.items() if s is None]
            if missing:
                raise StreamError(f"the shape of carried input {missing[0]!r} is not known yet: open a stream with "
                                  "initial=... first")
            with self._learn_lock:
                if self._states is None:
                    self._set_states(dict(self._in.state_shapes))

    def _set_states(self, shapes: dict[str, tuple[int, ...]]) -> None:
        """The streams' state shapes, fixed by the first stream (called under _learn_lock)."""
        dtypes = self._in.state_dtypes
        models = None
        if self.device_states:
            models = {"writer": writer_model(shapes, dtypes, self._opset).SerializeToString(),
                      "reader": reader_model(shapes, dtypes, self._opset).SerializeToString(),
                      "grow": grow_model(shapes, dtypes, self._opset).SerializeToString()}
        self._engine.set_states([(list(shape), _onnx_type(dtypes[n])) for n, shape in shapes.items()], models)
        self._states = shapes

    def _group(self, kind: Kind, values: tuple[bytes, ...]) -> int:
        key = (kind.signature, values)
        group = self._groups.get(key)
        if group is not None:
            return group
        with self._learn_lock:
            if key in self._groups:
                return self._groups[key]
            layout = kind.layout
            batched = layout.batched
            needed = self._in.needed
            shared = [k for k, n in enumerate(needed) if n in kind.shared]
            if self.device_states:  # the wrapped model for these state axes (device.py)
                axes = state_axes_of(layout, batched, self._states)
                if axes not in self._device_axes:
                    wrapped = wrapped_model(self.session_model, self.carry, dict(zip(self._states, axes)), self._states,
                                            self._opset)
                    self._engine.add_device_model(list(axes), wrapped.SerializeToString())
                    self._device_axes.add(axes)
            else:
                axes = tuple(_axis(layout.inputs.get(n) if batched else None) for n in self.carry.values())
            group = self._engine.add_group(
                [list(s) for s in kind.signature],
                [_axis(layout.inputs.get(n) if batched else None) for n in needed],
                shared, list(values),
                list(axes),
                [_axis(layout.outputs.get(o) if batched else None) for o in self.output_names],
                [int(layout.rows.get(o, 1)) for o in self.output_names],
                self.max_batch if batched else 1)
            self._groups[key] = group
            if self.specialize:
                self._start_specializing(group, kind)
            return group

    def _start_specializing(self, group: int, kind: Kind) -> None:
        """The kind's own models, made on a thread of their own (called under _learn_lock)."""
        if len(self._specializers) >= _MAX_SPECIALIZED_KINDS:
            self.specialized[group] = f"only the first {_MAX_SPECIALIZED_KINDS} kinds get models of their own"
            return
        # each kind's sessions hold the weights once more (its graphed session, whose CUDA graph a
        # lone stream's calls replay, once again): a budget for all kinds
        graph_bytes = self.model.ByteSize() if self._engine.makes_graphed_sessions() else 0
        need = self.session_model.ByteSize() + (self.model.ByteSize() if self.convs_rewritten else 0) + graph_bytes
        if self._specialized_bytes + need > _SPECIALIZED_BYTES:
            self.specialized[group] = (f"its own models would hold {need / 2**20:.0f} MiB of weights again, past the "
                                       f"{_SPECIALIZED_BYTES / 2**20:.0f} MiB all kinds' own models may take")
            return
        self._specialized_bytes += need
        # not a daemon: a process that ends meanwhile waits for it rather than tear down onnxruntime
        # under a session being made
        t = threading.Thread(target=self._specialize, args=(group, kind, need - graph_bytes),
                             name=f"lstm-ort-specialize-{group}")
        self._specializers.append(t)
        t.start()

    def _specialize(self, group: int, kind: Kind, budgeted: int) -> None:
        """Makes, proves and hands the engine the kind's own models (on its own thread); gives back
        the ``budgeted`` bytes where it makes none (not its graphed session's: the engine makes that
        from the model as it came then)."""
        batched = kind.layout.batched
        input_axes = {n: kind.layout.inputs.get(n) if batched else None for n in kind.example if n not in kind.shared}
        states = {n: np.zeros(s, self._in.state_dtypes[n]) for n, s in self._states.items()}
        state_axes = {n: kind.layout.inputs.get(n) if batched else None for n in states}
        options = ort.SessionOptions()
        options.intra_op_num_threads = 1  # the proof's sessions: no pool of threads of their own
        try:
            # the proof runs on the CPU: the folding, not a device's precision, is what it checks
            reference = (_runner(self.session_model.SerializeToString(), options) if self.device_states
                         else lambda feeds: self.session.run(None, feeds))
            batched_model, single_model, why = kind_models(
                self.session_model, self.model if self.convs_rewritten else None, kind.example, kind.shared,
                input_axes, states, state_axes, reference, lambda model: _runner(model, options))
            if self.device_states:  # calls of several streams run it wrapped; of one, as it is
                single_model = single_model or batched_model
                if batched_model and batched:
                    axes = state_axes_of(kind.layout, batched, self._states)
                    batched_model = wrapped_model(onnx.load_from_string(batched_model), self.carry,
                                                  dict(zip(self._states, axes)), self._states,
                                                  self._opset).SerializeToString()
                else:
                    batched_model = b""
            made = bool(batched_model or single_model)
            if made or self.device_states:  # with none, the kind's calls of one stream may still replay a CUDA graph
                self._engine.add_group_models(group, batched_model, single_model)
        except Exception as e:  # noqa: BLE001 - the kind keeps the model as it came
            why, made = f"{type(e).__name__}: {e}", False
        if not made:
            with self._learn_lock:
                self._specialized_bytes -= budgeted
        self.specialized[group] = why


# Kinds that get models of their own (two sessions each, a third for CUDA graphs): most streaming
# deployments have one.
_MAX_SPECIALIZED_KINDS = 4
# and the most their models may hold (the weights of each, again; silero-vad 16k's model: 3.3 MB)
_SPECIALIZED_BYTES = 256 << 20


# A call whose size class last took this long on one thread takes the engine's wide session
# (host_threads); the session config entry WIDE_FROM_KEY sets another value, 0 turns it off.
WIDE_FROM_US = 500.0


def host_threads(cores: int, wide_from_us: float = WIDE_FROM_US) -> dict:
    """The engine's threads on the CPU where the caller left the count to onnxruntime: a call runs
    on one thread, and on a second session of the model with onnxruntime's default pool where its
    caller has the machine to itself (one stream alone, CallInputs::alone) or where its size class
    (streams, by the power of two) last took ``wide_from_us`` or more on one thread
    (custom_ops/streams/ort_runner.h, WideChoice). The default pool alone (a thread a core,
    spinning after each run) takes the cores that busy callers and the next call need; one thread
    alone leaves a long call's parallel work undone, and a lone stream's (2 cores, the batcher's
    steps/s, one thread / the pool not spinning / spinning: 96 streams x 8 clients in closed loop,
    calls of 0.05-0.3 ms: g2p-id decoder 63k / 51k / 57k, silero-vad 31k / 25k / 27k, torch conv +
    LSTM 34k / 25k / 16k; 256 streams in rounds of step_many from 8 clients, ~128 steps a call of
    ~7 ms on one thread: silero-vad 55k / 77k / 77k; one stream alone of an L2 H1024 LSTM: one
    thread 0.57x one `run` per step of a session with its pool)."""
    return {"intra_op_num_threads": 1, "wide_from_seconds": wide_from_us * 1e-6 if cores > 1 else 0.0}


def _runner(model: bytes, options: ort.SessionOptions):
    """Runs ``model`` on full feeds, of which it takes those it still has as inputs."""
    session = InferenceSession(model, options, providers=["CPUExecutionProvider"])
    names = [i.name for i in session.get_inputs()]
    return lambda feeds: session.run(None, {n: feeds[n] for n in names})


def _c_order(v: np.ndarray) -> np.ndarray:
    """``v`` in C order, its rank kept (np.ascontiguousarray makes a 0-d array 1-d)."""
    return np.require(v, requirements="C")


def _tf32_from(model: onnx.ModelProto, max_batch: int) -> int:
    """The smallest batch size at which one of the model's FusedLSTM nodes computes auto as tf32 on
    CUDA (0: none up to max_batch): calls padded to a batch-size bucket stay below it where their
    steps do (the engine's PaddedSize), so padding never moves a stream's result to another class.
    Asked for calls of one step (auto takes tf32 earlier there: precision.h, OneStepRunsAsTf32) and
    of any length (it also takes tf32 on long calls of some stacks), so the bound holds whatever
    the chunks' lengths."""
    from lstm_ort.runtime.native import decide_precision
    from lstm_ort.runtime.nodes import node_precision, node_shapes

    stacks = sorted({(shape.hidden_size, shape.layers, shape.directions)
                     for node, shape in node_shapes(model) if shape is not None and node_precision(node) == "auto"})
    for batch in range(1, max_batch + 1):
        if any(decide_precision("cuda", "auto", h, batch, layers=layers, directions=d, steps=steps).runs == "tf32"
               for h, layers, d in stacks for steps in (1, _ANY_STEPS)):
            return batch
    return 0


# More steps than any call has: the precision decision at its longest calls.
_ANY_STEPS = 1 << 30


def _axis(axis: int | None) -> int:
    return -1 if axis is None else int(axis)


def _onnx_type(dtype) -> int:
    return onnx.helper.np_dtype_to_tensor_dtype(np.dtype(dtype))


def _describe(feeds: dict) -> str:
    return ", ".join(f"{n}: {getattr(v, 'dtype', '?')}{getattr(v, 'shape', '')}" for n, v in feeds.items())


