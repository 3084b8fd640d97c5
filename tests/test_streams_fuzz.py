"""A seeded fuzz over StreamBatcher's API (issue 45, done-when), run against the native step path
(StreamBatcher) and the Python reference (ReferenceStreamBatcher) alike.

Client threads open streams and step them through every door (step, submit, step_many with
repeated streams, step_batch, astep), with ids of every kind (valid, closed, never opened, floats,
strings, bools, None, numpy ints, ints past int64), feeds of random shapes, dtypes, layouts and
values (NaN, infinity, 1000x), and close their own streams, each other's and, once, the whole
batcher, while their steps are in flight. Every call must end as docs/streams.md says: its result,
or StreamError (bad feeds: before anything is queued), StreamClosed (a stream closed or never
opened; an id that is no int), BatcherShutDown (after shutdown), or TypeError for an id of no
scalar kind. Every wait is bounded (a hang fails, naming the thread and its last calls), and every
stream's results, step after step, are what its own InferenceSession gives it alone (the
tolerance of tests/test_streams.py). numpy's Generator draws everything from the seed: a failure
prints the seed and the calls that led to it.

What the fuzz found (two native hangs, 0-d inputs registered as 1-d, None, ids past int64 and
empty chunks reaching the engine, raw errors for bad pairs) is fixed on main; each is kept as a
plain test at the end.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import threading
import time
import traceback
from dataclasses import dataclass, field

import numpy as np
import pytest
from onnx import TensorProto, helper

from lstm_ort.builders import LstmSpec, fused_model, random_layers
from lstm_ort.runtime.session import InferenceSession
from lstm_ort.serving.streams import (BatcherShutDown, ReferenceStreamBatcher, StreamBatcher, StreamClosed,
                                      StreamError)

I, H, LAYERS = 5, 7, 2
CARRY = {"Y_h": "initial_h", "Y_c": "initial_c"}
TOL = 1e-5  # tests/test_streams.py: float32 through the CPU kernels, batch against alone
WAIT = 20.0  # seconds: the longest any one wait of the fuzz may take
BUDGET = 60.0  # seconds: a seed's client threads must all have ended by then
THREADS, OPS = 4, 100
SEEDS = range(6)
BIG = 2 ** 40  # ids never opened (streams count from 1)

def streaming_model(seed: int = 0):
    """FusedLSTM (2 layers, (h, c) carried) behind x * gain: X [T, B, I] has the batch on axis 1;
    gain is a scalar every stream of a call shares (steps group by its value, as silero-vad's
    sample rate); Y [T, 1, B, H], Y_h and Y_c [2, B, H]."""
    spec = LstmSpec(I, H, num_layers=LAYERS)
    model = fused_model(spec, random_layers(spec, np.random.default_rng(seed)), initial_states=True)
    g = model.graph
    x = next(v for v in g.input if v.name == "X")
    g.input.remove(x)
    g.input.insert(0, helper.make_tensor_value_info("x", TensorProto.FLOAT, ["T", "B", I]))
    g.input.insert(1, helper.make_tensor_value_info("gain", TensorProto.FLOAT, []))
    g.node.insert(0, helper.make_node("Mul", ["x", "gain"], ["X"]))
    return model


MODEL = streaming_model()
OUTPUT_AXES = (2, 1, 1)  # each output's batch axis: Y, Y_h, Y_c


# -- what the clients draw -------------------------------------------------------------------------
def valid_feeds(rng: np.random.Generator) -> dict:
    """One stream's feeds, of every valid form: T 1..3, two gains, values normal or 1000x with NaN
    or infinity here and there; the array contiguous or a strided view, Fortran-ordered, read-only;
    gain a 0-d array or a numpy scalar."""
    t = int(rng.integers(1, 4))
    x = rng.standard_normal((t, 1, I)).astype(np.float32)
    r = rng.random()
    if r < 0.1:
        x *= 1000
    elif r < 0.18:
        x.flat[int(rng.integers(x.size))] = np.nan
    elif r < 0.26:
        x.flat[int(rng.integers(x.size))] = rng.choice([np.inf, -np.inf])
    form = rng.random()
    if form < 0.1:
        wide = np.zeros((t, 1, 2 * I), np.float32)
        wide[:, :, ::2] = x
        x = wide[:, :, ::2]  # a strided view
    elif form < 0.2:
        x = np.asfortranarray(x)
    elif form < 0.3:
        x.flags.writeable = False
    gain = float(rng.choice([1.0, 0.5]))
    return {"x": x, "gain": np.float32(gain) if rng.random() < 0.2 else np.array(gain, np.float32)}


def bad_feeds(rng: np.random.Generator):
    """Feeds no step takes (StreamError), named for the log."""
    good = valid_feeds(rng)
    x = np.ascontiguousarray(good["x"])
    cases = {
        "float64": {**good, "x": x.astype(np.float64)},
        "float16": {**good, "x": x.astype(np.float16)},
        "int32": {**good, "x": np.zeros(x.shape, np.int32)},
        "rank 2": {**good, "x": x[:, 0]},
        "rank 4": {**good, "x": x[..., None]},
        "width": {**good, "x": np.zeros((x.shape[0], 1, I + 1), np.float32)},
        "batch 2": {**good, "x": np.concatenate([x, x], axis=1)},
        "batch 0": {**good, "x": np.zeros((x.shape[0], 0, I), np.float32)},
        "empty chunk": {**good, "x": np.zeros((0, 1, I), np.float32)},
        "missing": {"x": x},
        "unknown": {**good, "nope": x},
        "carried": {**good, "initial_h": np.zeros((LAYERS, 1, H), np.float32)},
        "list": {**good, "x": x.tolist()},
        "None": {**good, "x": None},
        "string": {**good, "x": "x"},
        "gain rank 1": {**good, "gain": np.ones(1, np.float32)},
        "gain float64": {**good, "gain": np.array(1.0)},
        "not a dict": [("x", x)],
        "None feeds": None,
    }
    name = list(cases)[int(rng.integers(len(cases)))]
    return name, cases[name]


def bad_id(rng: np.random.Generator, client: Client):
    """An id that names no open stream (StreamClosed): never opened, closed, past int64, or of
    another type than int (a float or bool equal to a live id among them)."""
    closed = [s for s in client.streams if client.streams[s].closed]
    live = client.shared.live_ids()
    choices = [("never opened", BIG + int(rng.integers(1000))), ("negative", -int(rng.integers(1, 5))),
               ("string", str(int(rng.integers(1, 50)))), ("list", [1]), ("None", None),
               ("float", 0.5 + int(rng.integers(50))), ("nan", float("nan")),
               ("past int64", 2 ** 63 + int(rng.integers(5))), ("past -int64", -(2 ** 70))]
    if closed:
        s = closed[int(rng.integers(len(closed)))]
        choices += [("closed", s), ("closed numpy", np.int32(s))]
    if live:
        s = live[int(rng.integers(len(live)))]
        choices += [("float of a live id", float(s)), ("bool", bool(rng.integers(2)))]
    return choices[int(rng.integers(len(choices)))]


# -- the clients -----------------------------------------------------------------------------------
@dataclass
class Entry:
    """One step of a stream, in the order submitted: its feeds and what came of it."""

    feeds: dict
    outputs: list | None = None
    error: BaseException | None = None
    future: concurrent.futures.Future | None = None
    via: str = ""  # the call that made it (for the failure's message)


@dataclass
class Stream:
    initial: dict
    entries: list = field(default_factory=list)
    closed: bool = False  # by its owner


class Shared:
    """What the clients of one batcher know of each other: the live streams (so that one may close
    another's), those closed by others, whether the batcher was shut down, what failed."""

    def __init__(self):
        self.lock = threading.Lock()
        self.live: set = set()
        self.killed: set = set()
        self.down = False
        self.failures: list[str] = []

    def live_ids(self) -> list:
        with self.lock:
            return sorted(self.live)


class Client:
    def __init__(self, batcher, shared: Shared, seed: int, index: int, shutdown_at: int | None):
        self.b, self.shared, self.index = batcher, shared, index
        self.rng = np.random.default_rng([seed, index])
        self.streams: dict[int, Stream] = {}
        self.calls = collections.deque(maxlen=25)
        self.shutdown_at = shutdown_at

    # what the batcher may answer ---------------------------------------------------------------
    def fail(self, what: str) -> None:
        with self.shared.lock:
            self.shared.failures.append(f"client {self.index}: {what}\n  last calls: " + "; ".join(self.calls))

    def allowed(self, error: BaseException, sids=()) -> bool:
        """Whether ``error`` is what the batcher may raise for a call of valid feeds on these
        (owned, open) streams: closed by another client, or the batcher shut down."""
        if isinstance(error, BatcherShutDown):
            return self.shared.down
        if isinstance(error, StreamClosed):
            with self.shared.lock:
                return any(s in self.shared.killed for s in sids)
        return False

    def expect(self, what: str, call, errors):
        """Runs a call that must raise one of ``errors`` (or BatcherShutDown once shut down)."""
        self.calls.append(what)
        try:
            out = call()
        except errors:
            return
        except BatcherShutDown:
            if not self.shared.down:
                self.fail(f"{what}: BatcherShutDown before shutdown")
            return
        except Exception as e:  # noqa: BLE001 - any other error is the finding
            self.fail(f"{what}: {type(e).__name__}: {e}\n{traceback.format_exc(limit=4)}")
            return
        self.fail(f"{what}: returned {type(out).__name__} instead of raising {errors}")

    def mine(self, idle: bool = False) -> list[int]:
        """Own streams still open (``idle``: with no step in flight)."""
        out = [s for s, st in self.streams.items() if not st.closed]
        if idle:
            self.settle()
        return out

    def settle(self) -> None:
        """Waits (bounded) for every own future."""
        for sid, st in self.streams.items():
            for e in st.entries:
                if e.future is not None:
                    self.resolve(sid, e)

    def resolve(self, sid, entry: Entry) -> None:
        f, entry.future = entry.future, None
        try:
            entry.outputs = f.result(timeout=WAIT)
        except concurrent.futures.TimeoutError:
            self.fail(f"a submitted step of stream {sid} had no result in {WAIT:g} s")
            entry.error = TimeoutError()
        except Exception as e:  # noqa: BLE001 - judged here
            entry.error = e
            if not isinstance(e, StreamClosed) or not (self.streams[sid].closed or self.allowed(e, [sid])):
                self.fail(f"a submitted step of stream {sid}: {type(e).__name__}: {e}")

    def record(self, sid, feeds, outputs=None, error=None, future=None) -> None:
        self.streams[sid].entries.append(Entry(feeds, outputs, error, future, self.calls[-1] if self.calls else ""))

    # the calls ---------------------------------------------------------------------------------
    def run(self) -> None:
        ops = [self.op_open, self.op_step, self.op_submit, self.op_step_many, self.op_step_batch, self.op_astep,
               self.op_bad_feeds, self.op_bad_id, self.op_close, self.op_close_other, self.op_state, self.op_misc]
        weights = np.array([6, 14, 12, 8, 6, 3, 6, 6, 3, 2, 3, 2], float)
        for k in range(OPS):
            if k == self.shutdown_at:
                self.op_shutdown()
            ops[self.rng.choice(len(ops), p=weights / weights.sum())]()
        self.settle()

    def guarded(self, what: str, sids, call):
        """A call of valid feeds on own open streams: its result, or None where it raised what it
        may (a stream closed by another client, the batcher shut down)."""
        self.calls.append(what)
        try:
            return call()
        except Exception as e:  # noqa: BLE001 - judged here
            if not self.allowed(e, sids):
                self.fail(f"{what}: {type(e).__name__}: {e}\n{traceback.format_exc(limit=4)}")
            return None

    def op_open(self):
        initial = None
        if self.rng.random() < 0.5:
            initial = {"initial_h": self.rng.standard_normal((LAYERS, 1, H)).astype(np.float32)}
            if self.rng.random() < 0.5:
                initial["initial_c"] = self.rng.standard_normal((LAYERS, 1, H)).astype(np.float32)
        if self.rng.random() < 0.1:
            bad = [{"initial_h": np.zeros((LAYERS, 2, H), np.float32)}, {"nope": np.zeros(1)},
                   {"initial_c": np.zeros((LAYERS, 1, H))}, ["initial_h"]][int(self.rng.integers(4))]
            self.expect(f"open({bad!r:.40})", lambda: self.b.open(bad), StreamError)
            return
        sid = self.guarded("open()", (), lambda: self.b.open(initial))
        if sid is None:
            return
        if type(sid) is not int or sid in self.streams:
            self.fail(f"open() returned {sid!r}")
            return
        zero = np.zeros((LAYERS, 1, H), np.float32)
        full = {"initial_h": zero, "initial_c": zero, **(initial or {})}
        self.streams[sid] = Stream({k: v.copy() for k, v in full.items()})
        with self.shared.lock:
            self.shared.live.add(sid)

    def pick(self):
        mine = self.mine()
        return None if not mine else mine[int(self.rng.integers(len(mine)))]

    def as_id(self, sid):
        """The id as the caller may hold it: an int, or a numpy int."""
        return np.int64(sid) if self.rng.random() < 0.15 else sid

    def op_step(self):
        sid = self.pick()
        if sid is None:
            return self.op_open()
        feeds = valid_feeds(self.rng)
        out = self.guarded(f"step({sid})", [sid], lambda: self.b.step(self.as_id(sid), feeds))
        self.record(sid, feeds, out, None if out is not None else StreamClosed())

    def op_submit(self):
        sid = self.pick()
        if sid is None:
            return self.op_open()
        for _ in range(int(self.rng.integers(1, 4))):  # queued behind each other
            feeds = valid_feeds(self.rng)
            f = self.guarded(f"submit({sid})", [sid], lambda: self.b.submit(self.as_id(sid), feeds))
            if f is None:
                return
            self.record(sid, feeds, future=f)
        if self.rng.random() < 0.5:
            self.settle()

    def op_step_many(self):
        mine = self.mine()
        if not mine:
            return self.op_open()
        pairs = []
        for _ in range(int(self.rng.integers(1, 6))):
            sid = mine[int(self.rng.integers(len(mine)))]
            pairs.append((sid, valid_feeds(self.rng)))
        if self.rng.random() < 0.2:  # one bad step: nothing of the call is queued
            name, feeds = bad_feeds(self.rng)
            at = int(self.rng.integers(len(pairs) + 1))
            bad = pairs[:at] + [(pairs[0][0], feeds)] + pairs[at:]
            self.expect(f"step_many(.., {name} feeds)", lambda: self.b.step_many(bad), StreamError)
            return
        rex = bool(self.rng.integers(2))
        arg = [list(p) if self.rng.random() < 0.2 else p for p in pairs]
        outs = self.guarded(f"step_many({[s for s, _ in pairs]})", [s for s, _ in pairs],
                            lambda: self.b.step_many(arg, return_exceptions=rex))
        if outs is None:  # raised: which of its steps ran is not known; their streams end here
            for sid, feeds in pairs:
                self.record(sid, feeds, error=StreamClosed())
            self.retire({sid for sid, _ in pairs})
            return
        for k, (sid, feeds) in enumerate(pairs):
            if isinstance(outs[k], BaseException):
                if not self.allowed(outs[k], [sid]):
                    self.fail(f"step_many: step {k} of stream {sid}: {type(outs[k]).__name__}: {outs[k]}")
                self.record(sid, feeds, error=outs[k])
            else:
                self.record(sid, feeds, outs[k])

    def op_step_batch(self):
        mine = self.mine(idle=True)
        if not mine:
            return self.op_open()
        n = int(self.rng.integers(1, len(mine) + 1))
        sids = [mine[k] for k in self.rng.permutation(len(mine))[:n]]
        t, gain = int(self.rng.integers(1, 4)), float(self.rng.choice([1.0, 0.5]))
        rows = [self.rng.standard_normal((t, 1, I)).astype(np.float32) for _ in sids]
        stacked = {"x": np.concatenate(rows, axis=1), "gain": np.array(gain, np.float32)}
        if self.rng.random() < 0.15:
            name, feeds = "duplicate ids", stacked
            self.expect(f"step_batch({name})", lambda: self.b.step_batch(sids + sids[:1], feeds), StreamError)
            return
        outs = self.guarded(f"step_batch({sids})", sids, lambda: self.b.step_batch([self.as_id(s) for s in sids],
                                                                                    stacked))
        if outs is None:  # refused as a whole (a stream closed by another client, shut down): none ran
            return
        for k, sid in enumerate(sids):
            feeds = {"x": rows[k], "gain": np.array(gain, np.float32)}
            self.record(sid, feeds, [np.take(o, [k], axis=a) for o, a in zip(outs, OUTPUT_AXES)])

    def op_astep(self):
        sid = self.pick()
        if sid is None:
            return self.op_open()
        feeds = valid_feeds(self.rng)

        async def one():
            return await asyncio.wait_for(self.b.astep(sid, feeds), WAIT)
        try:
            out = self.guarded(f"astep({sid})", [sid], lambda: asyncio.run(one()))
        except asyncio.TimeoutError:
            out = None
        self.record(sid, feeds, out, None if out is not None else StreamClosed())

    def op_bad_feeds(self):
        sid = self.pick()
        if sid is None:
            return self.op_open()
        name, feeds = bad_feeds(self.rng)
        how = int(self.rng.integers(3))
        call = [lambda: self.b.step(sid, feeds), lambda: self.b.submit(sid, feeds),
                lambda: self.b.step_many([(sid, feeds)])][how]
        self.expect(f"{['step', 'submit', 'step_many'][how]}({sid}, {name} feeds)", call, StreamError)

    def op_bad_id(self):
        name, sid = bad_id(self.rng, self)
        feeds = valid_feeds(self.rng)
        how = int(self.rng.integers(6))
        call = [lambda: self.b.step(sid, feeds), lambda: self.b.submit(sid, feeds),
                lambda: self.b.step_many([(sid, feeds)]), lambda: self.b.close(sid), lambda: self.b.state(sid),
                lambda: self.b.step_batch([sid], {"x": feeds["x"], "gain": np.array(1.0, np.float32)})][how]
        verb = ["step", "submit", "step_many", "close", "state", "step_batch"][how]
        self.expect(f"{verb}({name} id {sid!r})", call, StreamClosed)

    def retire(self, sids) -> None:
        """Closes own streams whose state is no longer known (a call of several failed)."""
        for sid in sids:
            if not self.streams[sid].closed:
                self.close(sid)

    def op_close(self):
        sid = self.pick()
        if sid is not None:
            self.close(sid)

    def close(self, sid) -> None:
        with self.shared.lock:
            self.shared.live.discard(sid)
        self.streams[sid].closed = True
        self.calls.append(f"close({sid})")
        try:
            self.b.close(sid)
        except (StreamClosed, BatcherShutDown) as e:
            if not self.allowed(e, [sid]):
                self.fail(f"close({sid}) of an open stream: StreamClosed")
        except Exception as e:  # noqa: BLE001
            self.fail(f"close({sid}): {type(e).__name__}: {e}")

    def op_close_other(self):
        with self.shared.lock:
            others = sorted(self.shared.live - set(self.streams))
            if not others:
                return
            sid = others[int(self.rng.integers(len(others)))]
            self.shared.killed.add(sid)
            self.shared.live.discard(sid)
        self.calls.append(f"close({sid}) of another client's stream")
        try:
            self.b.close(sid)
        except StreamClosed:
            pass  # its owner closed it first
        except Exception as e:  # noqa: BLE001
            self.fail(f"close({sid}) of another client's stream: {type(e).__name__}: {e}")

    def op_state(self):
        mine = self.mine(idle=True)
        if not mine:
            return
        sid = mine[int(self.rng.integers(len(mine)))]
        got = self.guarded(f"state({sid})", [sid], lambda: self.b.state(sid))
        if got is None:
            return
        done = [e for e in self.streams[sid].entries if e.outputs is not None]
        want = self.streams[sid].initial if not done else {"initial_h": done[-1].outputs[1],
                                                           "initial_c": done[-1].outputs[2]}
        for name, value in want.items():
            if not np.array_equal(got[name], value, equal_nan=True):
                self.fail(f"state({sid})[{name}] is not the carried output of its last step")

    def op_misc(self):
        r = int(self.rng.integers(3))
        if r == 0:
            feeds = valid_feeds(self.rng)
            self.guarded("layout()", (), lambda: self.b.layout(feeds))
        elif r == 1:
            s = self.guarded("stats()", (), self.b.stats)
            if s is not None and not (s.steps >= 0 and s.calls >= 0 and s.failed_steps == 0):
                self.fail(f"stats(): {s}")
        else:
            errors = (StreamError, StreamClosed)
            pair = [(1, 2, 3), None, (1,)][int(self.rng.integers(3))]
            self.expect(f"step_many([{pair!r}])", lambda: self.b.step_many([pair]), errors)

    def op_shutdown(self):
        with self.shared.lock:
            self.shared.down = True
        wait = bool(self.rng.integers(2))
        self.calls.append(f"shutdown(wait={wait})")
        try:
            self.b.shutdown(wait=wait)
        except Exception as e:  # noqa: BLE001
            self.fail(f"shutdown: {type(e).__name__}: {e}")


# -- the check of every stream against itself alone --------------------------------------------------
def check_alone(client: Client, session) -> list[str]:
    """Each stream's steps that returned outputs must be a prefix of its steps (a closed stream
    fails the rest), equal to its own session's, step after step."""
    problems = []
    for sid, st in client.streams.items():
        done = [e for e in st.entries if e.outputs is not None]
        if any(e.outputs is None for e in st.entries[:len(done)]):
            problems.append(f"stream {sid}: a step failed and a later one ran")
            continue
        state, loud = dict(st.initial), 0.0
        for k, e in enumerate(done):
            # float32 rounding grows with the values: once a stream was fed 1000x inputs, its gates'
            # pre-activations are ~1000x larger and so are the roundings (TOL scaled by its largest input)
            x = np.abs(np.asarray(e.feeds["x"], np.float64))
            loud = max(loud, float(np.max(x[np.isfinite(x)], initial=0)) if np.max(x, initial=0) > 100 else 0)
            want = session.run(None, {"x": np.ascontiguousarray(e.feeds["x"]),
                                      "gain": np.asarray(e.feeds["gain"], np.float32), **state})
            state = {"initial_h": want[1], "initial_c": want[2]}
            for name, got, w in zip(("Y", "Y_h", "Y_c"), e.outputs, want):
                if got.shape != w.shape or got.dtype != w.dtype or \
                        not np.allclose(got, w, rtol=0, equal_nan=True,
                                        atol=TOL * max(1.0, loud, float(np.max(np.abs(w[np.isfinite(w)]), initial=0)))):
                    problems.append(f"stream {sid} (client {client.index}), step {k} (by {e.via}, x {describe(e.feeds)})"
                                    f": {name} differs from the stream alone: {got.ravel()[:4]} vs {w.ravel()[:4]}; "
                                    f"its steps: {', '.join(f'{d.via} x {describe(d.feeds)}' for d in done[:k + 1])}")
                    break
            else:
                continue
            break
    return problems


def describe(feeds: dict) -> str:
    x = np.asarray(feeds["x"])
    marks = [m for m, bad in (("nan", np.isnan(x).any()), ("inf", np.isinf(x).any()),
                              ("1000x", np.abs(x).max(initial=0) > 100)) if bad]
    return f"{x.shape}{'/'.join([''] + marks)} gain {float(np.asarray(feeds['gain']))}"


def fuzz(cls, seed: int) -> list[str]:
    """One batcher of ``cls`` under THREADS clients; returns what went wrong."""
    rng = np.random.default_rng(seed)
    options = {"max_batch": int(rng.choice([1, 2, 4, 256])), "workers": int(rng.integers(1, 4)),
               "max_wait_ms": float(rng.choice([0.0, 0.5, 2.0, 20.0]))}
    batcher = cls(MODEL, CARRY, **options)
    shared = Shared()
    shutdown_by = int(rng.integers(THREADS)) if rng.random() < 0.5 else None
    clients = [Client(batcher, shared, seed, k,
                      int(rng.integers(OPS // 2, OPS)) if k == shutdown_by else None) for k in range(THREADS)]
    errors = []

    def body(c):
        try:
            c.run()
        except Exception as e:  # noqa: BLE001 - the fuzz's own fault, reported
            errors.append(f"client {c.index} crashed: {type(e).__name__}: {e}\n{traceback.format_exc()}")
    threads = [threading.Thread(target=body, args=(c,), daemon=True, name=f"fuzz-{c.index}") for c in clients]
    for t in threads:
        t.start()
    deadline = time.monotonic() + BUDGET
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()))
    hung = [c for c, t in zip(clients, threads) if t.is_alive()]
    if hung:
        report = [f"{options}: client {c.index} still waiting after {BUDGET:g} s; last calls: {'; '.join(c.calls)}"
                  for c in hung]
        batcher.shutdown(wait=False)  # releases the waiting callers
        for t in threads:
            t.join(WAIT)
        return report
    batcher.shutdown()
    session = InferenceSession(MODEL.SerializeToString())
    problems = [*errors, *shared.failures]
    for c in clients:
        problems += check_alone(c, session)
    return [f"{cls.__name__} seed {seed} {options}: {p}" for p in problems]


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("cls", [StreamBatcher, ReferenceStreamBatcher], ids=["native", "reference"])
def test_fuzz(cls, seed):
    problems = fuzz(cls, seed)
    assert not problems, f"{len(problems)} problem(s):\n" + "\n".join(problems[:6])


# -- what the fuzz found (each fixed on main since; kept as the cases that found them) ------------------
def feeds_of(t: int = 1, gain=None) -> dict:
    return {"x": np.ones((t, 1, I), np.float32), "gain": np.array(1.0, np.float32) if gain is None else gain}


def returns_within(call, seconds: float, release) -> bool:
    """Whether ``call`` returns within ``seconds`` (run on a thread; ``release`` frees it after)."""
    t = threading.Thread(target=call, daemon=True)
    t.start()
    t.join(seconds)
    hung = t.is_alive()
    release()
    t.join(WAIT)
    return not hung


BATCHERS = [pytest.param(StreamBatcher, id="native"), pytest.param(ReferenceStreamBatcher, id="reference")]


@pytest.mark.parametrize("cls", BATCHERS)
def test_a_caller_that_waits_for_company_is_woken(cls):
    """workers=1: rounds of a step_many of 250 streams, each followed by one step of one stream. The
    burst made the arrival rate look high, so the native engine's lone caller waited for company
    with no deadline and no worker told the time: 30 of 30 tries hung (as the closed-loop benchmark
    with one client did)."""
    with cls(MODEL, CARRY, workers=1) as b:
        ids = [b.open() for _ in range(250)]
        pairs = [(i, feeds_of()) for i in ids]

        def rounds():
            for _ in range(10):
                b.step_many(pairs)
                b.step(ids[0], feeds_of())
        assert returns_within(rounds, 3.0, lambda: b.shutdown(wait=False)), "no result in 3 s"


@pytest.mark.parametrize("cls", BATCHERS)
def test_a_closed_streams_queued_step_strands_no_other(cls):
    """A stream closed while its step waits in the queue: the worker that finds it must still take
    the steps behind it (the native TakeBatch returned an empty batch for the closed stream's step
    and its worker parked, so a step of another kind queued behind never ran). The worker is held
    busy by a done-callback of a step it ran, so the order is certain."""
    with cls(MODEL, CARRY, workers=1, max_wait_ms=0) as b:
        closing, other = b.open(), b.open()
        for t in (1, 2):  # both kinds known: no analysis below
            b.step(other, feeds_of(t))
        worker_held, release = threading.Event(), threading.Event()

        def hold(_):
            if threading.current_thread() is not threading.main_thread():
                worker_held.set()
                release.wait(WAIT)
        for _ in range(50):  # until the callback runs on the worker (not at once, here, on a done future)
            b.submit(b.open(), feeds_of(1), run_here=False).add_done_callback(hold)
            if worker_held.wait(0.5):
                break
        assert worker_held.is_set()
        doomed = b.submit(closing, feeds_of(1), run_here=False)  # queued while the worker is held, then closed
        b.close(closing)
        stranded = b.submit(other, feeds_of(2), run_here=False)  # queued behind it: another kind
        release.set()
        with pytest.raises(StreamClosed):
            doomed.result(WAIT)
        try:
            stranded.result(3.0)
        except concurrent.futures.TimeoutError:
            b.shutdown(wait=False)
            pytest.fail("a step of another kind had no result in 3 s after a closed stream's step was dropped")


@pytest.mark.parametrize("cls", BATCHERS)
def test_a_scalar_input_fed_with_rank_1_is_refused(cls):
    """gain is declared a scalar: (1,) is another rank (the native _prepare made 0-d feeds 1-d, so
    the kind was registered with gain (1,) and rank-1 gains then passed the fast path unchecked)."""
    with cls(MODEL, CARRY) as b:
        s = b.open()
        b.step(s, feeds_of())
        with pytest.raises(StreamError, match="gain"):
            b.step(s, feeds_of(gain=np.ones(1, np.float32)))


def test_steps_with_a_0d_input_take_the_fast_path():
    """A 0-d input (silero-vad's sr) once sent every native step through Python's checks."""
    with StreamBatcher(MODEL, CARRY) as b:
        s = b.open()
        b.step(s, feeds_of())  # learns the kind
        assert b._engine.step(s, feeds_of()) is not None, "the fast path refused a kind it has registered"


@pytest.mark.parametrize("cls", BATCHERS)
@pytest.mark.parametrize("verb", ["step", "submit"])
def test_none_as_feeds(cls, verb):
    """(nanobind refused None before any check: TypeError 'incompatible function arguments'.)"""
    with cls(MODEL, CARRY) as b:
        with pytest.raises(StreamError, match="a dict"):
            getattr(b, verb)(b.open(), None)


@pytest.mark.parametrize("cls", BATCHERS)
@pytest.mark.parametrize("verb", ["step", "submit", "step_many", "close", "state", "step_batch"])
def test_ids_past_int64_are_streams_never_opened(cls, verb):
    """(They reached the native bindings' int64 arguments: nanobind's TypeError.)"""
    with cls(MODEL, CARRY) as b:
        b.step(b.open(), feeds_of())
        call = {"step": lambda: b.step(2 ** 63, feeds_of()), "submit": lambda: b.submit(-(2 ** 70), feeds_of()),
                "step_many": lambda: b.step_many([(2 ** 64, feeds_of())]), "close": lambda: b.close(2 ** 63),
                "state": lambda: b.state(2 ** 63), "step_batch": lambda: b.step_batch([2 ** 63], feeds_of())}[verb]
        with pytest.raises(StreamClosed):
            call()


@pytest.mark.parametrize("cls", BATCHERS)
@pytest.mark.parametrize("shape", [(3, 0, I), (0, 1, I)], ids=["batch 0", "no time steps"])
def test_an_empty_chunk_is_refused_at_submit(cls, shape):
    """(A batch of 0 of a chunk length not seen yet was a kind of its own: queued, failed in the call
    and marked the batcher unbatched with a warning.)"""
    with cls(MODEL, CARRY) as b:
        s = b.open()
        b.step(s, feeds_of(1))
        with pytest.raises(StreamError):
            b.submit(s, {"x": np.ones(shape, np.float32), "gain": np.array(1.0, np.float32)})
        assert b.batched and not b.fallback_reasons


@pytest.mark.parametrize("cls", BATCHERS)
@pytest.mark.parametrize("pair", ["pair of 3", "None pair", "bare id"])
def test_step_many_names_a_bad_pair(cls, pair):
    """(The reference unpacked each pair raw: ValueError 'too many values to unpack'.)"""
    with cls(MODEL, CARRY) as b:
        s = b.open()
        bad = {"pair of 3": (s, feeds_of(), 1), "None pair": None, "bare id": s}[pair]
        with pytest.raises(StreamError, match="pair"):
            b.step_many([(s, feeds_of()), bad])
