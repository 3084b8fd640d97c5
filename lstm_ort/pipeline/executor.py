"""Running a plan's items through the stages: buffers, events, copies, host threads.

Per boundary (stage k -> k+1) there are ``slots`` (2) buffers for Y on each side; item i uses
slot i % slots. Stage k waits on ``free`` (stage k+1 is done reading item i - slots) before it
writes a slot, and records ``ready`` once item i's Y is on stage k+1's device; stage k+1 waits on
``ready`` before its Run and records ``free`` after it. Waits are cudaStreamWaitEvent: no host
synchronisation inside the loop. The host only orders the *enqueueing*: a ``Signal`` lets the
thread that waits on an event block until the thread that records it has recorded it for that
item (a wait on an event not yet recorded would wait on nothing). A copy between devices runs on
a copy stream of the receiving device (a peer copy where the devices can access each other,
else through pinned host memory with one stream on each side), so it overlaps both stages' work.

Host threads: the calling thread enqueues every stage's items in ``host_order`` (or, with
``threads``, one thread per stage does); a feeder thread copies each item's inputs into pinned
memory ahead of it; a gather thread moves each item's outputs into the call's arrays as soon as
they reach the host, from the first item on, so neither the input slicing nor the output assembly
waits for the enqueueing or for the GPUs to finish. Large copies are cut over a few threads
(``_copy``): on the two-H200 host one thread moved 105 MB into a call's fresh output array in
32 ms (first-touch page faults), four in 11 ms; at B=256 the assembly of that Y, begun only
after the last item was enqueued, had outlasted the GPUs by 19 ms.
"""

from __future__ import annotations

import math
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np

from lstm_ort.pipeline.backend import DeviceBuffer, DeviceView, Event, Stream
from lstm_ort.pipeline.partition import C0, H0, STAGE_IN, STAGE_Y, YC, YH, PipelineModel, StageModel
from lstm_ort.pipeline.schedule import Item, Plan, host_order

# Host copies of at least two pieces of this size are cut over up to COPY_THREADS threads.
COPY_PIECE_BYTES = 2 << 20
COPY_THREADS = max(1, min(4, (os.cpu_count() or 1) // 2))


class Aborted(RuntimeError):
    pass


class Progress:
    """How far a host thread has got through the call's items (the last index it finished a step
    for); another thread blocks in ``wait_for`` until it has got that far, or the call aborts."""

    def __init__(self, cond: threading.Condition, flag: dict):
        self.cond, self.flag, self.done = cond, flag, -1

    def advance(self, index: int) -> None:
        with self.cond:
            self.done = index
            self.cond.notify_all()

    def wait_for(self, index: int) -> None:
        if self.done >= index and not self.flag["abort"]:
            return  # already there (``done`` only grows within a call): no lock, no wake-ups
        with self.cond:
            while self.done < index and not self.flag["abort"]:
                self.cond.wait(timeout=1.0)
            if self.flag["abort"]:
                raise Aborted("another stage failed")


class Signal(Progress):
    """An event plus the item it was last recorded for, so a waiting thread can block until the
    recording thread has enqueued that record (a wait on an event not yet recorded waits on nothing)."""

    def __init__(self, event: Event, cond: threading.Condition, flag: dict):
        super().__init__(cond, flag)
        self.event = event

    def record(self, backend, stream: Stream, gen: int) -> None:
        backend.record(self.event, stream)
        self.advance(gen)

    def wait(self, backend, stream: Stream, gen: int) -> None:
        self.wait_for(gen)
        if self.done != gen:
            raise RuntimeError(f"pipeline ordering broken: waited for item {gen}, event holds item {self.done}")
        backend.wait(stream, self.event)


@dataclass
class StageRuntime:
    model: StageModel
    device: int
    stream: Stream
    runner: object
    out_stream: Stream | None = None  # the last stage's outputs go to the host on this stream
    out_event: Event | None = None
    h: list = field(default_factory=list)  # 2 state buffers each (chunk c writes slot c % 2)
    c: list = field(default_factory=list)
    state_bytes: int = 0
    zeros: DeviceBuffer | None = None  # the initial state of layers whose states are zeros
    zero_bytes: int = 0
    init: dict = field(default_factory=dict)  # H0 / C0 -> a buffer per micro-batch (given initial states)


@dataclass
class Boundary:
    src: int
    dst: int
    mode: str  # "same" (one device), "peer", "staged" (through pinned host memory)
    send: list = field(default_factory=list)
    recv: list = field(default_factory=list)
    pinned: list = field(default_factory=list)
    ready: list = field(default_factory=list)
    free: list = field(default_factory=list)
    prod: list = field(default_factory=list)
    mid: list = field(default_factory=list)
    copy_stream: Stream | None = None  # on dst (peer, staged H2D)
    send_stream: Stream | None = None  # on src (staged D2H)
    slot_bytes: int = 0


@dataclass
class RunProfile:
    wall_ms: float
    stage_busy_ms: list
    copy_ms: list  # per boundary: total copy time
    copies: list  # per boundary: number of copies
    copy_bytes: list  # per boundary: bytes moved
    items: int
    stages: int
    # Per (stage, item): GPU start/end of its Run (ms from the call's start, one origin event per
    # stage recorded while every GPU is idle, so stages share a clock to a few µs), its copy to
    # the next stage, and the host thread's span: entering the task, calling Run, Run returning.
    timeline: list = field(default_factory=list)

    @property
    def gpipe_bubble(self) -> float:
        return (self.stages - 1) / (self.items + self.stages - 1)

    @property
    def measured_bubble(self) -> float:
        """1 - each stage's busy time / wall time, averaged over stages."""
        return 1.0 - float(np.mean(self.stage_busy_ms)) / self.wall_ms if self.wall_ms > 0 else 0.0

    def as_dict(self) -> dict:
        per_copy = [t / n if n else 0.0 for t, n in zip(self.copy_ms, self.copies)]
        gbps = [b / (t * 1e6) if t else None for b, t in zip(self.copy_bytes, self.copy_ms)]
        return {"wall_ms": self.wall_ms, "stage_busy_ms": self.stage_busy_ms, "measured_bubble": self.measured_bubble,
                    "gpipe_bubble": self.gpipe_bubble, "copy_ms_total": self.copy_ms, "copy_ms_per_item": per_copy,
                    "copy_bytes": self.copy_bytes, "copy_gb_per_s": gbps, "items": self.items, "stages": self.stages,
                    "timeline": self.timeline}

    def render(self, width: int = 100) -> str:
        """The timeline as text: a row per stage for the GPU (digits: item index mod 10) and one
        for its host thread's Run calls ('='), so gaps and serialisation show at a glance."""
        if not self.timeline or self.wall_ms <= 0:
            return ""
        scale = width / self.wall_ms
        rows = []
        for k in range(self.stages):
            gpu, host = [" "] * width, [" "] * width
            for e in (e for e in self.timeline if e["stage"] == k):
                a, b = int(e["gpu"][0] * scale), max(int(e["gpu"][0] * scale) + 1, int(e["gpu"][1] * scale))
                for x in range(max(a, 0), min(b, width)):
                    gpu[x] = str(e["item"] % 10)
                a, b = int(e["host"][1] * scale), max(int(e["host"][1] * scale) + 1, int(e["host"][2] * scale))
                for x in range(max(a, 0), min(b, width)):
                    host[x] = "="
            rows.append(f"stage {k} gpu  |{''.join(gpu)}|")
            rows.append(f"stage {k} host |{''.join(host)}|")
        return "\n".join(rows) + f"\n({self.wall_ms:.2f} ms across)"


class Executor:
    def __init__(self, backend, pm: PipelineModel, stages: list[StageRuntime], slots: int = 2, threads: bool = False,
                 transfer: str = "auto"):
        if transfer not in ("auto", "peer", "staged"):
            raise ValueError(f"transfer must be auto, peer or staged, got {transfer!r}")
        if slots < 2:
            raise ValueError("slots must be >= 2 (the host order needs a slot freed before it is rewritten)")
        self.backend, self.pm, self.stages, self.slots, self.threads = backend, pm, stages, slots, threads
        self.cond = threading.Condition()
        self.flag = {"abort": False}
        self.itemsize = np.dtype(pm.np_dtype).itemsize
        self.boundaries: list[Boundary] = []
        for k in range(len(stages) - 1):
            src, dst = stages[k].device, stages[k + 1].device
            if src == dst:
                mode = "same"
            elif transfer != "staged" and backend.can_access_peer(dst, src) and backend.can_access_peer(src, dst):
                backend.enable_peer(dst, src)
                backend.enable_peer(src, dst)
                mode = "peer"
            elif transfer == "peer":
                raise RuntimeError(f"devices {src} and {dst} cannot access each other's memory (transfer='peer')")
            else:
                mode = "staged"
            bd = Boundary(src, dst, mode)
            bd.ready = [Signal(backend.create_event(dst if mode != "same" else src), self.cond, self.flag)
                        for _ in range(slots)]
            bd.free = [Signal(backend.create_event(dst), self.cond, self.flag) for _ in range(slots)]
            if mode != "same":
                bd.prod = [backend.create_event(src) for _ in range(slots)]
                bd.copy_stream = backend.create_stream(dst, f"copy{k}->{k + 1}")
            if mode == "staged":
                bd.mid = [backend.create_event(src) for _ in range(slots)]
                bd.send_stream = backend.create_stream(src, f"d2h{k}")
            self.boundaries.append(bd)
        # The call's inputs reach stage 0's device on their own stream, from pinned memory, beside
        # stage 0's work; ``in_free[s]`` (recorded after the Run that read slot s) guards slot reuse.
        first = stages[0]
        self.in_stream = backend.create_stream(first.device, "inputs")
        self.in_ready = backend.create_event(first.device)
        self.in_free = [backend.create_event(first.device) for _ in range(slots)]
        self.in_bufs: dict[str, list] = {}
        self.in_bytes: dict[str, int] = {}
        last = stages[-1]
        last.out_stream = backend.create_stream(last.device, "outputs")
        last.out_event = backend.create_event(last.device)
        self.out_done: list[Event] = []  # per item: its outputs are on the host
        # The last stage writes its outputs into slots of its own (item i: slot i % slots), so every
        # item's Run sees the same few buffers (the op library's step graphs replay per set of
        # pointers; a buffer ORT allocates per item is a new key each time). Their shapes are
        # learnt from the first call, whose outputs ORT allocates: name -> (dims, None at the time
        # and batch axes; dtype).
        self.post_shapes: dict = {}
        self.out_slots: dict[str, list] = {}
        self.out_slot_bytes: dict[str, int] = {}
        self.workers: _Workers | None = None
        self.copiers: ThreadPoolExecutor | None = None  # made by the first large copy (feeder or gather)
        self.copiers_lock = threading.Lock()
        self.host_cache: dict = {}
        self.last_profile: RunProfile | None = None
        self.closed = False

    # -- buffers -----------------------------------------------------------------------------
    def _y_shape(self, rows: int, steps: int) -> tuple:
        pm = self.pm
        return (steps, pm.directions, rows, pm.hidden) if pm.layout == 0 else (rows, steps, pm.directions, pm.hidden)

    def _state_shape(self, k: int, rows: int) -> tuple:
        a, b = self.stages[k].model.layers
        n = (b - a) * self.pm.directions
        return (n, rows, self.pm.hidden) if self.pm.layout == 0 else (rows, n, self.pm.hidden)

    def _item_shape(self, name: str, shape: tuple, rows: int, steps: int) -> tuple:
        ax = self.pm.inputs[name]
        shape = list(shape)
        shape[ax.batch] = rows
        if ax.time is not None:
            shape[ax.time] = steps
        return tuple(shape)

    def _ensure_buffers(self, plan: Plan, feeds: dict) -> None:
        be = self.backend
        for name in self.pm.inputs:
            v = feeds[name]
            nbytes = int(np.prod(self._item_shape(name, v.shape, plan.micro_batch, plan.time_chunk))) * v.itemsize
            if self.in_bytes.get(name, 0) < nbytes:
                for buf in self.in_bufs.get(name, []):
                    be.free(buf)
                self.in_bufs[name] = [be.alloc(self.stages[0].device, nbytes, f"in:{name}.{s}")
                                      for s in range(self.slots)]
                self.in_bytes[name] = nbytes
        y_bytes = int(np.prod(self._y_shape(plan.micro_batch, plan.time_chunk))) * self.itemsize
        for k, bd in enumerate(self.boundaries):
            if bd.slot_bytes >= y_bytes:
                continue
            for buf in bd.send + [r for r in bd.recv if r not in bd.send]:
                be.free(buf)
            for arr in bd.pinned:
                be.free_host(arr)
            bd.send = [be.alloc(bd.src, y_bytes, f"y{k}.send{s}") for s in range(self.slots)]
            bd.recv = bd.send if bd.mode == "same" else [be.alloc(bd.dst, y_bytes, f"y{k}.recv{s}")
                                                          for s in range(self.slots)]
            bd.pinned = [be.alloc_host((y_bytes,), np.uint8) for _ in range(self.slots)] if bd.mode == "staged" else []
            bd.slot_bytes = y_bytes
        for k, st in enumerate(self.stages):
            nbytes = int(np.prod(self._state_shape(k, plan.micro_batch))) * self.itemsize
            if st.state_bytes >= nbytes:
                continue
            for buf in st.h + st.c:
                be.free(buf)
            st.h = [be.alloc(st.device, nbytes, f"h{k}.{s}") for s in range(2)]
            st.c = [be.alloc(st.device, nbytes, f"c{k}.{s}") for s in range(2)]
            st.state_bytes = nbytes
        self._ensure_out_slots(plan)

    def _post_shape(self, name: str, rows: int, steps: int) -> tuple:
        dims, _ = self.post_shapes[name]
        ax = next(o.axes for o in self.pm.outputs if o.name == name)
        return tuple(rows if k == ax.batch else steps if k == ax.time else d for k, d in enumerate(dims))

    def _ensure_out_slots(self, plan: Plan) -> None:
        """Output slots on the last stage for every output whose shape is known, sized for the
        plan's largest item."""
        be, dev = self.backend, self.stages[-1].device
        for name, (_, dtype) in self.post_shapes.items():
            nbytes = math.prod(self._post_shape(name, plan.micro_batch, plan.time_chunk)) * np.dtype(dtype).itemsize
            if self.out_slot_bytes.get(name, 0) >= nbytes:
                continue
            for buf in self.out_slots.get(name, []):
                be.free(buf)
            self.out_slots[name] = [be.alloc(dev, nbytes, f"out:{name}.{s}") for s in range(self.slots)]
            self.out_slot_bytes[name] = nbytes

    def _host(self, key, shape, dtype, grow: bool = False) -> np.ndarray:
        """Pinned host arrays, kept from call to call (``grow``: 1-D, reused while large enough)."""
        arr = self.host_cache.get(key)
        if grow and arr is not None and arr.dtype == np.dtype(dtype) and arr.shape[0] >= shape[0]:
            return arr
        if arr is None or arr.shape != tuple(shape) or arr.dtype != np.dtype(dtype):
            if arr is not None:
                self.backend.free_host(arr)
            arr = self.backend.alloc_host(tuple(shape), dtype)
            self.host_cache[key] = arr
        return arr

    def _workers(self) -> _Workers:
        # One thread per stage for the session's life: the op library keeps a cuBLAS handle per
        # (device, thread) and ORT a context per thread, so threads are not made per call.
        if self.workers is None:
            self.workers = _Workers([st.device for st in self.stages], self.backend)
        return self.workers

    def _copy(self, dst: np.ndarray, src: np.ndarray) -> None:
        """np.copyto, cut along the first axis over a few threads when large (numpy copies without
        the GIL; one thread's copy is bound by its page faults and memory stalls, not by the bus)."""
        n = min(COPY_THREADS, dst.shape[0] if dst.ndim else 1, dst.nbytes // COPY_PIECE_BYTES)
        if n <= 1:
            np.copyto(dst, src)
            return
        with self.copiers_lock:
            if self.copiers is None:
                self.copiers = ThreadPoolExecutor(COPY_THREADS, thread_name_prefix="lstm-ort-copy")
        m = dst.shape[0]
        pieces = [slice(m * j // n, m * (j + 1) // n) for j in range(n)]
        for f in [self.copiers.submit(np.copyto, dst[p], src[p]) for p in pieces]:
            f.result()

    def close(self) -> None:
        """Waits for the streams, then frees the buffers and pinned memory, destroys the events and
        streams, and lets the stage sessions go (they compute on the stage streams). Once only."""
        if self.closed:
            return
        be = self.backend
        if self.workers is not None:
            self.workers.stop()
            self.workers = None
        if self.copiers is not None:
            self.copiers.shutdown()
            self.copiers = None
        streams = [st.stream for st in self.stages] + [self.in_stream]
        streams += [s for st in self.stages for s in (st.out_stream,) if s is not None]
        streams += [s for bd in self.boundaries for s in (bd.copy_stream, bd.send_stream) if s is not None]
        for s in streams:
            be.synchronize(s)
        for bufs in self.in_bufs.values():
            for buf in bufs:
                be.free(buf)
        self.in_bufs, self.in_bytes = {}, {}
        events = [self.in_ready, *self.in_free, *self.out_done]
        for bd in self.boundaries:
            for buf in bd.send + [r for r in bd.recv if r not in bd.send]:
                be.free(buf)
            for arr in bd.pinned:
                be.free_host(arr)
            bd.send, bd.recv, bd.pinned, bd.slot_bytes = [], [], [], 0
            events += [sig.event for sig in bd.ready + bd.free] + bd.prod + bd.mid
        for st in self.stages:
            for buf in st.h + st.c + _init_buffers(st):
                be.free(buf)
            st.h, st.c, st.state_bytes, st.zeros, st.zero_bytes, st.init = [], [], 0, None, 0, {}
            if st.out_event is not None:
                events.append(st.out_event)
            st.runner = None
        for bufs in self.out_slots.values():
            for buf in bufs:
                be.free(buf)
        self.out_slots, self.out_slot_bytes = {}, {}
        for arr in self.host_cache.values():
            be.free_host(arr)
        self.host_cache.clear()
        for ev in events:
            be.destroy_event(ev)
        for s in streams:
            be.destroy_stream(s)
        self.out_done = []
        self.closed = True

    # -- one call ----------------------------------------------------------------------------
    def run(self, plan: Plan, feeds: dict, want: list[str], profile: bool = False) -> dict:
        """The call's outputs: each wanted "post" output by name, and the stack's final states
        (all its rows, as Y_h/Y_c are laid out) under ("state", "h") / ("state", "c") where
        ``want`` holds those keys."""
        if self.closed:
            raise RuntimeError("this pipeline session is closed")
        pm, be = self.pm, self.backend
        K = len(self.stages)
        items = plan.items()
        self._ensure_buffers(plan, feeds)
        self.flag["abort"] = False
        for bd in self.boundaries:
            for sig in bd.ready + bd.free:
                sig.done = -1
        want_post = [o for o in pm.outputs if o.kind == "post" and o.name in want]
        want_states = {"Y_h" if key[1] == "h" else "Y_c" for key in want if isinstance(key, tuple)}
        if plan.num_chunks > 1:
            for o in want_post:
                if o.axes.time is None:
                    raise RuntimeError(f"output {o.name!r} has no time axis to join chunks along")
        lens_parts = {}
        if pm.sequence_lens:
            for j in range(plan.num_micro_batches):
                b0, b1 = plan.micro_batch_rows(j)
                lens_parts[j] = np.ascontiguousarray(feeds[pm.sequence_lens][b0:b1])
        initial = self._upload_initial_states(plan, feeds)
        feeder = _Feeder(self, items, feeds)
        timing, host_spans = {}, {}
        if profile:
            for k, st in enumerate(self.stages):
                timing[("origin", k)] = be.create_event(st.device, True)
                for it in items:
                    timing[("run", k, it.index)] = (be.create_event(st.device, True), be.create_event(st.device, True))
            for k, bd in enumerate(self.boundaries):
                if bd.mode != "same":
                    for it in items:
                        timing[("copy", k, it.index)] = (be.create_event(bd.dst, True), be.create_event(bd.dst, True))
        last = self.stages[-1]
        while len(self.out_done) < len(items):
            self.out_done.append(be.create_event(last.device))
        out_progress = Progress(self.cond, self.flag)
        results: dict = {}
        keep: list = []
        lock = threading.Lock()

        def task(k: int, it: Item) -> None:
            entered = time.perf_counter()
            st = self.stages[k]
            s = it.index % self.slots
            rows, steps = it.rows[1] - it.rows[0], it.steps[1] - it.steps[0]
            inputs, outputs = {}, {}
            if k == 0:
                feeder.wait_staged(it.index)
                for name, region in feeder.regions(it).items():
                    if it.index >= self.slots:
                        be.wait(self.in_stream, self.in_free[s])
                    dev = DeviceView(self.in_bufs[name][s], region.shape, region.dtype)
                    be.copy_h2d(dev, region, self.in_stream)
                    inputs[name] = dev
                be.record(self.in_ready, self.in_stream)
                be.wait(st.stream, self.in_ready)
            else:
                bd = self.boundaries[k - 1]
                bd.ready[s].wait(be, st.stream, it.index)
                inputs[STAGE_IN] = DeviceView(bd.recv[s], self._y_shape(rows, steps), pm.np_dtype)
            sshape = self._state_shape(k, rows)
            if it.first_chunk:
                inputs[H0] = initial[(k, it.micro_batch, H0)]
                inputs[C0] = initial[(k, it.micro_batch, C0)]
            else:
                prev = (it.chunk - 1) % 2
                inputs[H0] = DeviceView(st.h[prev], sshape, pm.np_dtype)
                inputs[C0] = DeviceView(st.c[prev], sshape, pm.np_dtype)
            if pm.sequence_lens:
                inputs[pm.sequence_lens] = lens_parts[it.micro_batch]
            if k < K - 1:
                bd = self.boundaries[k]
                if it.index >= self.slots:
                    bd.free[s].wait(be, st.stream, it.index - self.slots)
                outputs[STAGE_Y] = DeviceView(bd.send[s], self._y_shape(rows, steps), pm.np_dtype)
            else:
                slotted = False
                for o in pm.outputs:
                    if o.kind == "post":
                        bufs = self.out_slots.get(o.name)
                        if bufs:
                            shape = self._post_shape(o.name, rows, steps)
                            outputs[o.name] = DeviceView(bufs[s], shape, self.post_shapes[o.name][1])
                            slotted = True
                        else:
                            outputs[o.name] = None  # ORT allocates it (the first call: its shape is learnt)
                if slotted and it.index >= self.slots:
                    be.wait(st.stream, self.out_done[it.index - self.slots])  # slot s copied to the host
            cur = it.chunk % 2
            outputs[YH] = DeviceView(st.h[cur], sshape, pm.np_dtype)
            outputs[YC] = DeviceView(st.c[cur], sshape, pm.np_dtype)
            st.runner.current = {"stage": k, "item": it.index, "micro_batch": it.micro_batch, "chunk": it.chunk,
                                 "rows": rows, "steps": steps, "slot": s}
            if profile:
                be.record(timing[("run", k, it.index)][0], st.stream)
            called = time.perf_counter()
            allocated = st.runner.run(inputs, outputs)
            if profile:
                host_spans[(k, it.index)] = (entered, called, time.perf_counter())
                be.record(timing[("run", k, it.index)][1], st.stream)
            if k == 0:
                be.record(self.in_free[s], st.stream)
            else:
                self.boundaries[k - 1].free[s].record(be, st.stream, it.index)
            if k < K - 1:
                self._send(k, s, it, outputs[STAGE_Y], timing.get(("copy", k, it.index)))
            if it.chunk == plan.num_chunks - 1:
                for kind, bufs in (("Y_h", st.h), ("Y_c", st.c)):
                    if kind in want_states:
                        host = self._host((kind, k, it.micro_batch), sshape, pm.np_dtype)
                        be.copy_d2h(host, DeviceView(bufs[cur], sshape, pm.np_dtype), st.stream)
                        with lock:
                            results[(kind, k, it.micro_batch)] = host
            if k == K - 1:
                # The outputs (in their slot, or allocated by ORT for this call only and kept
                # referenced until its end) go to the host beside the next item's work, and the
                # gather thread moves each into the call's outputs once ``out_done`` says it arrived.
                for name, view in allocated.items():
                    if name not in self.post_shapes:
                        ax = next(o.axes for o in pm.outputs if o.name == name)
                        self.post_shapes[name] = ([None if a in (ax.time, ax.batch) else d
                                                   for a, d in enumerate(view.shape)], view.dtype)
                be.record(st.out_event, st.stream)
                be.wait(st.out_stream, st.out_event)
                parts = {}
                for o in want_post:
                    view = outputs[o.name] if outputs[o.name] is not None else allocated[o.name]
                    host = self._host(("post", o.name, it.index), view.shape, view.dtype)
                    be.copy_d2h(host, view, st.out_stream)
                    parts[o.name] = host
                    if o.name in allocated:
                        keep.append(view)
                be.record(self.out_done[it.index], st.out_stream)
                with lock:
                    results[("post", it.index)] = parts
                out_progress.advance(it.index)

        start = time.perf_counter()
        if profile:
            for k, st in enumerate(self.stages):
                be.record(timing[("origin", k)], st.stream)
        errors: list = []

        def guarded(fn):
            try:
                fn()
            except BaseException as e:  # noqa: BLE001 - handed to the caller
                with self.cond:
                    errors.append(e)
                    self.flag["abort"] = True
                    self.cond.notify_all()

        feeder.start(guarded)
        outputs: dict = {}
        gather = threading.Thread(target=guarded, daemon=True, name="lstm-ort-gather",
                                  args=(lambda: self._gather(plan, items, want_post, results, out_progress, outputs,
                                                             lock),))
        gather.start()
        if self.threads and K > 1:
            def loop(k):
                for it in items:
                    task(k, it)
            dones = self._workers().submit([lambda k=k: guarded(lambda: loop(k)) for k in range(K)])
        else:
            dones = []
            guarded(lambda: [task(k, items[i]) for k, i in host_order(len(items), K)])
        for done in dones:
            done.wait()
        gather.join()
        feeder.join()
        be.synchronize(self.in_stream)
        for st in self.stages:
            be.synchronize(st.stream)
            if st.out_stream is not None:
                be.synchronize(st.out_stream)
        for bd in self.boundaries:
            for s in (bd.copy_stream, bd.send_stream):
                if s is not None:
                    be.synchronize(s)
        wall_ms = (time.perf_counter() - start) * 1e3
        if not errors:
            self._ensure_out_slots(plan)  # shapes learnt this call: the next one writes into slots
        if errors:
            real = [e for e in errors if not isinstance(e, Aborted)]
            raise (real or errors)[0]
        if profile:
            self.last_profile = self._profile(items, timing, host_spans, start, wall_ms)
        for pair in timing.values():
            for ev in pair if isinstance(pair, tuple) else (pair,):
                be.destroy_event(ev)
        for kind in sorted(want_states):
            per_mb = [np.concatenate([results[(kind, k, j)] for k in range(K)], axis=pm.state_axis)
                      for j in range(plan.num_micro_batches)]
            outputs[("state", "h" if kind == "Y_h" else "c")] = np.concatenate(per_mb, axis=pm.state_batch_axis)
        return outputs

    def _upload_initial_states(self, plan: Plan, feeds: dict) -> dict:
        """(stage, micro-batch, H0/C0) -> a device view of that micro-batch's initial state for
        the stage's layers. Rows that are zeros throughout a stage (``pm.states``) read the
        stage's zero buffer, set once when allocated. Others are assembled row by row from where
        they come from (a graph input's rows, a [B, H] input, a value the host computed) straight
        into pinned memory, one micro-batch at a time, and uploaded on the stage's stream ahead
        of its first item, so ORT never copies a host input inside a stage's Run."""
        pm, be = self.pm, self.backend
        plan_rows = {H0: pm.states.h, C0: pm.states.c}
        D = pm.directions
        views = {}
        for k, st in enumerate(self.stages):
            full = self._state_shape(k, plan.micro_batch)
            nbytes = int(np.prod(full)) * self.itemsize
            if st.zero_bytes < nbytes:
                if st.zeros is not None:
                    be.free(st.zeros)
                st.zeros = be.alloc(st.device, nbytes, f"zeros{k}")
                be.memset(st.zeros, 0, st.stream)
                st.zero_bytes = nbytes
            a, b = st.model.layers
            for key, rows in plan_rows.items():
                rows = rows[a * D:b * D]
                bufs = st.init.setdefault(key, [])
                for j in range(plan.num_micro_batches):
                    b0, b1 = plan.micro_batch_rows(j)
                    shape = self._state_shape(k, b1 - b0)
                    if all(r[0] is None for r in rows):
                        views[(k, j, key)] = DeviceView(st.zeros, shape, pm.np_dtype)
                        continue
                    while len(bufs) <= j:
                        bufs.append(None)
                    if bufs[j] is None or bufs[j].nbytes < nbytes:
                        if bufs[j] is not None:
                            be.free(bufs[j])
                        bufs[j] = be.alloc(st.device, nbytes, f"{key}{k}.{j}")
                    host = self._host(("init", k, j, key), shape, pm.np_dtype)
                    self._fill_state(host, rows, feeds, b0, b1)
                    view = DeviceView(bufs[j], shape, pm.np_dtype)
                    be.copy_h2d(view, host, st.stream)
                    views[(k, j, key)] = view
        return views

    def _fill_state(self, host: np.ndarray, rows: list, feeds: dict, b0: int, b1: int) -> None:
        """host[i] (along the state axis) = batch rows [b0, b1) of row i's source."""
        axis = self.pm.state_axis
        for i, (source, row) in enumerate(rows):
            dst = host[i] if axis == 0 else host[:, i]
            if source is None:
                dst[...] = 0
            elif row is None:  # a [B, H] source, unsqueezed at the state axis
                dst[...] = feeds[source][b0:b1]
            else:
                dst[...] = feeds[source][row, b0:b1] if axis == 0 else feeds[source][b0:b1, row]

    def _gather(self, plan: Plan, items: list[Item], want_post: list, results: dict, progress: Progress,
                outputs: dict, lock) -> None:
        """The gather thread moves each item's outputs into the call's arrays as soon as their copy
        to the host is done, while the GPUs work on later items: only the last item's move is left
        after the GPUs finish."""
        be = self.backend
        for it in items:
            progress.wait_for(it.index)
            be.event_synchronize(self.out_done[it.index])
            with lock:
                parts = results.pop(("post", it.index))
            for o in want_post:
                part = parts[o.name]
                if o.name not in outputs:
                    shape = list(part.shape)
                    shape[o.axes.batch] = plan.batch
                    if o.axes.time is not None:
                        shape[o.axes.time] = plan.steps
                    outputs[o.name] = np.empty(shape, part.dtype)
                self._copy(outputs[o.name][_item_index(part.ndim, o.axes, it)], part)

    def _profile(self, items: list[Item], timing: dict, host_spans: dict, start: float, wall_ms: float) -> RunProfile:
        be, K = self.backend, len(self.stages)
        busy = [sum(be.elapsed_ms(*timing[("run", k, it.index)]) for it in items) for k in range(K)]
        copy_ms, copies, nbytes = [], [], []
        for k, bd in enumerate(self.boundaries):
            if bd.mode == "same":
                copy_ms.append(0.0), copies.append(0), nbytes.append(0)
                continue
            copy_ms.append(sum(be.elapsed_ms(*timing[("copy", k, it.index)]) for it in items))
            copies.append(len(items))
            nbytes.append(sum(int(np.prod(self._y_shape(it.rows[1] - it.rows[0], it.steps[1] - it.steps[0])))
                              * self.itemsize for it in items))
        timeline = []
        for k in range(K):
            origin = timing[("origin", k)]
            for it in items:
                run = timing[("run", k, it.index)]
                entry = {"stage": k, "item": it.index,
                         "gpu": [be.elapsed_ms(origin, run[0]), be.elapsed_ms(origin, run[1])],
                         "host": [(t - start) * 1e3 for t in host_spans[(k, it.index)]]}
                copy = timing.get(("copy", k, it.index))
                if copy:  # on the receiving device: stage k+1's clock
                    nxt = timing[("origin", k + 1)]
                    entry["copy"] = [be.elapsed_ms(nxt, copy[0]), be.elapsed_ms(nxt, copy[1])]
                timeline.append(entry)
        return RunProfile(wall_ms, busy, copy_ms, copies, nbytes, len(items), K, timeline)

    def _send(self, k: int, s: int, it: Item, y: DeviceView, timing) -> None:
        """Item ``it``'s Y from stage k's slot s to stage k+1's, then ``ready``."""
        be, bd = self.backend, self.boundaries[k]
        src_stream = self.stages[k].stream
        if bd.mode == "same":
            bd.ready[s].record(be, src_stream, it.index)
            return
        be.record(bd.prod[s], src_stream)
        dst = DeviceView(bd.recv[s], y.shape, y.dtype)
        if bd.mode == "peer":
            be.wait(bd.copy_stream, bd.prod[s])
            if timing:
                be.record(timing[0], bd.copy_stream)
            be.copy_peer(dst, y, bd.copy_stream)
        else:
            be.wait(bd.send_stream, bd.prod[s])
            be.copy_d2h(bd.pinned[s], y, bd.send_stream)
            be.record(bd.mid[s], bd.send_stream)
            be.wait(bd.copy_stream, bd.mid[s])
            if timing:
                be.record(timing[0], bd.copy_stream)
            be.copy_h2d(dst, bd.pinned[s], bd.copy_stream)
        if timing:
            be.record(timing[1], bd.copy_stream)
        bd.ready[s].record(be, bd.copy_stream, it.index)

class _Workers:
    """One long-lived thread per stage, its device current; ``submit`` runs one job on each."""

    def __init__(self, devices: list[int], backend):
        import queue

        self.queues = [queue.Queue() for _ in devices]
        self.threads = []
        for k, dev in enumerate(devices):
            t = threading.Thread(target=self._loop, args=(self.queues[k], dev, backend), daemon=True,
                                 name=f"lstm-ort-stage{k}")
            t.start()
            self.threads.append(t)

    @staticmethod
    def _loop(q, device: int, backend) -> None:
        try:
            backend.set_device(device)
        except Exception:  # noqa: BLE001 - reported by the first job instead
            pass
        while True:
            job = q.get()
            if job is None:
                return
            fn, done = job
            try:
                fn()
            finally:
                done.set()

    def submit(self, jobs: list) -> list[threading.Event]:
        """Hands job k to thread k; each returned event is set when its job is done."""
        dones = []
        for q, fn in zip(self.queues, jobs):
            done = threading.Event()
            q.put((fn, done))
            dones.append(done)
        return dones

    def stop(self) -> None:
        for q in self.queues:
            q.put(None)


def stage_buffers_in_use(executor: Executor) -> list[DeviceBuffer]:
    """Every device buffer the executor holds (tests count them)."""
    bufs = []
    for bd in executor.boundaries:
        bufs += bd.send + [r for r in bd.recv if r not in bd.send]
    for st in executor.stages:
        bufs += st.h + st.c + _init_buffers(st)
    for slots in list(executor.in_bufs.values()) + list(executor.out_slots.values()):
        bufs += slots
    return bufs


def _item_index(ndim: int, axes, it: Item) -> tuple:
    """The part of a call-wide array (batch and time on ``axes``) that item ``it`` covers."""
    index = [slice(None)] * ndim
    index[axes.batch] = slice(*it.rows)
    if axes.time is not None:
        index[axes.time] = slice(*it.steps)
    return tuple(index)


def _init_buffers(st: StageRuntime) -> list[DeviceBuffer]:
    return ([st.zeros] if st.zeros is not None else []) + [b for bufs in st.init.values() for b in bufs if b is not None]


class _Feeder:
    """Copies each item's slice of the call's inputs into pinned memory (one region per item, kept
    from call to call), in item order, on a thread of its own: the thread enqueueing stage 0 only
    waits for an item's region and sends it, and numpy's copy runs without the GIL."""

    def __init__(self, ex: Executor, items: list[Item], feeds: dict):
        self.ex, self.items, self.feeds = ex, items, feeds
        self.progress = Progress(ex.cond, ex.flag)
        self.thread: threading.Thread | None = None
        self.staging, self.offsets = {}, {}
        for name in ex.pm.inputs:
            v = feeds[name]
            self.staging[name] = ex._host(("in", name), (v.nbytes,), np.uint8, grow=True)
            off = 0
            for it in items:
                self.offsets[(name, it.index)] = off
                off += math.prod(self._shape(name, it)) * v.itemsize

    def _shape(self, name: str, it: Item) -> tuple:
        return self.ex._item_shape(name, self.feeds[name].shape, it.rows[1] - it.rows[0], it.steps[1] - it.steps[0])

    def regions(self, it: Item) -> dict[str, np.ndarray]:
        out = {}
        for name in self.ex.pm.inputs:
            v, shape = self.feeds[name], self._shape(name, it)
            off = self.offsets[(name, it.index)]
            nbytes = math.prod(shape) * v.itemsize
            out[name] = self.staging[name][off:off + nbytes].view(v.dtype).reshape(shape)
        return out

    def _fill(self) -> None:
        for it in self.items:
            if self.ex.flag["abort"]:
                return
            for name, region in self.regions(it).items():
                v = self.feeds[name]
                self.ex._copy(region, v[_item_index(v.ndim, self.ex.pm.inputs[name], it)])
            self.progress.advance(it.index)

    def start(self, guarded) -> None:
        self.thread = threading.Thread(target=guarded, args=(self._fill,), daemon=True, name="lstm-ort-feeder")
        self.thread.start()

    def wait_staged(self, index: int) -> None:
        self.progress.wait_for(index)

    def join(self) -> None:
        if self.thread is not None:
            self.thread.join()
