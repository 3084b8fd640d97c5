#!/usr/bin/env python3
"""Where a GPU call's time goes: every kernel and copy of N calls, from CUPTI (torch.profiler's
kineto, which records the whole process's device activity, onnxruntime's kernels included), per
system on the same weights and inputs, for tools/bench.py's configs.

    python tools/gpu_kernel_profile.py --config 1,100,2048,512 --config 1,100,2048,8,bi \\
        --systems ours,stock_tf32,stock_fp32,torch_tf32 [--precision fp16] [--calls 10] [--json out.json]

Per system and config: the wall time of a call (median, IOBinding, synchronised), the device's busy
time in it (the union of its kernels' and copies' intervals) and the kernels grouped by name, each
with its launches and microseconds per call. Wall minus busy is time the device waited (launch
gaps, host work, syncs). Systems: ours (the optimized model at --precision, default auto),
stock_tf32 / stock_fp32 (onnxruntime CUDA on the original model, TF32 on / off), stock_fp16 (the
fp16 model), torch_tf32 / torch_fp32 (nn.LSTM on cuDNN).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench import config_case, label, parse_config, torch_runner  # noqa: E402  (tools/bench.py)

from lstm_ort.builders import LstmSpec, fused_model, stock_model  # noqa: E402
from lstm_ort.tuning.timing import OrtRunner  # noqa: E402

SYSTEMS = ("ours", "stock_tf32", "stock_fp32", "stock_fp16", "torch_tf32", "torch_fp32")


def state_feeds(spec: LstmSpec, B: int) -> dict:
    """initial_h / initial_c as a streaming caller passes them (its last call's Y_h / Y_c)."""
    rng = np.random.default_rng(1)
    shape = (spec.num_layers * spec.num_directions, B, spec.hidden_size)
    return {name: (0.1 * rng.standard_normal(shape)).astype(np.float32) for name in ("initial_h", "initial_c")}


def runner_for(system: str, spec: LstmSpec, layers, x: np.ndarray, precision: str, states: bool = False):
    """(call, sync) for one system on these weights; `states`: the ONNX systems are fed initial states."""
    import torch

    def sync():
        torch.cuda.synchronize()

    feeds = {"X": x, **(state_feeds(spec, x.shape[1]) if states else {})}
    if system == "ours":
        r = OrtRunner(fused_model(spec, layers, initial_states=states), feeds, "cuda", fused=True, precision=precision)
    elif system in ("stock_tf32", "stock_fp32"):
        r = OrtRunner(stock_model(spec, layers, initial_states=states), feeds, "cuda", fused=False,
                      tf32=system == "stock_tf32")
    elif system == "stock_fp16":
        half = {k: v.astype(np.float16) for k, v in feeds.items()}
        r = OrtRunner(stock_model(spec, layers, np.float16, initial_states=states), half, "cuda", False, tf32=True)
    else:
        run, _, tsync = torch_runner(spec, layers, x, "cuda", tf32=system == "torch_tf32")
        return run, tsync
    return r, sync


def busy_us(intervals: list[tuple[float, float]]) -> float:
    """The length of the union of [start, end) intervals."""
    total, end = 0.0, -1e300
    for s, e in sorted(intervals):
        if e <= end:
            continue
        total += e - max(s, end)
        end = e
    return total


def profile(call, sync, calls: int) -> dict:
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    for _ in range(5):
        call()
    sync()
    walls = []
    for _ in range(max(calls, 10)):
        t = time.perf_counter()
        call()
        sync()
        walls.append((time.perf_counter() - t) * 1e3)
    with torch_profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            call()
        sync()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "trace.json"
        prof.export_chrome_trace(str(path))
        events = json.loads(path.read_text()).get("traceEvents", [])
    by_name: dict[str, list[float]] = defaultdict(list)
    intervals = []
    for e in events:
        if e.get("ph") != "X" or e.get("cat") not in ("kernel", "gpu_memcpy", "gpu_memset"):
            continue
        ts, dur = float(e["ts"]), float(e.get("dur", 0))
        intervals.append((ts, ts + dur))
        by_name[e["name"]].append(dur)
    kernels = sorted(({"name": n, "per_call": len(d) / calls, "us_per_call": sum(d) / calls}
                      for n, d in by_name.items()), key=lambda k: -k["us_per_call"])
    return {"wall_ms": statistics.median(walls), "busy_ms": busy_us(intervals) / calls / 1e3,
            "launches_per_call": sum(len(d) for d in by_name.values()) / calls, "kernels": kernels}


def short(name: str, width: int = 78) -> str:
    return name if len(name) <= width else name[: width - 3] + "..."


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", action="append", required=True, help="L,T,H,B[,bi] (tools/bench.py's form)")
    p.add_argument("--systems", default="ours,stock_tf32,stock_fp32",
                   help=f"comma-separated, of {', '.join(SYSTEMS)}")
    p.add_argument("--precision", default="auto", help="ours' precision (auto, fp32, tf32, fp16, bf16)")
    p.add_argument("--calls", type=int, default=10, help="calls profiled per system")
    p.add_argument("--states", action="store_true",
                   help="feed initial_h / initial_c to the ONNX systems (a streaming call's recurrent product)")
    p.add_argument("--top", type=int, default=6, help="kernels printed per system")
    p.add_argument("--json", help="write every kernel of every system here")
    args = p.parse_args(argv)
    systems = [s.strip() for s in args.systems.split(",") if s.strip()]
    unknown = [s for s in systems if s not in SYSTEMS]
    if unknown:
        p.error(f"unknown systems {unknown}; choose from {', '.join(SYSTEMS)}")
    if args.calls < 1 or args.top < 1:
        p.error("--calls and --top must be at least 1")
    results = []
    for text in args.config:
        cfg = parse_config(text)
        spec, layers, x = config_case(cfg)
        row = {"config": label(cfg), "precision": args.precision, "systems": {}}
        for system in systems:
            call, sync = runner_for(system, spec, layers, x, args.precision, args.states)
            r = profile(call, sync, args.calls)
            row["systems"][system] = r
            print(f"{row['config']}  {system:<10} wall {r['wall_ms']:8.3f} ms  device busy {r['busy_ms']:8.3f} ms  "
                  f"idle {max(0.0, r['wall_ms'] - r['busy_ms']):7.3f} ms  launches/call {r['launches_per_call']:.0f}")
            for k in r["kernels"][: args.top]:
                print(f"      {k['us_per_call']:9.1f} us  x{k['per_call']:<6.0f} {short(k['name'])}")
        results.append(row)
        sys.stdout.flush()
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
