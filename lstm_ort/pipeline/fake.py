"""A device layer on the CPU with the CudaBackend's interface, for tests and dry runs.

Stages run as lstm_ort sessions on the CPU EP, at once, in the calling thread; "device" buffers
are numpy arrays. Every call is logged, and the stream semantics are checked as a GPU would
apply them: each stream carries a vector clock (an event takes a snapshot when recorded, a wait
merges it), so a stage reading a buffer whose producer's work is not ordered before it (no
event recorded after the write and waited on), or a write racing an earlier read, raises
``Hazard``. Each stream also keeps a simulated clock (an operation takes ``cost(...)`` units,
a wait moves the stream to the event's time), giving the timeline a GPU would run: tests read the
GPipe and wavefront orders from it.
"""

from __future__ import annotations

import itertools
import threading
from dataclasses import dataclass, field

import numpy as np

from lstm_ort.pipeline.backend import DeviceBuffer, DeviceView, Event, Stream


class Hazard(AssertionError):
    """An ordering a GPU would not guarantee."""


@dataclass
class Op:
    kind: str  # "run", "single", "copy_peer", "copy_d2h", "copy_h2d", "memset", "record", "wait", "alloc", "sync", "event_sync"
    stream: str | None
    start: float = 0.0
    end: float = 0.0
    meta: dict = field(default_factory=dict)


class FakeBackend:
    def __init__(self, devices: int = 2, peer: bool = True, cost=None, copy_cost: float = 0.05, sessions_cpu=True):
        self.devices, self.peer = devices, peer
        self.cost = cost or (lambda stage, rows, steps: float(stage.layers[1] - stage.layers[0]))
        self.copy_cost = copy_cost
        self.log: list[Op] = []
        self.lock = threading.RLock()
        self._ids = itertools.count()
        self._vc: dict[int, dict[int, int]] = {}  # stream id -> vector clock
        self._time: dict[int, float] = {}
        self._writes: dict[int, tuple[int, int]] = {}  # buffer id -> (stream id, clock)
        self._reads: dict[int, list[tuple[int, int]]] = {}
        self._streams: dict[int, Stream] = {}
        self.allocations = 0
        self.live_buffers: set[int] = set()  # counted ones, allocated and not freed, for tests of close()
        self.live_events: set[int] = set()
        self.live_streams: set[int] = set()
        # What the host has seen complete (cudaStreamSynchronize): work it enqueues later is ordered after it.
        self._host_vc: dict[int, int] = {}
        self._host_time = 0.0

    # -- devices -----------------------------------------------------------------------------
    def set_device(self, device: int) -> None:
        assert 0 <= device < self.devices

    def device_count(self) -> int:
        return self.devices

    def device_name(self, device: int) -> str:
        return "fake"

    def can_access_peer(self, device: int, peer: int) -> bool:
        return self.peer

    def enable_peer(self, device: int, peer: int) -> None:
        assert self.peer

    # -- streams, events -------------------------------------------------------------------
    def create_stream(self, device: int, name: str = "") -> Stream:
        with self.lock:
            sid = next(self._ids)
            s = Stream(sid, device, name or f"s{sid}")
            self._vc[sid], self._time[sid], self._streams[sid] = {sid: 0}, 0.0, s
            self.live_streams.add(sid)
            return s

    def destroy_stream(self, stream: Stream) -> None:
        with self.lock:
            self.live_streams.remove(stream.handle)

    def stream_handle(self, stream: Stream) -> int:
        return stream.handle

    def create_event(self, device: int, timing: bool = False) -> Event:
        e = Event({"vc": None, "time": 0.0, "id": next(self._ids)}, device, timing)
        with self.lock:
            self.live_events.add(e.handle["id"])
        return e

    def destroy_event(self, event: Event) -> None:
        with self.lock:
            self.live_events.remove(event.handle["id"])

    def record(self, event: Event, stream: Stream) -> None:
        with self.lock:
            assert event.device == stream.device, "an event is recorded on a stream of its own device"
            self._after_host(stream.handle)
            event.handle["vc"] = dict(self._vc[stream.handle])
            event.handle["time"] = self._time[stream.handle]
            self.log.append(Op("record", stream.name, self._time[stream.handle], self._time[stream.handle],
                               {"event": event.handle["id"]}))

    def wait(self, stream: Stream, event: Event) -> None:
        with self.lock:
            if event.handle["vc"] is None:
                raise Hazard(f"{stream.name} waits on event {event.handle['id']}, never recorded")
            self._after_host(stream.handle)
            vc = self._vc[stream.handle]
            for k, v in event.handle["vc"].items():
                vc[k] = max(vc.get(k, 0), v)
            self._time[stream.handle] = max(self._time[stream.handle], event.handle["time"])
            self.log.append(Op("wait", stream.name, self._time[stream.handle], self._time[stream.handle],
                               {"event": event.handle["id"]}))

    def synchronize(self, stream: Stream) -> None:
        with self.lock:
            for k, v in self._vc[stream.handle].items():
                self._host_vc[k] = max(self._host_vc.get(k, 0), v)
            self._host_time = max(self._host_time, self._time[stream.handle])
            self.log.append(Op("sync", stream.name))

    def _after_host(self, sid: int) -> None:
        vc = self._vc[sid]
        for k, v in self._host_vc.items():
            vc[k] = max(vc.get(k, 0), v)
        self._time[sid] = max(self._time[sid], self._host_time)

    def event_synchronize(self, event: Event) -> None:
        # Only the thread that waits is ordered after the event; the executor's waiting thread
        # enqueues no device work after it, so the host clock (one for every thread) stays put.
        with self.lock:
            if event.handle["vc"] is None:
                raise Hazard(f"the host waits on event {event.handle['id']}, never recorded")
            self.log.append(Op("event_sync", None, meta={"event": event.handle["id"]}))

    def elapsed_ms(self, start: Event, end: Event) -> float:
        return end.handle["time"] - start.handle["time"]

    # -- memory ----------------------------------------------------------------------------
    def alloc(self, device: int, nbytes: int, name: str = "", counted: bool = True) -> DeviceBuffer:
        """``allocations`` counts the executor's buffers, not the outputs ORT allocates per call."""
        with self.lock:
            self.allocations += int(counted)
            data = np.zeros(max(int(nbytes), 1), np.uint8)
            buf = DeviceBuffer(next(self._ids), device, int(nbytes), data, name)
            if counted:
                self.live_buffers.add(buf.ptr)
            self.log.append(Op("alloc", None, meta={"buffer": buf.ptr, "name": name, "device": device, "bytes": nbytes}))
            return buf

    def free(self, buffer: DeviceBuffer) -> None:
        with self.lock:
            assert buffer.ptr in self.live_buffers, f"{buffer.name} freed twice, or never allocated by the executor"
            self.live_buffers.remove(buffer.ptr)

    def memset(self, buffer: DeviceBuffer, value: int, stream: Stream) -> None:
        with self.lock:
            view = DeviceView(buffer, (buffer.nbytes,), np.uint8)
            self._access(stream, "memset", [], [view], 0.0, {"dst": buffer.name, "bytes": buffer.nbytes})
            self.array(view)[...] = value

    def alloc_host(self, shape, dtype) -> np.ndarray:
        return np.zeros(shape, dtype)

    def free_host(self, array) -> None:
        pass

    @staticmethod
    def array(view: DeviceView) -> np.ndarray:
        n = int(np.prod(view.shape, dtype=np.int64))
        return view.buffer.owner[: view.nbytes].view(view.dtype)[:n].reshape(view.shape)

    # -- the checker -----------------------------------------------------------------------
    def _access(self, stream: Stream, kind: str, reads, writes, duration: float, meta: dict) -> None:
        sid = stream.handle
        self._after_host(sid)
        vc = self._vc[sid]
        vc[sid] += 1
        now = vc[sid]
        for view in reads:
            b = view.buffer.ptr
            assert view.device == stream.device or kind == "copy_peer", f"{kind} on {stream.name} reads device {view.device}"
            w = self._writes.get(b)
            if w is not None and w[0] != sid and w[1] > vc.get(w[0], 0):
                raise Hazard(f"{stream.name} {kind} {meta} reads buffer {view.buffer.name or b} before its producer's "
                             f"event ({self._streams[w[0]].name} wrote it)")
            self._reads.setdefault(b, []).append((sid, now))
        for view in writes:
            b = view.buffer.ptr
            w = self._writes.get(b)
            if w is not None and w[0] != sid and w[1] > vc.get(w[0], 0):
                raise Hazard(f"{stream.name} {kind} {meta} overwrites buffer {view.buffer.name or b} racing "
                             f"{self._streams[w[0]].name}'s write")
            for r_sid, r_clock in self._reads.get(b, []):
                if r_sid != sid and r_clock > vc.get(r_sid, 0):
                    raise Hazard(f"{stream.name} {kind} {meta} overwrites buffer {view.buffer.name or b} before "
                                 f"{self._streams[r_sid].name} has read it")
            self._writes[b] = (sid, now)
            self._reads[b] = []
        start = self._time[sid]
        self._time[sid] = start + duration
        self.log.append(Op(kind, stream.name, start, start + duration, meta))

    # -- copies ----------------------------------------------------------------------------
    def copy_peer(self, dst: DeviceView, src: DeviceView, stream: Stream) -> None:
        with self.lock:
            assert stream.device in (dst.device, src.device)
            if dst.device != src.device:
                assert self.peer, "a peer copy without peer access"
            self._access(stream, "copy_peer", [src], [dst], self.copy_cost,
                         {"src": src.buffer.name, "dst": dst.buffer.name, "bytes": src.nbytes})
            self.array(dst)[...] = self.array(src)

    def copy_d2h(self, dst: np.ndarray, src: DeviceView, stream: Stream) -> None:
        with self.lock:
            self._access(stream, "copy_d2h", [src], [], self.copy_cost, {"src": src.buffer.name, "bytes": src.nbytes})
            dst.reshape(-1).view(np.uint8)[: src.nbytes] = self.array(src).reshape(-1).view(np.uint8)

    def copy_h2d(self, dst: DeviceView, src: np.ndarray, stream: Stream) -> None:
        with self.lock:
            self._access(stream, "copy_h2d", [], [dst], self.copy_cost, {"dst": dst.buffer.name, "bytes": dst.nbytes})
            self.array(dst).reshape(-1).view(np.uint8)[...] = src.reshape(-1).view(np.uint8)[: dst.nbytes]

    # -- stages ----------------------------------------------------------------------------
    def create_runner(self, model_bytes: bytes, device: int, stream: Stream, providers_options=None,
                      sess_options=None) -> FakeRunner:
        return FakeRunner(self, model_bytes, device, stream, sess_options)

    def create_single(self, model_bytes: bytes, device: int, providers_options=None, sess_options=None):
        """The unsplit model (the one-GPU plan), on the CPU EP; its calls are logged as "single"."""
        from lstm_ort.runtime.session import InferenceSession

        session = InferenceSession(model_bytes, sess_options, providers=["CPUExecutionProvider"])
        backend = self

        class Single:
            def run(self, names, feeds):
                with backend.lock:
                    backend.log.append(Op("single", None, meta={"device": device}))
                return session.run(names, feeds)
        return Single()

    # -- reading the log -------------------------------------------------------------------
    def runs(self) -> list[Op]:
        return [op for op in self.log if op.kind == "run"]


class FakeRunner:
    def __init__(self, backend: FakeBackend, model_bytes: bytes, device: int, stream: Stream, sess_options=None):
        from lstm_ort.runtime.session import InferenceSession

        self.backend, self.device, self.stream = backend, device, stream
        self.session = InferenceSession(model_bytes, sess_options, providers=["CPUExecutionProvider"])
        self.stage = None  # set by the executor: its StageModel, for the cost and the log

    def run(self, inputs: dict, outputs: dict) -> dict[str, DeviceView]:
        b = self.backend
        feeds = {}
        for name, value in inputs.items():
            feeds[name] = value if isinstance(value, np.ndarray) else b.array(value).copy()
        names = list(outputs)
        results = self.session.run(names, feeds)
        with b.lock:
            device_inputs = [v for v in inputs.values() if not isinstance(v, np.ndarray)]
            allocated = {}
            writes = []
            for name, value in zip(names, results):
                view = outputs[name]
                if view is None:
                    view = DeviceView(b.alloc(self.device, value.nbytes, f"ort:{name}", counted=False), value.shape, value.dtype)
                    allocated[name] = view
                assert tuple(view.shape) == value.shape, (name, view.shape, value.shape)
                writes.append((view, value))
            meta = dict(getattr(self, "current", {}))
            cost = b.cost(self.stage, meta.get("rows", 1), meta.get("steps", 1)) if self.stage is not None else 1.0
            b._access(self.stream, "run", device_inputs, [w[0] for w in writes], cost, meta)
            for view, value in writes:
                b.array(view)[...] = value
        return allocated
