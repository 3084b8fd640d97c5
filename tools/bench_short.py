#!/usr/bin/env python3
"""Short calls on CUDA: microseconds per FusedLSTM call against stock onnxruntime's LSTM, in one
process, on the same weights, interleaved in blocks.

Two ways a caller makes short calls:
  bound    one IOBinding reused: inputs and outputs bound once on the device, `run_with_iobinding`
           per call (the fixed cost of a call: B=1 and B=256 should cost about the same)
  chained  streaming: (h, c) carried from each call's outputs into the next call's initial
           states, a binding made per call, outputs allocated by onnxruntime
  graphed  bound, in sessions made with the CUDA provider's enable_cuda_graph=1: each run replays
           the graph its first runs captured (onnxruntime's own floor for a call: issue 44 names
           stock's 35 us on an H100 as the anchor)

    python tools/bench_short.py                       # L1 H128, L2 H128, L2 H512; T 1 4 10 20; B 1-1024
    python tools/bench_short.py --stacks 2x128 --steps 1 --batches 1,256 --profile --json short.json

Stock is timed at its default (TF32) and with use_tf32=0; the ratio is against the faster.
--profile adds onnxruntime's node profile: the host time of each node's Compute, per call.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import onnxruntime as ort

from lstm_ort.builders import LstmSpec, fused_model, random_layers, stock_model
from lstm_ort.ops.identity import OPTIMIZE_PRECISION
from lstm_ort.tuning.timing import timing_session
from lstm_ort.testing import max_abs

STATES = ("initial_h", "initial_c")


@dataclass
class ShortRow:
    stack: str  # LxH
    T: int
    B: int
    mode: str  # bound or chained
    ours_us: float
    stock_fp32_us: float
    stock_tf32_us: float
    vs_stock: float  # the faster stock over ours
    err: float  # max-abs of ours against stock FP32 after one call
    plan: str = ""
    direct_us: float | None = None  # --direct: ours with call_graphs=0 (every launch made per call)
    ours_node_us: float | None = None  # --profile: host time in the FusedLSTM node's Compute
    stock_nodes_us: float | None = None  # --profile: host time in stock's nodes, summed
    strategies_us: dict | None = None  # --strategy a,b,...: ours with each strategy after the first


def strategy_and_precision(text: str) -> tuple[str, str]:
    """A --strategy entry: a CUDA strategy, optionally with ours' precision after an @ (tiled@tf32)."""
    strategy, _, precision = text.partition("@")
    return strategy, precision or OPTIMIZE_PRECISION


def session(model, fused: bool, tf32: bool, profile: str | None = None, debug: dict | None = None,
            strategy: str = "auto", cuda_graph: bool = False):
    """`strategy`: a --strategy entry (strategy_and_precision)."""
    strategy, precision = strategy_and_precision(strategy)
    return timing_session(model, "cuda", fused, tf32, strategy, precision if fused else None,
                          debug=debug, profile=profile, cuda_graph=cuda_graph)


class Caller:
    """One session called the way `mode` says, on device-resident inputs."""

    def __init__(self, sess, feeds: dict, mode: str):
        self.sess, self.mode = sess, mode
        self.outputs = [o.name for o in sess.get_outputs()]
        self.x = ort.OrtValue.ortvalue_from_numpy(feeds["X"], "cuda", 0)
        self.states = [ort.OrtValue.ortvalue_from_numpy(feeds[s], "cuda", 0) for s in STATES]
        if mode in ("bound", "graphed"):
            self.binding = sess.io_binding()
            self.binding.bind_ortvalue_input("X", self.x)
            for name, value in zip(STATES, self.states):
                self.binding.bind_ortvalue_input(name, value)
            T, B = feeds["X"].shape[:2]
            LD, _, H = feeds["initial_h"].shape
            for name in self.outputs:  # one direction: Y is [T, 1, B, H]
                shape = [T, 1, B, H] if name == "Y" else [LD, B, H]
                self.binding.bind_ortvalue_output(name, ort.OrtValue.ortvalue_from_shape_and_type(shape, np.float32,
                                                                                                  "cuda", 0))

    def __call__(self):
        if self.mode in ("bound", "graphed"):
            self.sess.run_with_iobinding(self.binding)
            return
        outs = dict(zip(self.outputs, self._run_fresh()))
        self.states = [outs["Y_h"], outs["Y_c"]]

    def first_outputs(self):
        return [o.numpy() for o in self._run_fresh()]

    def _run_fresh(self):
        """One call through a binding made for it, outputs placed by onnxruntime."""
        b = self.sess.io_binding()
        b.bind_ortvalue_input("X", self.x)
        for name, value in zip(STATES, self.states):
            b.bind_ortvalue_input(name, value)
        for name in self.outputs:
            b.bind_output(name, "cuda", 0)
        self.sess.run_with_iobinding(b)
        return b.get_outputs()


def interleaved_us(callers: dict, rounds: int, block: int) -> dict:
    """Median microseconds per call of each caller, taking turns in blocks of `block` calls."""
    times = {name: [] for name in callers}
    for name, call in callers.items():  # warm-up: plans, graphs, allocator arenas
        for _ in range(block):
            call()
    for _ in range(rounds):
        for name, call in callers.items():
            for _ in range(block):
                t0 = time.perf_counter()
                call()
                times[name].append((time.perf_counter() - t0) * 1e6)
    return {name: statistics.median(t) for name, t in times.items()}


def node_host_us(profile_path: str, calls: int) -> tuple[float | None, float | None]:
    """Host microseconds per call in FusedLSTM nodes and in the other (stock) nodes' Compute."""
    events = json.loads(Path(profile_path).read_text())
    fused = stock = 0.0
    for e in events:
        if e.get("cat") != "Node" or not e.get("name", "").endswith("_kernel_time"):
            continue
        if e.get("args", {}).get("op_name") == "FusedLSTM":
            fused += e["dur"]
        else:
            stock += e["dur"]
    return (fused / calls if fused else None), (stock / calls if stock else None)


def bench_one(L: int, H: int, T: int, B: int, mode: str, rounds: int, block: int, profile: bool,
              direct: bool = False, strategy: str = "auto") -> ShortRow:
    strategy, *others = strategy.split(",")
    spec = LstmSpec(input_size=H, hidden_size=H, num_layers=L)
    rng = np.random.default_rng(0)
    layers = random_layers(spec, rng)
    feeds = {"X": rng.standard_normal((T, B, H)).astype(np.float32),
             "initial_h": (0.1 * rng.standard_normal((L, B, H))).astype(np.float32),
             "initial_c": (0.1 * rng.standard_normal((L, B, H))).astype(np.float32)}
    ours_model = fused_model(spec, layers, initial_states=True)
    stock = stock_model(spec, layers, initial_states=True)
    graph = mode == "graphed"
    callers = {"ours": Caller(session(ours_model, True, False, strategy=strategy, cuda_graph=graph), feeds, mode),
               "stock_fp32": Caller(session(stock, False, False, cuda_graph=graph), feeds, mode),
               "stock_tf32": Caller(session(stock, False, True, cuda_graph=graph), feeds, mode)}
    for other in others:  # in the same turns as the first, so that their times compare within one window
        callers[other] = Caller(session(ours_model, True, False, strategy=other, cuda_graph=graph), feeds, mode)
    if direct:
        callers["direct"] = Caller(session(ours_model, True, False, debug={"call_graphs": "0"}, strategy=strategy,
                                           cuda_graph=graph), feeds, mode)
    if graph:  # a graphed session's outputs are the bound ones: its first calls (the capture) give them
        for c in callers.values():
            c()
        err = max_abs([v.numpy() for v in callers["ours"].binding.get_outputs()],
                      [v.numpy() for v in callers["stock_fp32"].binding.get_outputs()])
    else:
        err = max_abs(callers["ours"].first_outputs(), callers["stock_fp32"].first_outputs())
    us = interleaved_us(callers, rounds, block)
    best = min(us["stock_fp32"], us["stock_tf32"])
    row = ShortRow(f"L{L}xH{H}", T, B, mode, us["ours"], us["stock_fp32"], us["stock_tf32"], best / us["ours"], err,
                   direct_us=us.get("direct"), strategies_us={o: us[o] for o in others} or None)
    try:
        from lstm_ort.runtime import native
        from lstm_ort.runtime.nodes import NodeShape

        row.plan = native.describe(NodeShape(L, 1, H, H, "float32"), T, B, *strategy_and_precision(strategy))
    except RuntimeError as e:  # a report column only
        row.plan = f"(no description: {e})"
    if profile:
        with tempfile.TemporaryDirectory() as tmp:
            calls = rounds * block
            for name, fused in (("ours", True), ("stock", False)):
                sess = session(ours_model if fused else stock, fused, False, profile=f"{tmp}/{name}",
                               strategy=strategy)
                c = Caller(sess, feeds, mode)
                for _ in range(calls):
                    c()
                f_us, s_us = node_host_us(sess.end_profiling(), calls)
                if fused:
                    row.ours_node_us = f_us
                else:
                    row.stock_nodes_us = s_us
    return row


def print_rows(rows: list[ShortRow]) -> None:
    print(f"{'stack':<9}{'T':>4}{'B':>6} {'mode':<8}{'ours us':>9}{'direct':>8}{'stock32':>9}{'stock tf32':>11}"
          f"{'x stock':>8}{'err':>9}{'node us':>9}{'stock node':>11}  plan")
    for r in rows:
        node = f"{r.ours_node_us:9.1f}" if r.ours_node_us is not None else f"{'-':>9}"
        snode = f"{r.stock_nodes_us:11.1f}" if r.stock_nodes_us is not None else f"{'-':>11}"
        direct = f"{r.direct_us:8.1f}" if r.direct_us is not None else f"{'-':>8}"
        print(f"{r.stack:<9}{r.T:>4}{r.B:>6} {r.mode:<8}{r.ours_us:9.1f}{direct}{r.stock_fp32_us:9.1f}"
              f"{r.stock_tf32_us:11.1f}"
              f"{r.vs_stock:8.2f}{r.err:9.1e}{node}{snode}  {r.plan}")
        if r.strategies_us:
            print(" " * 28 + "  ".join(f"{name} {us:.1f}" for name, us in r.strategies_us.items()))


def ints(text: str) -> list[int]:
    return [int(v) for v in text.split(",")]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--stacks", default="1x128,2x128,2x512", help="LxH, comma-separated")
    p.add_argument("--steps", type=ints, default=[1, 4, 10, 20])
    p.add_argument("--batches", type=ints, default=[1, 16, 64, 256, 1024])
    p.add_argument("--modes", default="bound,chained", help="of bound, chained, graphed (see above)")
    p.add_argument("--rounds", type=int, default=8)
    p.add_argument("--block", type=int, default=25, help="calls per turn")
    p.add_argument("--strategy", default="auto", help="ours with this CUDA strategy (lstm_ort.strategy), "
                   "strategy@precision for another precision than auto (auto@tf32); a,b,...: the first is the row's, "
                   "the others are timed in the same turns")
    p.add_argument("--direct", action="store_true", help="also ours with call_graphs=0: every launch made per call")
    p.add_argument("--profile", action="store_true", help="also onnxruntime's node profile (host time in Compute)")
    p.add_argument("--json", help="write the rows here")
    args = p.parse_args(argv)
    unknown = set(args.modes.split(",")) - {"bound", "chained", "graphed"}
    if unknown:
        p.error(f"--modes: no mode {', '.join(sorted(unknown))} (bound, chained, graphed)")
    if "CUDAExecutionProvider" not in ort.get_available_providers():
        print("bench_short: onnxruntime has no CUDA execution provider here", file=sys.stderr)
        return 2
    rows = []
    for stack in args.stacks.split(","):
        L, H = (int(v) for v in stack.split("x"))
        for mode in args.modes.split(","):
            for T in args.steps:
                for B in args.batches:
                    rows.append(bench_one(L, H, T, B, mode, args.rounds, args.block, args.profile, args.direct,
                                         args.strategy))
                    print_rows(rows[-1:])
                    sys.stdout.flush()
    print()
    print_rows(rows)
    if args.json:
        Path(args.json).write_text(json.dumps([asdict(r) for r in rows], indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
