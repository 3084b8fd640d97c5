"""The load generator of `lstm-ort streams-bench` (lstm_ort/serving/streams/load.py), on systems
whose time a step takes is known (they sleep): what it measures must be what happened. Latencies
are never below a step's time, throughput never above what the clients could do, an open loop
that cannot keep up shows late ticks and latencies from the chunks' scheduled times, and a system
that stops answering is reported, not waited for. Bounds only where sleeping makes them certain
(a sleep never ends early); no timing test of speed."""

import asyncio
import threading
import time

import numpy as np
import pytest

from lstm_ort.serving.streams.load import LATE_S, Load, Stalled, run_phase
from lstm_ort.serving.streams.systems import RunSystem

POOL = [{"x": np.zeros(1)}]


class Sleeper:
    """Each step sleeps ``seconds`` on the caller's thread (as one run per stream does); ``submit``
    answers at once, on the caller's thread."""

    name = "sleeper"

    def __init__(self, seconds: float):
        self.seconds, self.steps, self.measuring, self.stopped = seconds, [], False, False

    def open(self, n):
        return list(range(n))

    def close(self, ids):
        pass

    def step(self, stream, feeds):
        time.sleep(self.seconds)
        self.steps.append(stream)

    def submit(self, stream, feeds, answered):
        self.step(stream, feeds)
        answered(None)

    async def astep(self, stream, feeds):  # as RunSystem: a blocking step on the loop's executor
        await asyncio.get_running_loop().run_in_executor(None, self.step, stream, feeds)

    def round(self, ids, chunks):
        for s, c in zip(ids, chunks):
            self.step(s, c)

    stacked_round = round

    def start_measuring(self):
        self.measuring = True

    def counters(self):
        return {"own": 1}

    def stop(self):
        self.stopped = True


class Later(Sleeper):
    """``submit`` returns at once; the answer comes ``seconds`` later from another thread (as the
    StreamBatcher's Future); ``never`` streams are never answered."""

    def __init__(self, seconds: float, never=()):
        super().__init__(seconds)
        self.never = set(never)

    def submit(self, stream, feeds, answered):
        if stream not in self.never:
            threading.Timer(self.seconds, answered, args=(None,)).start()

    async def astep(self, stream, feeds):
        await asyncio.sleep(self.seconds if stream not in self.never else 3600)


class Stuck(Sleeper):
    """A step that never returns until ``stop``."""

    def __init__(self):
        super().__init__(0.0)
        self.released = threading.Event()

    def step(self, stream, feeds):
        self.released.wait(30)

    def stop(self):
        super().stop()
        self.released.set()


def test_closed_loop_latency_and_throughput_are_what_the_steps_took():
    system = Sleeper(0.004)
    phase = run_phase(system, Load("closed", streams=3, clients=1, seconds=0.4, warmup=0.1), POOL)
    assert system.measuring and phase.counters == {"own": 1}
    assert phase.steps > 10 and phase.latencies.size >= phase.steps - 1
    assert phase.latencies.min() >= 0.004  # each step's own time, measured around the call
    assert phase.steps_per_s <= 1 / 0.004  # one client, one step at a time
    assert phase.late == phase.ticks == 0  # no period: nothing to be late for
    assert set(system.steps) == {0, 1, 2}  # one after another, every stream


def test_closed_loop_clients_step_concurrently():
    """K clients: K steps in flight (the steps sleep, releasing the GIL)."""
    phase = run_phase(Sleeper(0.004), Load("closed", streams=8, clients=4, seconds=0.4, warmup=0.1), POOL)
    assert 1 / 0.004 < phase.steps_per_s <= 4 / 0.004


def test_closed_loop_paced_counts_late_passes():
    """With a period shorter than a pass takes, every pass starts late."""
    phase = run_phase(Sleeper(0.003), Load("closed", streams=4, clients=1, seconds=0.3, warmup=0.05, period=0.005),
                      POOL)
    assert phase.ticks > 0 and phase.late >= phase.ticks - 1


def test_rounds_give_each_step_its_rounds_latency():
    phase = run_phase(Sleeper(0.002), Load("rounds", streams=4, clients=1, seconds=0.3, warmup=0.05), POOL)
    assert phase.latencies.size % 4 == 0 and phase.latencies.min() >= 4 * 0.002


def test_open_loop_that_keeps_up():
    """8 streams, a chunk each every 20 ms, answered 2 ms later: every chunk due in the window is
    sent (on time, give or take the clock) and answered; its latency at least the 2 ms."""
    load = Load("open", streams=8, clients=2, seconds=0.4, warmup=0.1, period=0.02)
    phase = run_phase(Later(0.002), load, POOL)
    assert abs(phase.ticks - 8 * 0.4 / 0.02) <= 8  # each stream's chunks due in the window
    assert phase.unanswered == 0 and phase.latencies.size == phase.ticks
    assert phase.latencies.min() >= 0.002


def test_open_loop_that_cannot_keep_up_counts_from_the_schedule():
    """One client running each chunk itself for 5 ms, 8 streams due every 10 ms (800/s offered,
    200/s possible): chunks go out late, their latency runs from their scheduled time (growing
    past the period), what the window closed on is unanswered and counted late."""
    load = Load("open", streams=8, clients=1, seconds=0.4, warmup=0.05, period=0.01)
    phase = run_phase(Sleeper(0.005), load, POOL)
    assert phase.steps_per_s <= 1 / 0.005
    assert phase.late > phase.ticks / 2 and phase.unanswered > 0
    assert phase.percentile(99) > 1e3 * 0.01  # ms: far more than a step's 5 ms
    assert phase.latencies.size == phase.ticks


def test_a_stream_waits_for_its_previous_result():
    """Stream 0's answers take 3 periods: its chunks wait for them (sent 60 ms apart at least, late);
    the other streams' chunks are not held up by it (sent a period apart)."""
    sent = {s: [] for s in range(4)}

    class SlowZero(Later):
        def submit(self, stream, feeds, answered):
            sent[stream].append(time.perf_counter())
            threading.Timer(0.06 if stream == 0 else 0.001, answered, args=(None,)).start()

    load = Load("open", streams=4, clients=1, seconds=0.4, warmup=0.05, period=0.02)
    phase = run_phase(SlowZero(0), load, POOL)
    assert np.diff(sent[0]).min() >= 0.06
    assert all(np.median(np.diff(sent[s])) < 0.04 for s in (1, 2, 3))
    assert phase.late >= len(sent[0]) // 2 and phase.percentile(100) > 60  # ms, from stream 0's schedule


def test_async_loop_that_keeps_up():
    """The open loop's chunks from one event loop, each awaited: as test_open_loop_that_keeps_up."""
    load = Load("async", streams=8, clients=2, seconds=0.4, warmup=0.1, period=0.02)
    phase = run_phase(Later(0.002), load, POOL)
    assert abs(phase.ticks - 8 * 0.4 / 0.02) <= 8
    assert phase.unanswered == 0 and phase.latencies.size == phase.ticks
    assert phase.latencies.min() >= 0.002


def test_async_loop_runs_blocking_steps_on_k_executor_threads():
    """Blocking 5 ms steps on the loop's executor: K threads bound the steps/s (8 streams every
    10 ms offer 800/s; 1 thread can do 200, 2 do 400); behind, chunks are late and the window
    closes on unanswered ones, latencies from the schedule."""
    for k in (1, 2):
        system = Sleeper(0.005)
        phase = run_phase(system, Load("async", streams=8, clients=k, seconds=0.4, warmup=0.05, period=0.01), POOL)
        assert phase.steps_per_s <= k / 0.005
        assert phase.late > phase.ticks / 2 and phase.unanswered > 0
        assert phase.latencies.size == phase.ticks
    assert phase.steps_per_s > 1 / 0.005  # two threads did more than one could


def test_async_stream_waits_for_its_previous_result():
    """Stream 0's answers take 3 periods: its next chunk is sent only then; the others keep time."""
    sent = {s: [] for s in range(4)}

    class SlowZero(Later):
        async def astep(self, stream, feeds):
            sent[stream].append(time.perf_counter())
            await asyncio.sleep(0.06 if stream == 0 else 0.001)

    phase = run_phase(SlowZero(0), Load("async", streams=4, clients=1, seconds=0.4, warmup=0.05, period=0.02), POOL)
    assert np.diff(sent[0]).min() >= 0.06
    assert all(np.median(np.diff(sent[s])) < 0.04 for s in (1, 2, 3))
    assert phase.late >= len(sent[0]) // 2


@pytest.mark.parametrize("pattern", ["closed", "open", "async"])
def test_a_system_that_stops_answering_is_reported(pattern):
    system = Stuck() if pattern == "closed" else Later(0.001, never={0})
    load = Load(pattern, streams=2, clients=1, seconds=0.1, warmup=0.0, period=None if pattern == "closed" else 0.01,
                stall=0.3)
    t0 = time.monotonic()
    with pytest.raises(Stalled, match="stopped answering"):
        run_phase(system, load, POOL)
    assert system.stopped and time.monotonic() - t0 < 5


def test_errors_of_a_system_reach_the_caller():
    class Failing(Sleeper):
        def step(self, stream, feeds):
            raise RuntimeError("bad step")

    with pytest.raises(RuntimeError, match="bad step"):
        run_phase(Failing(0), Load("closed", streams=2, clients=2, seconds=0.1, warmup=0.0), POOL)
    with pytest.raises(RuntimeError, match="bad step"):
        run_phase(Failing(0), Load("async", streams=2, clients=2, seconds=0.1, warmup=0.0, period=0.01), POOL)


@pytest.mark.parametrize("kwargs, match", [
    ({"pattern": "sideways"}, "pattern"), ({"pattern": "open"}, "period"), ({"pattern": "async"}, "period"),
    ({"pattern": "closed", "stacked": True}, "stacked"),
])
def test_load_refuses_what_it_cannot_run(kwargs, match):
    with pytest.raises(ValueError, match=match):
        Load(streams=1, clients=1, seconds=1, **kwargs)


def test_no_steps_no_percentiles():
    from lstm_ort.serving.streams.load import Phase

    phase = Phase("x", Load("closed", 1, 1, 1.0), 0, np.array([]))
    assert np.isnan(phase.percentile(50)) and phase.summary()["latency_p999_ms"] != phase.summary()["latency_p999_ms"]
    assert LATE_S > 0


def test_run_system_carries_each_streams_state():
    """One run per stream per step: each stream's carried inputs are its own last outputs."""
    class Session:
        def get_outputs(self):
            return [type("O", (), {"name": n}) for n in ("y", "h_out")]

        def run(self, _, feeds):
            return [feeds["x"], feeds["h"] + feeds["x"]]

    system = RunSystem("run", Session(), {"h_out": "h"}, {"h": np.zeros(1)})
    ids = system.open(3)
    for s in ids:
        for _ in range(s + 1):
            system.step(s, {"x": np.ones(1)})
    assert [float(system._states[s]["h"][0]) for s in ids] == [1.0, 2.0, 3.0]
    answers = []
    system.submit(0, {"x": np.ones(1)}, answers.append)
    assert answers == [None] and float(system._states[0]["h"][0]) == 2.0
