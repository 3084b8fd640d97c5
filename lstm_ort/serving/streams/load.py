"""The load generator of `lstm-ort streams-bench` (and tools/bench_streams.py): client threads drive
many streams through a system under test (systems.py: the StreamBatcher, or one ``run`` per stream
per step) and time every step themselves, around the call, so what is reported is what a caller
sees, not only what the batcher counts. Patterns (``Load.pattern``):

- ``closed``: K client threads, each stepping its share of the streams one after another with
  ``step`` (a thread-per-connection server: at most K steps in flight). With a period, a client's
  pass over its streams starts at most once per period; a pass that starts late counts as late.
- ``open``: every stream sends a chunk every period, at a phase of its own drawn at random, so the
  arrivals spread over the period. K client threads send each chunk at its time without waiting
  for other streams' results (``submit``); a stream's next chunk waits for its previous result
  and is then sent at once. A client wakes once for the chunks due within WAKE_S of each other
  (each is then sent up to WAKE_S after its time, under the LATE_S threshold). A chunk's latency
  runs from its scheduled time (what the stream's user waits, whoever made it late); a chunk sent
  more than LATE_S after its time is a late tick.
  Chunks still unsent when the measured window closes are not sent (a system far behind would
  otherwise take minutes to catch up): each counts as late and unanswered, its latency the time
  it had waited then (a lower bound).
- ``async``: the open loop's chunks (every stream every period, at its phase) sent from one event
  loop, a coroutine per stream awaiting each step (an asyncio server): the batcher's ``astep``; a
  system of plain ``run`` calls runs them in the loop's default executor, K threads. The loop
  wakes with epoll's millisecond resolution, so a chunk may be sent up to ~1 ms after its time.
- ``rounds``: each client submits one step of each of its streams at once (``step_many``, or with
  ``stacked`` one ``step_batch`` of their chunks stacked, as a server gathering a tick would) and
  waits for all of them; each step's latency is its round's. With a period, rounds are paced.

A phase runs ``warmup`` then ``seconds`` measured: steps/s counts the steps that ended in the
measured window; the latencies are those of the steps that began in it (open loop: were due in
it). A system that has not answered ``stall`` seconds after the window closed is stopped and
reported (``Stalled``), never waited for without end.
"""

from __future__ import annotations

import asyncio
import collections
import threading
import time
from dataclasses import dataclass, field

import numpy as np

PATTERNS = ("closed", "open", "async", "rounds")
PERIODIC = ("open", "async")  # the patterns of chunks sent every period
LATE_S = 1e-3  # open loop: a chunk sent later than its time by more than this is a late tick
LEAD_S = 0.02  # the clients' threads start this long before the phase's clock does
# Open loop: a client with nothing due sleeps until its next chunk's time plus WAKE_S, then sends
# every chunk due by then, so one wake-up serves a window of chunks. A sleep per chunk cost the
# generator more than the systems it drives (2,000 streams every 32 ms from 8 threads, a tiny LSTM:
# 62k sleeps a second and as many GIL hand-overs; 22k steps/s, 31k with this, where the batcher
# alone takes 145k).
WAKE_S = 2e-4


class Stalled(RuntimeError):
    """A system under test stopped answering: a step outlived its phase by ``stall`` seconds."""


@dataclass(frozen=True)
class Load:
    pattern: str  # closed | open | rounds
    streams: int
    clients: int
    seconds: float
    warmup: float = 1.0
    period: float | None = None  # seconds: open loop's chunk period; closed and rounds: pacing
    stacked: bool = False  # rounds: one step_batch per round
    seed: int = 0  # open loop: the streams' phases
    stall: float = 60.0

    def __post_init__(self):
        if self.pattern not in PATTERNS:
            raise ValueError(f"pattern: one of {PATTERNS}, not {self.pattern!r}")
        if self.pattern in PERIODIC and not self.period:
            raise ValueError(f"the {self.pattern} loop needs a period")
        if self.stacked and self.pattern != "rounds":
            raise ValueError("stacked steps go with the rounds pattern")


@dataclass
class Phase:
    """One system under one load: what its clients measured."""

    system: str
    load: Load
    steps: int  # ended in the measured window
    latencies: np.ndarray  # seconds, the measured steps'
    late: int = 0  # open: late ticks; closed/rounds with a period: passes/rounds that started late
    ticks: int = 0  # open: chunks due in the window; closed/rounds with a period: passes/rounds in it
    unanswered: int = 0  # open: chunks due in the window, unsent when it closed (counted late)
    failed: int = 0
    counters: dict | None = None  # the system's own (the batcher's stats)

    @property
    def steps_per_s(self) -> float:
        return self.steps / self.load.seconds

    def percentile(self, q: float) -> float:
        """Milliseconds (NaN without measured steps)."""
        return float(np.percentile(self.latencies, q) * 1e3) if self.latencies.size else float("nan")

    def summary(self) -> dict:
        return {"system": self.system, "streams": self.load.streams, "pattern": self.load.pattern,
                "clients": self.load.clients, "steps": self.steps, "seconds": self.load.seconds,
                "steps_per_s": self.steps_per_s, "measured_steps": int(self.latencies.size),
                "latency_p50_ms": self.percentile(50), "latency_p99_ms": self.percentile(99),
                "latency_p999_ms": self.percentile(99.9), "latency_max_ms": self.percentile(100),
                "late": self.late, "ticks": self.ticks, "unanswered": self.unanswered, "failed": self.failed,
                "counters": self.counters}


@dataclass
class _Clock:
    start: float
    measure: float
    stop: float

    @classmethod
    def of(cls, load: Load) -> _Clock:
        start = time.perf_counter() + LEAD_S
        return cls(start, start + load.warmup, start + load.warmup + load.seconds)


@dataclass
class _Record:
    """One client's measurements (appended by its own thread, and in the open loop by the threads
    that complete its steps: under ``lock``)."""

    latencies: list = field(default_factory=list)
    steps: int = 0
    late: int = 0
    ticks: int = 0
    unanswered: int = 0
    failed: int = 0
    errors: list = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def sent(self, clock: _Clock, due: float, at: float) -> None:
        """A chunk of the periodic patterns sent at ``at``: due in the window, a tick, late past LATE_S."""
        if clock.measure <= due < clock.stop:
            self.ticks += 1
            self.late += at - due > LATE_S

    def unsent(self, clock: _Clock, due: float, now: float) -> None:
        """A chunk the window closed on before it was sent: late and unanswered, its latency the
        wait so far (a lower bound)."""
        if clock.measure <= due < clock.stop:
            self.ticks += 1
            self.late += 1
            self.unanswered += 1
            self.latencies.append(now - due)


def run_phase(system, load: Load, pool: list[dict]) -> Phase:
    """Opens ``load.streams`` streams of ``system``, drives them as ``load`` says and closes them."""
    ids = system.open(load.streams)
    try:
        clock = _Clock.of(load)
        groups = [ids[k::load.clients] for k in range(load.clients) if ids[k::load.clients]]
        records = [_Record() for _ in groups]
        if load.pattern in PERIODIC:
            phases = np.random.default_rng(load.seed).uniform(0, load.period, len(ids))
            order = np.argsort(phases, kind="stable")
            if load.pattern == "async":  # one thread: the event loop
                groups, records = [[(ids[i], float(phases[i]), int(i)) for i in order]], records[:1]
                target = _async_client
            else:
                groups = [[(ids[i], float(phases[i]), int(i)) for i in order[k::load.clients]]
                          for k in range(len(groups))]
                target = _open_client
        else:
            target = _closed_client if load.pattern == "closed" else _rounds_client
        threads = [threading.Thread(target=_guard, args=(target, system, mine, pool, load, clock, rec), daemon=True,
                                    name=f"streams-bench-client-{k}") for k, (mine, rec) in enumerate(zip(groups, records))]
        for t in threads:
            t.start()
        time.sleep(max(0.0, clock.measure - time.perf_counter()))
        system.start_measuring()
        for t in threads:
            t.join(max(0.0, clock.stop + load.stall - time.perf_counter()))
        if any(t.is_alive() for t in threads):
            system.stop()
            raise Stalled(f"{system.name}: a step had no result {load.stall:g} s after the measured time ended "
                          f"({load.pattern} loop, {load.streams} streams): the system stopped answering")
        counters = system.counters()
    finally:
        system.close(ids)
    errors = [e for r in records for e in r.errors]
    if errors:
        raise errors[0]
    return Phase(system.name, load, sum(r.steps for r in records),
                 np.fromiter((x for r in records for x in r.latencies), np.float64),
                 sum(r.late for r in records), sum(r.ticks for r in records), sum(r.unanswered for r in records),
                 sum(r.failed for r in records), counters)


def _guard(target, system, mine, pool, load, clock, rec) -> None:
    try:
        target(system, mine, pool, load, clock, rec)
    except Exception as e:  # noqa: BLE001 - raised by run_phase in the caller's thread
        rec.errors.append(e)


def _paced(load: Load, clock: _Clock, rec: _Record, next_at: float) -> float:
    """Closed and rounds with a period: waits for the next pass's time, counting one that is late."""
    next_at += load.period
    wait = next_at - time.perf_counter()
    if next_at >= clock.measure and next_at < clock.stop:
        rec.ticks += 1
        rec.late += wait < 0
    if wait > 0:
        time.sleep(wait)
    return next_at


def _closed_client(system, mine, pool, load, clock, rec) -> None:
    k, size, next_at = 0, len(pool), clock.start
    time.sleep(max(0.0, clock.start - time.perf_counter()))
    while True:
        for s in mine:
            began = time.perf_counter()
            if began >= clock.stop:
                return
            system.step(s, pool[k % size])
            ended = time.perf_counter()
            k += 1
            if clock.measure <= ended < clock.stop:
                rec.steps += 1
            if began >= clock.measure:
                rec.latencies.append(ended - began)
        if load.period:
            next_at = _paced(load, clock, rec, next_at)


def _rounds_client(system, mine, pool, load, clock, rec) -> None:
    k, size, next_at = 0, len(pool), clock.start
    time.sleep(max(0.0, clock.start - time.perf_counter()))
    while True:
        began = time.perf_counter()
        if began >= clock.stop:
            return
        chunks = [pool[(k + j) % size] for j in range(len(mine))]
        if load.stacked:
            system.stacked_round(mine, chunks, k % size)
        else:
            system.round(mine, chunks)
        ended = time.perf_counter()
        k += 1
        if clock.measure <= ended < clock.stop:
            rec.steps += len(mine)
        if began >= clock.measure:
            rec.latencies.extend([ended - began] * len(mine))
        if load.period:
            next_at = _paced(load, clock, rec, next_at)


class _OpenStreams:
    """One open-loop client's streams: which have a step out, the chunks waiting behind it."""

    def __init__(self, system, clock: _Clock, rec: _Record):
        self.system, self.clock, self.rec = system, clock, rec
        self.busy: set = set()
        self.behind: dict = collections.defaultdict(collections.deque)
        self.out = 0  # chunks arrived and neither answered nor given up
        self.idle = threading.Condition(rec.lock)

    def arrive(self, stream, due: float, feeds) -> None:
        with self.rec.lock:
            self.out += 1
            if stream in self.busy:  # its previous result has not come back: the chunk waits for it
                self.behind[stream].append((due, feeds))
                return
            self.busy.add(stream)
        self._send(stream, due, feeds)

    def unsent(self, due: float, now: float) -> None:
        """A chunk due in the window that the window closed on before it could be sent."""
        with self.rec.lock:
            self.rec.unsent(self.clock, due, now)

    def _send(self, stream, due: float, feeds) -> None:
        sent = time.perf_counter()
        with self.rec.lock:
            self.rec.sent(self.clock, due, sent)
        self.system.submit(stream, feeds, lambda error: self._answered(stream, due, error))

    def _answered(self, stream, due: float, error) -> None:
        now = time.perf_counter()
        with self.rec.lock:
            if error is not None:
                self.rec.failed += 1
                self.rec.errors.append(error)
            else:
                if self.clock.measure <= due < self.clock.stop:
                    self.rec.latencies.append(now - due)
                if self.clock.measure <= now < self.clock.stop:
                    self.rec.steps += 1
            self.out -= 1
            waiting = self.behind.get(stream)
            nxt = waiting.popleft() if waiting else None
            if nxt is not None and now >= self.clock.stop:  # the window closed: what waits is not sent
                for d, _ in [nxt, *waiting]:
                    self.rec.unsent(self.clock, d, now)
                self.out -= 1 + len(waiting)
                waiting.clear()
                nxt = None
            if nxt is None:
                self.busy.discard(stream)
            if self.out == 0:
                self.idle.notify_all()
        if nxt is not None:
            self._send(stream, *nxt)

    def drain(self, deadline: float) -> bool:
        """Waits for every chunk sent to be answered; False at ``deadline``."""
        with self.rec.lock:
            while self.out:
                left = deadline - time.perf_counter()
                if left <= 0:
                    return False
                self.idle.wait(left)
        return True


def _open_client(system, mine, pool, load, clock, rec) -> None:
    """``mine``: (stream, phase, index) sorted by phase, so due times come in order."""
    streams = _OpenStreams(system, clock, rec)
    size, tick, j = len(pool), 0, 0
    while True:
        stream, phase, index = mine[j]
        due = clock.start + phase + tick * load.period
        if due >= clock.stop:
            break
        now = time.perf_counter()
        if now >= clock.stop:  # this client is behind and the window has closed: the rest is not sent
            streams.unsent(due, now)
        else:
            if due > now:
                time.sleep(due - now + WAKE_S)
            streams.arrive(stream, due, pool[(index + tick) % size])
        j += 1
        if j == len(mine):
            j, tick = 0, tick + 1
    if not streams.drain(clock.stop + load.stall + 1.0):
        # Still waiting past run_phase's deadline (it sees this thread alive and reports Stalled).
        return


def _async_client(system, mine, pool, load, clock, rec) -> None:
    """The async pattern's thread: an event loop, a coroutine per stream of ``mine`` ((stream,
    phase, index)); its default executor has ``load.clients`` threads."""
    from concurrent.futures import ThreadPoolExecutor

    async def streams():
        asyncio.get_running_loop().set_default_executor(
            ThreadPoolExecutor(load.clients, thread_name_prefix="streams-bench-executor"))
        await asyncio.gather(*(_async_stream(system, stream, phase, index, pool, load, clock, rec)
                               for stream, phase, index in mine))

    asyncio.run(streams())


async def _async_stream(system, stream, phase: float, index: int, pool, load, clock, rec) -> None:
    """One stream's chunks, each sent at its time or, where the last answer came later, at once."""
    tick = 0
    while True:
        due = clock.start + phase + tick * load.period
        if due >= clock.stop:
            return
        now = time.perf_counter()
        if now >= clock.stop:  # behind when the window closed: the rest is not sent
            for t in range(tick, tick + int((clock.stop - due) / load.period) + 1):
                rec.unsent(clock, clock.start + phase + t * load.period, now)
            return
        if due > now:
            await asyncio.sleep(due - now)
        measured = clock.measure <= due < clock.stop
        rec.sent(clock, due, time.perf_counter())
        try:
            await system.astep(stream, pool[(index + tick) % len(pool)])
        except Exception as e:  # noqa: BLE001 - run_phase raises the first
            rec.failed += 1
            rec.errors.append(e)
        else:
            ended = time.perf_counter()
            if measured:
                rec.latencies.append(ended - due)
            if clock.measure <= ended < clock.stop:
                rec.steps += 1
        tick += 1
