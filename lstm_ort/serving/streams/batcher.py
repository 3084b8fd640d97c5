"""StreamBatcher: many concurrent streams of a stateful model, the steps of different streams run
as one call, the carried state of every stream kept by the batcher (docs/streams.md).

Each stream steps as it would through its own ``InferenceSession.run(None, feeds)`` with batch 1:
``step`` takes those feeds without the carried inputs and returns that call's outputs, in output
order. Underneath, a worker thread collects the pending steps of different streams (at most one
per stream at a time, in order per stream), groups them by the shapes of their feeds and the values
of the inputs that carry no batch (silero-vad's ``sr``), stacks each group along each input's
batch axis (lstm_ort.graph.batch_axes finds them), runs one call and splits the outputs back. The states
live in one array per carried input (state.py) or, on CUDA, on the device
(device.py).
"""

from __future__ import annotations

import asyncio
import collections
import itertools
import os
import threading
import time
import warnings
from concurrent.futures import Future
from dataclasses import dataclass, field

import numpy as np
import onnx
import onnxruntime as ort

from lstm_ort.graph.batch_axes import BatchLayout, batch_layout, split_outputs
from lstm_ort.graph.trace import TraceFailed
from lstm_ort.runtime.messages import clean_message
from lstm_ort.runtime.model_io import load_model
from lstm_ort.runtime.session import InferenceSession
from lstm_ort.serving.batch.batcher import normalize_providers
from lstm_ort.serving.streams.convs import convs_as_2d
from lstm_ort.serving.streams.state import HostSlots
from lstm_ort.serving.streams.stats import Counters, StreamStats

CUDA = "CUDAExecutionProvider"


class StreamError(ValueError):
    """A bad call of one stream: the message says what; no other stream is affected."""


class StreamClosed(StreamError):
    """The stream is closed, or was never opened."""


class BatcherShutDown(RuntimeError):
    """The batcher was shut down."""


@dataclass
class _Stream:
    id: int
    slot: int
    pending: collections.deque = field(default_factory=collections.deque)
    active: bool = False  # a step of it is waiting in a group or running
    closed: bool = False


@dataclass
class _Group:
    """Steps that can share a call: the same feed shapes and the same values of the inputs
    without a batch axis."""

    layout: BatchLayout
    shared: dict[str, np.ndarray]  # the inputs without a batch axis, as the group's steps feed them
    ready: collections.deque = field(default_factory=collections.deque)

    @property
    def limit(self) -> int | None:
        return None if self.layout.batched else 1


class _Step:
    """One submitted step; ``done`` hands its result (a list of outputs, or an exception) on."""

    __slots__ = ("stream", "feeds", "group", "submitted", "result", "done")

    def __init__(self, stream: _Stream, feeds: dict[str, np.ndarray], group: _Group, submitted: float, done):
        self.stream, self.feeds, self.group, self.submitted, self.done = stream, feeds, group, submitted, done
        self.result = None


class _Ticket:
    """Steps submitted together by one caller: it waits once, for all of them (a lock it holds
    until the last step is done; counted under the batcher's lock)."""

    __slots__ = ("remaining", "_lock")

    def __init__(self, count: int):
        self.remaining = count
        self._lock = threading.Lock()
        self._lock.acquire()

    def __call__(self, step: _Step) -> None:
        self.remaining -= 1
        if self.remaining == 0:
            self._lock.release()

    def wait(self) -> None:
        self._lock.acquire()


class StreamBatcher:
    """Serves many streams of one stateful model; see the module docstring and docs/streams.md.

    ``model``: an (optimized) model, path, bytes or ModelProto. ``carry``: each state output ->
    the input it feeds on the next step (``{"stateN": "state"}``). ``max_batch``: steps per call at
    most. ``max_wait_ms``: how long the oldest waiting step waits for company before its call runs
    (not at all when every open stream has a step waiting). ``device_states``: keep the states in
    OrtValues on the session's device and gather/scatter them there (default: with CUDA).
    ``batch_convs``: run 1-D convolutions as one 2-D convolution over the batch (default: on CPU;
    convs.py). ``workers``: threads running calls; idle ones share the waiting steps, so
    one call's Python (stacking, splitting) overlaps another's run.
    """

    def __init__(self, model, carry: dict[str, str], providers=None, session_options: ort.SessionOptions | None = None,
                 max_batch: int = 256, max_wait_ms: float = 2.0, *, device_states: bool | None = None,
                 batch_convs: bool | None = None, workers: int = 2):
        if not isinstance(max_batch, int) or max_batch < 1:
            raise ValueError(f"max_batch must be an int >= 1, got {max_batch!r}")
        if max_wait_ms < 0:
            raise ValueError(f"max_wait_ms must be >= 0, got {max_wait_ms!r}")
        if not isinstance(workers, int) or workers < 1:
            raise ValueError(f"workers must be an int >= 1, got {workers!r}")
        self.model = load_model(os.fspath(model) if isinstance(model, os.PathLike) else model)
        self.carry = _check_carry(self.model, carry)
        self._inputs = _tensor_types(self.model.graph.input, {i.name for i in self.model.graph.initializer})
        self._needed = [n for n in self._inputs if n not in self.carry.values()]
        self._needed_dtypes = [self._inputs[n][0] for n in self._needed]
        # feed shapes -> (indices of the inputs without a batch axis, their values' bytes -> group)
        self._fast: dict[tuple, tuple[list[int], dict[tuple, _Group]]] = {}
        self._state_shapes = {inp: _state_shape(*self._inputs[inp]) for inp in self.carry.values()}
        providers = normalize_providers(providers)
        on_cuda = bool(providers) and any((p if isinstance(p, str) else p[0]) == CUDA for p in providers)
        self.batch_convs = (not on_cuda) if batch_convs is None else bool(batch_convs)
        session_model = self.model
        self.convs_rewritten = 0
        if self.batch_convs:
            session_model = onnx.ModelProto()
            session_model.CopyFrom(self.model)
            self.convs_rewritten = convs_as_2d(session_model)
        self.session_model, self.session_options = session_model, session_options
        self.session = InferenceSession(session_model.SerializeToString(), session_options, providers=providers)
        self.output_names = [o.name for o in self.session.get_outputs()]
        self.max_batch, self.max_wait = max_batch, max_wait_ms / 1e3
        self.device_states = (CUDA in self.session.get_providers()) if device_states is None else bool(device_states)
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._streams: dict[int, _Stream] = {}
        self._ids = itertools.count(1)
        self._groups: dict[tuple, _Group] = {}
        # feed shapes -> [(layout, the inputs it found shared and their values)]
        self._layouts: dict[tuple, list[tuple[BatchLayout, dict[str, np.ndarray]]]] = {}
        self._analysis_lock = threading.Lock()
        self._waiting = 0  # steps in some group's ready queue
        self._idle = 0  # workers looking for their next call
        self._later: list[_Step] = []  # steps settled under the lock whose Futures are set outside it
        self._stopping = False
        self._counters = Counters()
        self.fallback_reasons: list[str] = []
        self._state_dtypes = {inp: self._inputs[inp][0] for inp in self.carry.values()}
        self._states = None  # made at the first open, once the state shapes are known
        if self.device_states:
            from lstm_ort.serving.streams.device import DeviceRunner

            self._device = DeviceRunner(self)
        else:
            self._device = None
        self._workers = [threading.Thread(target=self._work, name=f"lstm-ort-streams-{k}", daemon=True)
                         for k in range(workers)]
        for w in self._workers:
            w.start()

    # -- streams ---------------------------------------------------------------------------------
    def open(self, initial: dict[str, np.ndarray] | None = None) -> int:
        """A new stream; its carried inputs start as zeros unless ``initial`` gives them (one
        stream's values, batch axis of size 1). Returns its id."""
        values = self._initial_states(initial or {})
        with self._lock:
            if self._stopping:
                raise BatcherShutDown("the batcher is shut down")
            if self._states is None:
                shapes = {n: v.shape for n, v in values.items()}
                self._states = self._device.make_states(shapes) if self._device else HostSlots(shapes, self._state_dtypes)
            for n, v in values.items():
                if v.shape != self._states.shapes[n]:
                    raise StreamError(f"initial {n!r}: shape {v.shape}, the streams' states have "
                                      f"{self._states.shapes[n]}")
            slot = self._states.allocate()
            self._states.write(slot, values)
            sid = next(self._ids)
            self._streams[sid] = _Stream(sid, slot)
            return sid

    def close(self, stream: int) -> None:
        """Ends a stream: its queued steps fail with StreamClosed; a step already running
        completes and its state is dropped."""
        with self._lock:
            st = self._streams.pop(stream, None)
            if st is None:
                raise StreamClosed(f"stream {stream!r} is not open")
            st.closed = True
            dropped = list(st.pending)
            st.pending.clear()
            if not st.active:
                self._states.free(st.slot)
            for step in dropped:
                step.result = StreamClosed(f"stream {stream} was closed before this step ran")
                if isinstance(step.done, _Ticket):
                    step.done(step)
        for step in dropped:
            if not isinstance(step.done, _Ticket):
                step.done(step)

    def state(self, stream: int) -> dict[str, np.ndarray]:
        """A copy of the stream's carried inputs as its next step will read them."""
        with self._lock:
            st = self._streams.get(stream)
            if st is None:
                raise StreamClosed(f"stream {stream!r} is not open")
            return self._states.read(st.slot)

    def layout(self, feeds: dict[str, np.ndarray]) -> BatchLayout:
        """The batch layout of steps with one stream's ``feeds`` (analysed once per kind): which
        axis of each input and output carries the streams, as step_batch stacks them."""
        feeds = self._check_feeds(feeds)
        return self._group(feeds).layout

    @property
    def open_streams(self) -> int:
        return len(self._streams)

    @property
    def batched(self) -> bool | None:
        """Whether the kinds of steps seen so far run batched (None before the first step);
        ``fallback_reasons`` says why not where they do not."""
        with self._analysis_lock:
            layouts = [lay for kinds in self._layouts.values() for lay, _ in kinds]
        return None if not layouts else all(lay.batched for lay in layouts)

    # -- steps -----------------------------------------------------------------------------------
    def submit(self, stream: int, feeds: dict[str, np.ndarray]) -> Future:
        """Queues one step of ``stream``; the Future gives its outputs (a list, in output order).
        Steps of one stream run in the order submitted, one at a time. Bad feeds raise here."""
        future = Future()
        self._enqueue([(stream, feeds)], lambda step: _settle(future, step.result), None)
        return future

    def step(self, stream: int, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        """One step of ``stream``: what ``InferenceSession.run(None, feeds)`` returns for it alone."""
        return self.step_many([(stream, feeds)])[0]

    def step_many(self, steps, return_exceptions: bool = False) -> list:
        """Several steps (``[(stream, feeds), ...]``, a stream may appear more than once: in order)
        submitted at once and waited for together; their outputs in the order given. A step that
        fails raises its error once all are done (the others' states are kept), or with
        ``return_exceptions`` stands in its place."""
        steps = list(steps)
        if not steps:
            return []
        ticket = _Ticket(len(steps))
        queued = self._enqueue(steps, ticket, ticket)
        ticket.wait()
        results = [q.result for q in queued]
        if not return_exceptions:
            for r in results:
                if isinstance(r, BaseException):
                    raise r
        return results

    def step_batch(self, streams, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        """Steps of several streams already stacked: ``feeds`` as ``run(None, feeds)`` would take
        them for ``len(streams)`` streams, each input's rows on its batch axis in the order of
        ``streams`` (an input without a batch axis: one value for all). Returns the outputs as that
        call returns them, stacked the same way. One call, run on the caller's thread (no waiting
        for company, no per-step Python: for servers that gather a tick's chunks themselves); the
        streams must be distinct, open and have no step in flight. A kind of step never seen
        before is analysed from the first stream's rows."""
        streams = [int(s) for s in streams]
        if not streams or len(set(streams)) != len(streams):
            raise StreamError("step_batch: streams must be distinct, at least one")
        feeds = self._check_stacked(feeds)
        layout = self._stacked_layout(feeds, len(streams))
        if not layout.batched:
            raise StreamError(f"step_batch: this kind of step runs one stream per call ({'; '.join(layout.reasons)}):"
                              " use step_many")
        started = time.perf_counter()
        with self._lock:
            sts = self._take(streams)
        try:
            outputs = self._call(layout, [st.slot for st in sts], feeds)
        except Exception as e:
            self._counters.record([started] * len(sts), started, time.perf_counter(), len(sts))
            raise _step_error(e) from None
        finally:
            with self._lock:
                self._release(sts)
        self._counters.record([started] * len(sts), started, time.perf_counter())
        return outputs

    def _take(self, streams: list[int]) -> list[_Stream]:
        """Called with the lock held: marks the streams as stepping (all or none)."""
        if self._stopping:
            raise BatcherShutDown("the batcher is shut down")
        sts = []
        for sid in streams:
            st = self._streams.get(sid)
            if st is None:
                raise StreamClosed(f"stream {sid!r} is not open")
            if st.active:
                raise StreamError(f"stream {sid} has a step in flight: step_batch takes idle streams")
            sts.append(st)
        for st in sts:
            st.active = True
        return sts

    def _release(self, sts: list[_Stream]) -> None:
        """Called with the lock held: these streams' steps are done; their next ones may wait."""
        for st in sts:
            if st.closed:
                st.active = False
                self._states.free(st.slot)
            elif st.pending:
                nxt = st.pending.popleft()
                nxt.group.ready.append(nxt)
                self._waiting += 1
            else:
                st.active = False
        self._wake.notify_all()

    def _check_stacked(self, feeds) -> dict[str, np.ndarray]:
        if not isinstance(feeds, dict) or set(feeds) != set(self._needed):
            raise StreamError(f"step_batch: feeds must give exactly the step inputs {self._needed}")
        out = {}
        for name, dtype in zip(self._needed, self._needed_dtypes):
            v = feeds[name] if type(feeds[name]) is np.ndarray else np.asarray(feeds[name])
            if v.dtype != dtype:
                raise StreamError(f"input {name!r} is {v.dtype}, the model takes {np.dtype(dtype)}")
            out[name] = v
        return out

    def _stacked_layout(self, feeds: dict[str, np.ndarray], n: int) -> BatchLayout:
        """The layout of a known kind of step these stacked feeds are n of; else the kind of the
        first stream's rows (each input's first axis of size n taken for its batch axis)."""
        for attempt in range(2):
            for signature, kinds in list(self._layouts.items()):
                for layout, shared in kinds:
                    if self._stacked_match(signature, layout, shared, feeds, n):
                        return layout
            if attempt:
                break
            one = {}
            for name, v in feeds.items():
                axis = next((k for k, d in enumerate(v.shape) if d == n), None) if n > 1 else None
                one[name] = v if axis is None else np.take(v, [0], axis=axis)
            self._group(self._check_feeds(one))
        raise StreamError("step_batch: cannot tell the batch axes of these stacked feeds (step one stream's feeds "
                          "first, or give each input its rows on its batch axis)")

    def _stacked_match(self, signature: tuple, layout: BatchLayout, shared: dict, feeds: dict, n: int) -> bool:
        for name, shape in zip(self._needed, signature):
            v = feeds[name]
            axis = layout.inputs.get(name) if layout.batched else None
            if axis is None:
                if v.shape != shape or (name in shared and not np.array_equal(v, shared[name])):
                    return False
            elif v.shape != shape[:axis] + (n,) + shape[axis + 1:]:
                return False
        return True

    async def astep(self, stream: int, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        return await asyncio.wrap_future(self.submit(stream, feeds))

    def _enqueue(self, pairs, done, ticket: _Ticket | None) -> list[_Step]:
        """Checks every step (raising before any is queued), then queues them."""
        now = time.perf_counter()
        steps = []
        for stream, feeds in pairs:
            st = self._streams.get(stream)
            if st is None:
                raise StreamClosed(f"stream {stream!r} is not open")
            known = self._known_group(feeds)
            if known is None:
                feeds = self._check_feeds(feeds)
                steps.append(_Step(st, feeds, self._group(feeds), now, done))
            else:
                steps.append(_Step(st, known[1], known[0], now, done))
        with self._lock:
            if self._stopping:
                raise BatcherShutDown("the batcher is shut down")
            closed = [q.stream.id for q in steps if q.stream.closed]
            if closed:
                raise StreamClosed(f"stream {closed[0]!r} is not open")
            for q in steps:
                st = q.stream
                if st.active:
                    st.pending.append(q)
                else:
                    st.active = True
                    q.group.ready.append(q)
                    self._waiting += 1
            self._wake.notify()
        return steps

    def stats(self) -> StreamStats:
        return self._counters.snapshot(len(self._streams))

    def reset_stats(self) -> None:
        self._counters.reset()

    def shutdown(self, wait: bool = True) -> None:
        """Stops taking steps; the ones already submitted still run."""
        with self._lock:
            self._stopping = True
            self._wake.notify_all()
        if wait:
            for w in self._workers:
                if w is not threading.current_thread():
                    w.join()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.shutdown()

    # -- checking one step -------------------------------------------------------------------------
    def _known_group(self, feeds) -> tuple[_Group, dict[str, np.ndarray]] | None:
        """The fast path of a step like one seen before: same names, types and shapes, and (where
        the inputs without a batch axis decide the group) the same values; None: check it fully."""
        if type(feeds) is not dict or len(feeds) != len(self._needed):
            return None
        try:
            values = [feeds[n] for n in self._needed]
        except KeyError:
            return None
        for v, dtype in zip(values, self._needed_dtypes):
            if type(v) is not np.ndarray or v.dtype != dtype:
                return None
        entry = self._fast.get(tuple(v.shape for v in values))
        if entry is None:
            return None
        shared, groups = entry
        group = groups.get(tuple(values[k].tobytes() for k in shared))
        return None if group is None else (group, dict(zip(self._needed, values)))

    def _check_feeds(self, feeds) -> dict[str, np.ndarray]:
        if not isinstance(feeds, dict):
            raise StreamError(f"feeds: a dict of input name -> array, not {type(feeds).__name__}")
        if len(feeds) != len(self._needed) or any(n not in feeds for n in self._needed):
            carried = sorted(n for n in feeds if n in self.carry.values())
            if carried:
                raise StreamError(f"feeds give the carried input(s) {carried}: the batcher supplies them "
                                  "(open(initial=...) sets a stream's first state)")
            missing = [n for n in self._needed if n not in feeds]
            if missing:
                raise StreamError(f"feeds miss input(s) {missing} (a step takes {self._needed})")
            raise StreamError(f"feeds name unknown input(s) {sorted(set(feeds) - set(self._needed))} "
                              f"(a step takes {self._needed})")
        out = {}
        for name in self._needed:
            dtype, dims = self._inputs[name]
            value = feeds[name]
            if type(value) is not np.ndarray:
                value = np.asarray(value)
            if value.dtype != dtype:
                raise StreamError(f"input {name!r} is {value.dtype}, the model takes {np.dtype(dtype)}")
            if dims is not None:
                if value.ndim != len(dims) or any(d is not None and d != s for d, s in zip(dims, value.shape)):
                    raise StreamError(f"input {name!r} has shape {value.shape}, the model takes "
                                      f"[{', '.join('?' if d is None else str(d) for d in dims)}]")
            out[name] = value
        return out

    def _initial_states(self, initial: dict) -> dict[str, np.ndarray]:
        if not isinstance(initial, dict):
            raise StreamError(f"initial: a dict of carried input -> array, not {type(initial).__name__}")
        unknown = sorted(set(initial) - set(self.carry.values()))
        if unknown:
            raise StreamError(f"initial names {unknown}, which are not carried inputs ({sorted(self.carry.values())})")
        values = {}
        for name in self.carry.values():
            dtype, _ = self._inputs[name]
            if name in initial:
                v = np.array(initial[name], copy=True)
                if v.dtype != dtype:
                    raise StreamError(f"initial {name!r} is {v.dtype}, the model takes {np.dtype(dtype)}")
                shape = self._state_shapes[name]
                if shape is not None and v.shape != shape:
                    raise StreamError(f"initial {name!r} has shape {v.shape}, one stream's state is {shape}")
            else:
                shape = self._states.shapes[name] if self._states is not None else self._state_shapes[name]
                if shape is None:
                    raise StreamError(f"the shape of carried input {name!r} is not fixed by the model "
                                      f"({_dims_text(self._inputs[name][1])}): give it in open(initial=...)")
                v = np.zeros(shape, dtype)
            values[name] = v
        return values

    # -- which steps share a call ----------------------------------------------------------------
    def _group(self, feeds: dict[str, np.ndarray]) -> _Group:
        signature = tuple(feeds[n].shape for n in self._needed)
        kind = self._kind(feeds, signature)
        if kind is None:
            with self._analysis_lock:
                kind = self._kind(feeds, signature)
                if kind is None:
                    kind = self._analyze(feeds, signature)
                    self._layouts.setdefault(signature, []).append(kind)
        layout, shared = kind
        values = tuple(feeds[n].tobytes() for n in shared)
        group = self._groups.get((signature, *values))
        if group is None:
            with self._lock:
                group = self._groups.setdefault((signature, *values), _Group(layout, {n: feeds[n] for n in shared}))
        if len(self._layouts[signature]) == 1:  # one kind of step for these shapes: the fast path may take them
            entry = self._fast.setdefault(signature, ([self._needed.index(n) for n in shared], {}))
            entry[1][values] = group
        return group

    def _kind(self, feeds, signature) -> tuple[BatchLayout, dict[str, np.ndarray]] | None:
        """The analysis made for feeds of these shapes and these values of the inputs it found shared."""
        for layout, shared in self._layouts.get(signature, ()):
            if all(np.array_equal(feeds[n], v) for n, v in shared.items()):
                return layout, shared
        return None

    def _analyze(self, feeds: dict[str, np.ndarray], signature: tuple) -> tuple[BatchLayout, dict[str, np.ndarray]]:
        self._check_batch_size(feeds)
        shapes = self._states.shapes if self._states is not None else self._state_shapes
        full = dict(feeds)
        for name, shape in shapes.items():
            if shape is None:
                raise StreamError(f"the shape of carried input {name!r} is not known yet: open a stream with "
                                  "initial=... first")
            full[name] = np.zeros(shape, self._inputs[name][0])
        try:
            layout = batch_layout(self.model, full, carried=set(self.carry.values()))
        except TraceFailed as e:
            try:  # a bad feed, or a model the reference cannot run? onnxruntime says
                self.session.run(None, full)
            except Exception as run_error:  # noqa: BLE001 - onnxruntime's own message is the answer
                raise StreamError(f"these feeds fail when the model runs them alone: {clean_message(run_error)}") \
                    from None
            layout = BatchLayout({n: None for n in full}, {}, reasons=[f"the batch analysis could not run the "
                                                                       f"model: {e}"])
        if layout.batched:
            layout.reasons += self._check_carried(layout)
        if not layout.batched:
            message = (f"StreamBatcher: steps with feeds of shapes {dict(zip(self._needed, signature))} run one "
                       f"stream per call: {'; '.join(layout.reasons)}")
            self.fallback_reasons.append(message)
            warnings.warn(message, RuntimeWarning, stacklevel=4)
        # One stream per call shares nothing: any values of these shapes take that path.
        shared = [n for n in self._needed if layout.inputs.get(n) is None] if layout.batched else []
        return layout, {n: feeds[n].copy() for n in shared}

    def _check_carried(self, layout: BatchLayout) -> list[str]:
        reasons = []
        for out, inp in self.carry.items():
            a_out, a_in = layout.outputs.get(out), layout.inputs.get(inp)
            if a_out is None or a_in is None or a_out != a_in or layout.rows.get(out) != 1:
                reasons.append(f"carried output {out!r} has the batch on axis {a_out} "
                               f"({layout.rows.get(out)} rows a stream), input {inp!r} on axis {a_in}")
        return reasons

    def _check_batch_size(self, feeds: dict[str, np.ndarray]) -> None:
        """A feed that differs from a batched kind of step only on a batch axis: a batch of several."""
        for signature, kinds in list(self._layouts.items()):
            layout = kinds[0][0]
            if not layout.batched:
                continue
            for name, known in zip(self._needed, signature):
                axis, shape = layout.inputs.get(name), feeds[name].shape
                if axis is None or shape == known or len(shape) != len(known):
                    continue
                if all(s == k for j, (s, k) in enumerate(zip(shape, known)) if j != axis):
                    raise StreamError(f"input {name!r} has {shape[axis]} on its batch axis {axis} (shape {shape}): "
                                      "a step is one stream's feeds, batch 1")

    # -- the workers -----------------------------------------------------------------------------
    def _work(self) -> None:
        while True:
            with self._lock:
                batch = self._next_batch()
                if batch is None:
                    return
                if batch:
                    slots = [s.stream.slot for s in batch]
                    group = batch[0].group
                    states = self._states.gather(slots, group.layout.inputs) if self._device is None else None
                late, self._later = self._later, []
            for step in late:  # steps of streams closed while they waited
                step.done(step)
            if not batch:
                continue
            started = time.perf_counter()
            try:
                results = self._run(batch, group, slots, states)
            except Exception as e:  # noqa: BLE001 - a failed call: each step alone, so only bad ones fail
                results = self._run_alone(batch, e)
            self._finish(batch, results, started)

    def _next_batch(self) -> list[_Step] | None:
        """Called with the lock held: the next call's steps, waiting up to max_wait for company
        (an empty list: only steps of closed streams came up; None: shut down, nothing left)."""
        self._idle += 1
        while not self._waiting and not self._stopping:
            self._wake.wait()
        if not self._waiting:
            self._idle -= 1
            return None
        group = min((g for g in self._groups.values() if g.ready), key=lambda g: g.ready[0].submitted)
        limit = min(self.max_batch, group.limit or self.max_batch)
        deadline = group.ready[0].submitted + self.max_wait
        while (len(group.ready) < limit and self._waiting < len(self._streams) and not self._stopping
               and (left := deadline - time.perf_counter()) > 0):
            self._wake.wait(left)
        # Idle workers share what is waiting, so their calls overlap instead of one taking all.
        limit = min(limit, -(-len(group.ready) // self._idle))
        self._idle -= 1
        steps = []
        while group.ready and len(steps) < limit:
            step = group.ready.popleft()
            self._waiting -= 1
            if step.stream.closed:
                step.stream.active = False
                self._states.free(step.stream.slot)
                step.result = StreamClosed(f"stream {step.stream.id} was closed before this step ran")
                if isinstance(step.done, _Ticket):
                    step.done(step)
                else:
                    self._later.append(step)
                continue
            steps.append(step)
        return steps

    def _run(self, batch: list[_Step], group: _Group, slots: list[int], states) -> list:
        layout, n = group.layout, len(batch)
        feeds = {}
        for name in self._needed:
            axis = layout.inputs.get(name) if layout.batched else None
            if n == 1 or axis is None:
                feeds[name] = batch[0].feeds[name]
            else:
                feeds[name] = np.concatenate([s.feeds[name] for s in batch], axis=axis)
        return split_outputs(self._call(layout, slots, feeds, states), self.output_names, layout, n)

    def _call(self, layout: BatchLayout, slots: list[int], feeds: dict[str, np.ndarray], states=None) -> list:
        """One call of these streams (slots) on their stacked feeds; keeps their new states and
        returns the outputs as the call gives them. ``states``: already gathered (host)."""
        if self._device is not None:
            return self._device.call(layout, slots, feeds)
        if states is None:
            with self._lock:
                states = self._states.gather(slots, layout.inputs)
        outputs = self.session.run(None, {**feeds, **states})
        new_states = {inp: outputs[self.output_names.index(out)] for out, inp in self.carry.items()}
        self._check_states(new_states, len(slots), layout)
        with self._lock:
            self._states.scatter(slots, new_states, layout.inputs)
        return outputs

    def _check_states(self, new_states: dict[str, np.ndarray], n: int, layout: BatchLayout) -> None:
        shapes = self._states.shapes
        for name, value in new_states.items():
            axis = layout.inputs.get(name) if layout.batched and n > 1 else None
            want = shapes[name] if axis is None else shapes[name][:axis] + (n,) + shapes[name][axis + 1:]
            if value.shape != want:
                out = next(o for o, i in self.carry.items() if i == name)
                raise StreamError(f"carried output {out!r} came back with shape {value.shape}, input {name!r} "
                                  f"takes {want}")

    def _run_alone(self, batch: list[_Step], error: Exception) -> list:
        if len(batch) == 1:
            return [error]
        results = []
        for step in batch:
            try:
                results.append(self._run([step], step.group, [step.stream.slot], None)[0])
            except Exception as e:  # noqa: BLE001 - this step's own error
                results.append(e)
        return results

    def _finish(self, batch: list[_Step], results: list, started: float) -> None:
        finished = time.perf_counter()
        failed = 0
        for step, result in zip(batch, results):
            if isinstance(result, Exception):
                failed += 1
                result = _step_error(result)
            step.result = result
        self._counters.record([s.submitted for s in batch], started, finished, failed)
        with self._lock:
            self._release([step.stream for step in batch])
            futures = [q for q in batch if not isinstance(q.done, _Ticket)]
            for step in batch:
                if isinstance(step.done, _Ticket):
                    step.done(step)
        for step in futures:  # outside the lock: a Future runs its callbacks
            step.done(step)


def _settle(future: Future, result) -> None:
    if isinstance(result, BaseException):
        future.set_exception(result)
    else:
        future.set_result(result)


def _step_error(error: Exception) -> Exception:
    if isinstance(error, (StreamError, BatcherShutDown)):
        return error
    return StreamError(f"the step failed: {clean_message(error)}")


def _check_carry(model: onnx.ModelProto, carry) -> dict[str, str]:
    if not isinstance(carry, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in carry.items()):
        raise ValueError(f"carry: a dict of state output -> input it feeds, not {carry!r}")
    inits = {i.name for i in model.graph.initializer}
    inputs = [i.name for i in model.graph.input if i.name not in inits]
    outputs = [o.name for o in model.graph.output]
    for out, inp in carry.items():
        if out not in outputs:
            raise ValueError(f"carry: the model has no output {out!r} (outputs: {', '.join(outputs)})")
        if inp not in inputs:
            raise ValueError(f"carry: the model has no input {inp!r} (inputs: {', '.join(inputs)})")
    if len(set(carry.values())) != len(carry):
        raise ValueError(f"carry: two outputs feed the same input ({carry})")
    types_in = {i.name: i.type.tensor_type.elem_type for i in model.graph.input}
    types_out = {o.name: o.type.tensor_type.elem_type for o in model.graph.output}
    for out, inp in carry.items():
        if types_in[inp] and types_out[out] and types_in[inp] != types_out[out]:
            raise ValueError(f"carry: output {out!r} is {onnx.helper.tensor_dtype_to_np_dtype(types_out[out])}, "
                             f"input {inp!r} takes {onnx.helper.tensor_dtype_to_np_dtype(types_in[inp])}")
    return dict(carry)


def _tensor_types(infos, skip: set[str]) -> dict[str, tuple[np.dtype, list[int | None] | None]]:
    out = {}
    for vi in infos:
        if vi.name in skip:
            continue
        tt = vi.type.tensor_type
        if not vi.type.HasField("tensor_type"):
            raise ValueError(f"{vi.name!r} is not a tensor: StreamBatcher feeds tensors only")
        dims = [d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else None for d in tt.shape.dim] \
            if tt.HasField("shape") else None
        out[vi.name] = (np.dtype(onnx.helper.tensor_dtype_to_np_dtype(tt.elem_type)), dims)
    return out


def _state_shape(dtype, dims) -> tuple[int, ...] | None:
    """One stream's state shape from the model's declared dims: the one unknown dim is the batch (1)."""
    if dims is None or sum(d is None for d in dims) > 1:
        return None
    return tuple(1 if d is None else d for d in dims)


def _dims_text(dims) -> str:
    return "unknown rank" if dims is None else "[" + ", ".join("?" if d is None else str(d) for d in dims) + "]"
