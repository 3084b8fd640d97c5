"""The StreamBatcher in Python: the reference the native step path (batcher.py, custom_ops/streams)
is tested against. The same contract (docs/streams.md); slower: ~4-10 us of Python a step, a
worker thread a call.

Each stream steps as it would through its own ``InferenceSession.run(None, feeds)`` with batch 1:
``step`` takes those feeds without the carried inputs and returns that call's outputs, in output
order. Underneath, a worker thread collects the pending steps of different streams (at most one
per stream at a time, in order per stream), groups them by the shapes of their feeds and the values
of the inputs that carry no batch (silero-vad's ``sr``), stacks each group along each input's
batch axis (lstm_ort.graph.batch_axes finds them), runs one call and splits the outputs back. The states
live in one array per carried input (state.py) or, on CUDA, on the device
(device.py). The checks (feeds.py) and the analysis of kinds (kinds.py) are shared with the
native batcher.
"""

from __future__ import annotations

import asyncio
import collections
import itertools
import os
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass, field

import numpy as np
import onnx
import onnxruntime as ort

from lstm_ort.graph.batch_axes import BatchLayout, split_outputs
from lstm_ort.runtime.model_io import load_model
from lstm_ort.runtime.session import InferenceSession
from lstm_ort.serving.batch.batcher import normalize_providers
from lstm_ort.serving.streams.convs import convs_as_2d
from lstm_ort.serving.streams.errors import BatcherShutDown, StreamClosed, StreamError, step_error
from lstm_ort.serving.streams.feeds import StepInputs
from lstm_ort.serving.streams.kinds import Kinds, with_row_scales
from lstm_ort.serving.streams.options import check_batcher_options, step_pair, stream_id, stream_ids
from lstm_ort.serving.streams.state import HostSlots
from lstm_ort.serving.streams.stats import Counters, StreamStats

CUDA = "CUDAExecutionProvider"


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


class ReferenceStreamBatcher:
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
        check_batcher_options(max_batch, max_wait_ms, workers)
        # int8 nodes quantize each stream's rows with their own scales: batched, each stream's result
        # is, bit for bit, its own (kinds.with_row_scales).
        self.model = with_row_scales(load_model(os.fspath(model) if isinstance(model, os.PathLike) else model))
        self._in = StepInputs(self.model, carry)
        self.carry = self._in.carry
        self._inputs, self._needed, self._needed_dtypes = self._in.types, self._in.needed, self._in.needed_dtypes
        # feed shapes -> (indices of the inputs without a batch axis, their values' bytes -> group)
        self._fast: dict[tuple, tuple[list[int], dict[tuple, _Group]]] = {}
        self._state_shapes = self._in.state_shapes
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
        self._kinds = Kinds(self.model, self._in, lambda full: self.session.run(None, full))
        self._waiting = 0  # steps in some group's ready queue
        self._idle = 0  # workers looking for their next call
        self._later: list[_Step] = []  # steps settled under the lock whose Futures are set outside it
        self._stopping = False
        self._counters = Counters()
        self.fallback_reasons = self._kinds.fallback_reasons
        self._state_dtypes = self._in.state_dtypes
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
        values = self._in.initial_states(initial or {}, self._states.shapes if self._states is not None else None)
        with self._lock:
            if self._stopping:
                raise BatcherShutDown("the batcher is shut down")
            if self._states is None:
                shapes = {n: v.shape for n, v in values.items()}
                self._states = self._device.make_states(shapes) if self._device else HostSlots(shapes, self._state_dtypes)
            for n, v in values.items():
                if v.shape != self._states.shapes[n]:
                    raise StreamError(f"initial {n}: shape {v.shape}, the streams' states have "
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
            st = self._streams.pop(stream_id(stream), None)
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
            st = self._streams.get(stream_id(stream))
            if st is None:
                raise StreamClosed(f"stream {stream!r} is not open")
            return self._states.read(st.slot)

    def layout(self, feeds: dict[str, np.ndarray]) -> BatchLayout:
        """The batch layout of steps with one stream's ``feeds`` (analysed once per kind): which
        axis of each input and output carries the streams, as step_batch stacks them."""
        feeds = self._in.check(feeds)
        return self._group(feeds).layout

    @property
    def open_streams(self) -> int:
        return len(self._streams)

    @property
    def batched(self) -> bool | None:
        """Whether the kinds of steps seen so far run batched (None before the first step);
        ``fallback_reasons`` says why not where they do not."""
        return self._kinds.batched

    # -- steps -----------------------------------------------------------------------------------
    def submit(self, stream: int, feeds: dict[str, np.ndarray], *, run_here: bool = True) -> Future:
        """Queues one step of ``stream``; the Future gives its outputs (a list, in output order).
        Steps of one stream run in the order submitted, one at a time. Bad feeds raise here.
        ``run_here`` is accepted for StreamBatcher's signature: the reference always queues."""
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
        streams = stream_ids(streams)
        feeds = self._in.check_stacked(feeds)
        layout = self._kinds.stacked(feeds, len(streams), self._known_state_shapes()).layout
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
            raise step_error(e) from None
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

    async def astep(self, stream: int, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        return await asyncio.wrap_future(self.submit(stream, feeds))

    def _enqueue(self, pairs, done, ticket: _Ticket | None) -> list[_Step]:
        """Checks every step (raising before any is queued), then queues them."""
        now = time.perf_counter()
        steps = []
        for pair in pairs:
            stream, feeds = step_pair(pair)
            st = self._streams.get(stream_id(stream))
            if st is None:
                raise StreamClosed(f"stream {stream!r} is not open")
            known = self._known_group(feeds)
            if known is None:
                feeds = self._in.check(feeds)
                group = self._group(feeds)
            else:
                group, feeds = known
            # copied: the caller may reuse its buffers as soon as submit returns
            steps.append(_Step(st, {n: np.array(v, copy=True) for n, v in feeds.items()}, group, now, done))
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

    # -- which steps share a call ----------------------------------------------------------------
    def _group(self, feeds: dict[str, np.ndarray]) -> _Group:
        kind = self._kinds.of(feeds, self._known_state_shapes())
        values = kind.values(feeds)
        group = self._groups.get((kind.signature, *values))
        if group is None:
            with self._lock:
                group = self._groups.setdefault((kind.signature, *values), _Group(kind.layout, dict(kind.shared)))
        if self._kinds.only(kind.signature):  # one kind of step for these shapes: the fast path may take them
            entry = self._fast.setdefault(kind.signature, ([self._needed.index(n) for n in kind.shared], {}))
            entry[1][values] = group
        return group

    def _known_state_shapes(self) -> dict:
        return self._states.shapes if self._states is not None else self._state_shapes

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
                result = step_error(result)
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
