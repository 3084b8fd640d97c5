#!/usr/bin/env python3
"""StreamBatcher on CUDA (issue 44's GPU targets), silero-vad 16k from the corpus, one process:

  one      one stream's step(), silero-vad and an L2 H128 LSTM stepped T=1: p50/p99 us with the kind's
           CUDA graph and without, against the same step as a plain `run` (numpy in/out)
  tick     step_batch of S streams' stacked chunks (a server's tick): p50/p99/p99.9 ms, against the
           same call as one plain `run` of the model on the stacked chunks and states
  clients  S streams stepped with step() by K client threads, each stepping its streams in turn:
           steps/s and per-step latency p50/p99/p99.9 (measured around each call)
  async    S streams, each sending a chunk every 32 ms from one event loop (a coroutine per stream
           awaiting astep: streams-bench's async pattern): steps/s, latency from each chunk's time,
           late chunks; beside it the same load through asyncio.wrap_future(submit(...)) (astep
           before its results were set per call in the loop)

    python tools/streams_gpu_bench.py --stages one,tick,clients,async --ticks 1024,4096,10000,25000 \\
        --clients 256x16,1024x16,4096x32,10000x32 --async 1000,2000,3000,10000 --seconds 5 --json streams_gpu.json

Without a CUDA GPU it runs on the CPU provider (for trying it out); the numbers it prints say which.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "models"))

CHUNK = 576


def percentiles(samples) -> dict:
    a = np.asarray(samples, np.float64)
    return {q: float(np.percentile(a, p)) for q, p in (("p50", 50), ("p99", 99), ("p999", 99.9))} if a.size else {}


def silero():
    import corpus

    from lstm_ort.rewriter import optimize

    entry = next(e for e in corpus.ENTRIES if e.name == "silero_vad 16k")
    return optimize(entry.build()), dict(entry.carry)


def chunk(rng, n=1):
    return (0.1 * rng.standard_normal((n, CHUNK))).astype(np.float32)


def lstm_step():
    """An L2 H128 LSTM stepped T=1 (the issue's one-stream shape): model, carry, one step's feeds."""
    from lstm_ort import builders
    from lstm_ort.ops.spec import LstmSpec

    spec = LstmSpec(input_size=128, hidden_size=128, num_layers=2)
    model = builders.fused_model(spec, builders.random_layers(spec, np.random.default_rng(0)), initial_states=True)
    model.ir_version = min(model.ir_version, 10)
    x = (0.1 * np.random.default_rng(1).standard_normal((1, 1, 128))).astype(np.float32)
    return model, {"Y_h": "initial_h", "Y_c": "initial_c"}, {"X": x}


def stage_one(model, carry, feeds, providers, steps=2000, blocks=10) -> dict:
    """One stream's step() with the kind's CUDA graph on and off (a batcher each) and the same step
    as a plain `run` (numpy in and out, the state carried by hand), in interleaved blocks."""
    import onnxruntime as ort

    from lstm_ort.runtime.session import InferenceSession
    from lstm_ort.serving.streams import StreamBatcher
    from lstm_ort.serving.streams.native_session import CUDA_GRAPHS_KEY

    session = InferenceSession(model.SerializeToString(), providers=providers)
    names = [o.name for o in session.get_outputs()]
    batchers, ids = {}, {}
    for way, value in (("graph", "1"), ("no_graph", "0")):
        so = ort.SessionOptions()
        so.log_severity_level = 3
        so.add_session_config_entry(CUDA_GRAPHS_KEY, value)
        batchers[way] = StreamBatcher(model, carry, providers=providers, session_options=so)
        ids[way] = batchers[way].open()
        batchers[way].step(ids[way], feeds)
        batchers[way].wait_specialized(300)
    fresh = batchers["graph"].open()
    state = {i: np.zeros_like(v) for i, v in batchers["graph"].state(fresh).items()}  # a new stream's
    batchers["graph"].close(fresh)
    times = {"graph": [], "no_graph": [], "plain": []}
    for block in range(blocks + 1):
        for way in ("graph", "no_graph"):
            b, sid = batchers[way], ids[way]
            got = []
            for _ in range(steps // blocks):
                t = time.perf_counter()
                b.step(sid, feeds)
                got.append(time.perf_counter() - t)
            if block:  # the first block warms up (the graph is captured on the third call)
                times[way] += got
        got = []
        for _ in range(steps // blocks):
            t = time.perf_counter()
            out = session.run(None, {**feeds, **state})
            got.append(time.perf_counter() - t)
            state = {i: out[names.index(o)] for o, i in carry.items()}
        if block:
            times["plain"] += got
    use = batchers["graph"].cuda_graphs()
    for b in batchers.values():
        b.shutdown()
    return {**{f"{way}_us": {k: v * 1e6 for k, v in percentiles(t).items()} for way, t in times.items()},
            "cuda_graphs": {str(g): list(v) for g, v in use.items()}}


def stage_tick(batcher, session, rng, streams: int, ticks: int) -> dict:
    ids = [batcher.open() for _ in range(streams)]
    sr = np.array(16000, np.int64)
    x = chunk(rng, streams)
    for _ in range(3):
        batcher.step_batch(ids, {"input": x, "sr": sr})
    ours = []
    for _ in range(ticks):
        x = chunk(rng, streams)
        t = time.perf_counter()
        batcher.step_batch(ids, {"input": x, "sr": sr})
        ours.append(time.perf_counter() - t)
    state = np.zeros((2, streams, 128), np.float32)
    for _ in range(3):
        state = session.run(None, {"input": x, "sr": sr, "state": state})[1]
    plain = []
    for _ in range(ticks):
        x = chunk(rng, streams)  # fresh chunks each tick, as for ours (a buffer just written is not in cache)
        t = time.perf_counter()
        state = session.run(None, {"input": x, "sr": sr, "state": state})[1]
        plain.append(time.perf_counter() - t)
    for i in ids:
        batcher.close(i)
    o, p = percentiles(ours), percentiles(plain)
    return {"streams": streams, "tick_ms": {k: v * 1e3 for k, v in o.items()},
            "plain_call_ms": {k: v * 1e3 for k, v in p.items()}, "tick_over_plain_p50": o["p50"] / p["p50"],
            "real_time_streams_at_p99": int(streams * 0.032 / o["p99"])}


def stage_clients(batcher, rng, streams: int, clients: int, seconds: float) -> dict:
    ids = [batcher.open() for _ in range(streams)]
    chunks = [{"input": chunk(rng), "sr": np.array(16000, np.int64)} for _ in range(32)]
    stop = threading.Event()
    lat: list[list[float]] = [[] for _ in range(clients)]
    counts = [0] * clients

    def client(k):
        mine = ids[k::clients]
        i = 0
        mine_lat = lat[k]
        while not stop.is_set():
            for s in mine:
                t = time.perf_counter()
                batcher.step(s, chunks[i & 31])
                mine_lat.append(time.perf_counter() - t)
                i += 1
                counts[k] = i

    threads = [threading.Thread(target=client, args=(k,), daemon=True) for k in range(clients)]
    for t in threads:
        t.start()
    time.sleep(1.0)
    for k in range(clients):
        lat[k].clear()
    batcher.reset_stats()  # this stage's calls only (the mean batch)
    c0, t0 = sum(counts), time.perf_counter()
    time.sleep(seconds)
    c1, t1 = sum(counts), time.perf_counter()
    stop.set()
    for t in threads:
        t.join(timeout=30)
    st = batcher.stats()
    for i in ids:
        batcher.close(i)
    allv = [v for part in lat for v in part]
    return {"streams": streams, "clients": clients, "steps_per_s": (c1 - c0) / (t1 - t0),
            "real_time_streams": int((c1 - c0) / (t1 - t0) * 0.032),
            "latency_ms": {k: v * 1e3 for k, v in percentiles(allv).items()}, "mean_batch": st.mean_batch}


class WrappedSubmit:
    """astep as it was: the step's concurrent Future wrapped for the loop, one hand-over a step."""

    def __init__(self, system):
        self.system, self.name = system, "wrap_future"

    def __getattr__(self, name):
        return getattr(self.system, name)

    async def astep(self, stream, feeds):
        import asyncio

        await asyncio.wrap_future(self.system.batcher.submit(stream, feeds, run_here=False))


def stage_async(batcher, streams: int, seconds: float, wrapped: bool) -> dict:
    from lstm_ort.serving.streams.load import Load, run_phase
    from lstm_ort.serving.streams.systems import BatcherSystem

    rng = np.random.default_rng(1)
    pool = [{"input": chunk(rng), "sr": np.array(16000, np.int64)} for _ in range(32)]
    system = BatcherSystem(batcher)
    phase = run_phase(WrappedSubmit(system) if wrapped else system,
                      Load("async", streams, 1, seconds, warmup=1.0, period=0.032), pool)
    r = phase.summary()
    r["way"] = "wrap_future" if wrapped else "astep"
    r["due_per_s"] = streams / 0.032
    return r


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--stages", default="one,tick,clients,async")
    p.add_argument("--ticks", default="1024,4096,10000,25000")
    p.add_argument("--tick-count", type=int, default=50)
    p.add_argument("--clients", default="256x16,1024x16,4096x32,10000x32")
    p.add_argument("--async", dest="async_streams", default="1000,2000,3000,10000")
    p.add_argument("--max-batch", type=int, default=256)
    p.add_argument("--seconds", type=float, default=5.0)
    p.add_argument("--json")
    p.add_argument("--no-specialize", action="store_true", help="kinds run the model as it came (StreamBatcher specialize=False)")
    p.add_argument("--cuda-graphs", choices=("0", "1"), default="1",
                   help="the tick, clients and async stages' batcher: 0 makes no graphed session (the one stage "
                        "measures both ways regardless)")
    args = p.parse_args(argv)
    warnings.simplefilter("ignore")
    import onnxruntime as ort

    from lstm_ort.runtime.session import InferenceSession
    from lstm_ort.serving.streams import StreamBatcher

    cuda = "CUDAExecutionProvider" in ort.get_available_providers()
    providers = ["CUDAExecutionProvider", "CPUExecutionProvider"] if cuda else ["CPUExecutionProvider"]
    model, carry = silero()
    rng = np.random.default_rng(0)
    session = InferenceSession(model.SerializeToString(), providers=providers)
    out = {"device": "cuda" if cuda else "cpu", "cuda_graphs": args.cuda_graphs, "stages": {}}
    from lstm_ort.serving.streams.native_session import CUDA_GRAPHS_KEY

    options = ort.SessionOptions()
    options.add_session_config_entry(CUDA_GRAPHS_KEY, args.cuda_graphs)
    with StreamBatcher(model, carry, providers=providers, specialize=not args.no_specialize,
                       max_batch=args.max_batch, session_options=options) as b:
        b.step(b.open(), {"input": chunk(rng), "sr": np.array(16000, np.int64)})  # the kind, and its own models
        out["specialized"] = b.wait_specialized(300)
        print(f"specialized: {out['specialized']}", flush=True)
        stages = args.stages.split(",")
        if "one" in stages:
            out["stages"]["one"] = {}
            silero_step = (model, carry, {"input": chunk(rng), "sr": np.array(16000, np.int64)})
            for name, (m, c, feeds) in (("silero-vad", silero_step), ("lstm L2 H128 T1", lstm_step())):
                r = stage_one(m, c, feeds, providers)
                out["stages"]["one"][name] = r
                print(f"one stream, {name}: step p50 {r['graph_us']['p50']:.0f} us p99 {r['graph_us']['p99']:.0f} "
                      f"(CUDA graphs {r['cuda_graphs']}); without the graph p50 {r['no_graph_us']['p50']:.0f} p99 "
                      f"{r['no_graph_us']['p99']:.0f}; plain run p50 {r['plain_us']['p50']:.0f} p99 "
                      f"{r['plain_us']['p99']:.0f} us", flush=True)
        if "tick" in stages:
            out["stages"]["tick"] = []
            for s in (int(v) for v in args.ticks.split(",")):
                r = stage_tick(b, session, rng, s, args.tick_count)
                out["stages"]["tick"].append(r)
                print(f"tick {s:>6} streams: p50 {r['tick_ms']['p50']:.2f} p99 {r['tick_ms']['p99']:.2f} "
                      f"p99.9 {r['tick_ms']['p999']:.2f} ms; plain call p50 {r['plain_call_ms']['p50']:.2f} ms; "
                      f"x{r['tick_over_plain_p50']:.2f}; real time for {r['real_time_streams_at_p99']} streams",
                      flush=True)
        if "clients" in stages:
            out["stages"]["clients"] = []
            for spec in args.clients.split(","):
                s, k = (int(v) for v in spec.split("x"))
                r = stage_clients(b, rng, s, k, args.seconds)
                out["stages"]["clients"].append(r)
                lat = r["latency_ms"]
                print(f"step() {s:>6} streams x {k} clients: {r['steps_per_s']:,.0f} steps/s (real time for "
                      f"{r['real_time_streams']}), latency p50 {lat['p50']:.2f} p99 {lat['p99']:.2f} "
                      f"p99.9 {lat['p999']:.2f} ms, mean batch {r['mean_batch']:.1f}", flush=True)
        if "async" in stages:
            out["stages"]["async"] = []
            for s in (int(v) for v in args.async_streams.split(",")):
                for wrapped in (False, True):
                    r = stage_async(b, s, args.seconds, wrapped)
                    out["stages"]["async"].append(r)
                    print(f"async {s:>6} streams ({r['way']}): {r['steps_per_s']:,.0f} steps/s of {r['due_per_s']:,.0f} due, "
                          f"latency p50 {r['latency_p50_ms']:.2f} p99 {r['latency_p99_ms']:.2f} p99.9 "
                          f"{r['latency_p999_ms']:.2f} ms, late {r['late']}/{r['ticks']}, mean batch "
                          f"{r['counters']['mean_batch']:.1f}", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
