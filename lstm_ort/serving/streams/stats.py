"""StreamBatcher's counters: open streams, steps/s, mean batch, queue wait and step latency
percentiles (the last WINDOW steps)."""

from __future__ import annotations

import threading
import time
from dataclasses import asdict, dataclass

import numpy as np

WINDOW = 1 << 16  # steps whose queue wait and latency the percentiles cover


@dataclass(frozen=True)
class StreamStats:
    """A snapshot. Times in milliseconds; ``queue_wait`` runs from ``submit`` to the start of the
    step's call, ``latency`` from ``submit`` to its result."""

    open_streams: int
    steps: int
    calls: int
    seconds: float  # since the first step (or the last reset)
    steps_per_s: float
    mean_batch: float
    queue_wait_p50_ms: float
    queue_wait_p99_ms: float
    latency_p50_ms: float
    latency_p99_ms: float
    failed_steps: int

    def as_dict(self) -> dict:
        return asdict(self)

    def rows(self) -> list[tuple[str, str]]:
        """(name, value) pairs as a table prints them."""
        return [("open streams", f"{self.open_streams}"), ("steps", f"{self.steps}"), ("calls", f"{self.calls}"),
                ("steps/s", f"{self.steps_per_s:,.0f}"), ("mean batch", f"{self.mean_batch:.1f}"),
                ("queue wait p50 / p99", f"{self.queue_wait_p50_ms:.3f} / {self.queue_wait_p99_ms:.3f} ms"),
                ("step latency p50 / p99", f"{self.latency_p50_ms:.3f} / {self.latency_p99_ms:.3f} ms"),
                ("failed steps", f"{self.failed_steps}")]


class Counters:
    """Thread-safe; ``record`` is called once per call with its steps' times."""

    def __init__(self):
        self._lock = threading.Lock()
        self.reset()

    def reset(self) -> None:
        with self._lock:
            self._waits = np.zeros(WINDOW)
            self._latencies = np.zeros(WINDOW)
            self._filled = 0
            self._next = 0
            self._steps = self._calls = self._failed = 0
            self._first: float | None = None
            self._last = 0.0

    def record(self, submitted: list[float], started: float, finished: float, failed: int = 0) -> None:
        n = len(submitted)
        t = np.array(submitted, np.float64)
        with self._lock:
            if self._first is None:
                self._first = float(t.min())
            self._last = finished
            self._steps += n - failed
            self._failed += failed
            self._calls += 1
            for lo in range(0, n, WINDOW):  # the ring, written in at most two slices a window
                part = t[lo: lo + WINDOW]
                head = min(len(part), WINDOW - self._next)
                for dst, src in ((slice(self._next, self._next + head), part[:head]), (slice(0, len(part) - head), part[head:])):
                    self._waits[dst] = started - src
                    self._latencies[dst] = finished - src
                self._next = (self._next + len(part)) % WINDOW
                self._filled = min(WINDOW, self._filled + len(part))

    def snapshot(self, open_streams: int) -> StreamStats:
        with self._lock:
            waits, lat = self._waits[: self._filled], self._latencies[: self._filled]
            seconds = (self._last - self._first) if self._first is not None else 0.0
            if self._first is not None and seconds <= 0:
                seconds = max(time.perf_counter() - self._first, 1e-9)

            def pct(a, q):
                return float(np.percentile(a, q) * 1e3) if a.size else 0.0
            return StreamStats(open_streams, self._steps, self._calls, seconds,
                               self._steps / seconds if seconds else 0.0,
                               (self._steps + self._failed) / self._calls if self._calls else 0.0,
                               pct(waits, 50), pct(waits, 99), pct(lat, 50), pct(lat, 99), self._failed)


def snapshot(native: dict, open_streams: int) -> StreamStats:
    """A snapshot from the native engine's counters (custom_ops/streams/engine.h, StatsSnapshot)."""
    waits, lat = np.asarray(native["waits"]), np.asarray(native["latencies"])
    steps, calls, failed = native["steps"], native["calls"], native["failed"]
    seconds = native["last"] - native["first"] if native["first"] >= 0 else 0.0
    if native["first"] >= 0 and seconds <= 0:
        seconds = 1e-9

    def pct(a, q):
        return float(np.percentile(a, q) * 1e3) if a.size else 0.0
    return StreamStats(open_streams, steps, calls, seconds, steps / seconds if seconds else 0.0,
                       (steps + failed) / calls if calls else 0.0, pct(waits, 50), pct(waits, 99), pct(lat, 50),
                       pct(lat, 99), failed)
