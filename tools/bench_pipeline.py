#!/usr/bin/env python3
"""Multi-GPU layer pipelining against one GPU running the same model (docs/pipeline.md).

    PYTHONPATH=. LSTM_ORT_LIBRARY=<lib> python3 tools/bench_pipeline.py --json out.json
    python3 tools/bench_pipeline.py --quick            # a small stack, to check the setup
    python3 tools/bench_pipeline.py --torch-export torchscript   # the stack as users export it

``--torch-export torchscript|dynamo`` builds ``torch.nn.LSTM(I, H, num_layers=L)``, exports it
with ``torch.onnx.export`` (the TorchScript exporter, or ``dynamo=True``; time and batch dynamic)
and runs ``lstm_ort.optimize`` on it, instead of building the fused stack directly; dynamo's
export runs at the example's length only (its Reshape of Y writes T), so it is exported once per
length the cases use, and its export time grows with T (torch 2.13 on a shared two-core box:
20 s at T=100, 100 s at T=400 for a small stack): ``--long-steps 0`` leaves the latency case out.

Default: an 8-layer H=1024 I=1024 fp32 stack (256 MiB of weights) on devices 0,1: throughput at
B in {64, 256}, T=100, and the latency of one sequence, B=1, T=2000. Both sides are timed the
way a caller sees them, numpy in and numpy out (``run``): the pipeline against
lstm_ort.InferenceSession on one GPU; the single GPU is also timed with its inputs and outputs
bound on the device (no transfers), the stricter baseline. For each case: the plan ``auto``
chose (and why), a sweep of micro-batch / chunk sizes, the measured bubble against GPipe's
(K-1)/(N+K-1), the transfer time per boundary, and the max-abs difference to the single GPU.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import onnxruntime as ort

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from lstm_ort.builders import LstmSpec, fused_model, random_layers
from lstm_ort.pipeline import PipelineSession
from lstm_ort.pipeline.backend import CudaBackend, DeviceView
from lstm_ort.pipeline.partition import C0, H0, STAGE_Y, YC, YH
from lstm_ort.runtime.session import InferenceSession

TARGETS = {"throughput_speedup_min": 1.8, "latency_ratio_max": 0.6}


def median_ms(fn, runs: int, warmup: int) -> tuple[float, list[float]]:
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times), times


class SingleGpu:
    def __init__(self, model, device: int, cpu: bool = False):
        providers = (["CPUExecutionProvider"] if cpu else
                     [("CUDAExecutionProvider", {"device_id": str(device)}), "CPUExecutionProvider"])
        self.sess = InferenceSession(model.SerializeToString(), providers=providers)
        self.device, self.where = device, "cpu" if cpu else "cuda"

    def run(self, feeds):
        return self.sess.run(None, feeds)

    def bound(self, feeds):
        """A callable running with inputs and outputs on the device: compute only."""
        binding = self.sess.io_binding()
        for name, value in feeds.items():
            binding.bind_ortvalue_input(name, ort.OrtValue.ortvalue_from_numpy(value, self.where, self.device))
        for out in self.sess.get_outputs():
            binding.bind_output(out.name, self.where, self.device)

        def call():
            self.sess.run_with_iobinding(binding)  # synchronises at the end of Run (the default)
        return call


def max_abs(a, b) -> float:
    return max(float(np.abs(x.astype(np.float64) - y).max(initial=0.0)) for x, y in zip(a, b))


def sweep_options(B: int, T: int, chunkable: bool, quick: bool) -> list[tuple[int | None, int | None]]:
    rows = sorted({B, max(1, B // 2), max(1, B // 4), max(1, B // 8)})
    chunks = [T] + ([c for c in (math.ceil(T / n) for n in (2, 4, 5, 8, 10, 16, 20, 32, 40)) if c < T]
                    if chunkable else [])
    opts = [(r, c) for r in rows for c in sorted(set(chunks))]
    if quick:
        opts = opts[:: max(1, len(opts) // 6)]
    if B == 1:
        opts = [(1, c) for c in sorted(set(chunks))]
    return opts


def stream_calls(B: int) -> int:
    """Calls per throughput stream: 16 at B=64, 4 at B=256 (1024 rows in all, at least 4 calls)."""
    return max(4, min(16, 1024 // B))


def run_blocks_probe(sess: PipelineSession, feeds) -> dict:
    """Does ORT's Run return before the GPU is done, with disable_synchronize_execution_providers?
    One stage-0 call on device buffers, as the executor makes it (a numpy input would add ORT's
    own host-to-device copy, which waits): host time of ``run`` against the GPU time between
    events around it."""
    be, ex = sess.backend, sess.executor
    st = ex.stages[0]
    plan = sess.last_plan
    rows, steps = plan.micro_batch, plan.time_chunk
    dtype = sess.pm.np_dtype
    x = feeds[next(iter(sess.pm.inputs))]
    x = np.ascontiguousarray(x[:steps, :rows] if sess.pm.layout == 0 else x[:rows, :steps])
    sshape = ex._state_shape(0, rows)
    x_buf = be.alloc(st.device, x.nbytes, "probe x")
    zero_buf = be.alloc(st.device, int(np.prod(sshape)) * np.dtype(dtype).itemsize, "probe zeros")
    x_view = DeviceView(x_buf, x.shape, dtype)
    be.copy_h2d(x_view, x, st.stream)
    be.memset(zero_buf, 0, st.stream)
    zeros = DeviceView(zero_buf, sshape, dtype)
    inputs = {next(iter(sess.pm.inputs)): x_view, H0: zeros, C0: zeros}
    outputs = {YH: DeviceView(st.h[0], sshape, dtype), YC: DeviceView(st.c[0], sshape, dtype)}
    if len(ex.stages) > 1:
        outputs[STAGE_Y] = DeviceView(ex.boundaries[0].send[0], ex._y_shape(rows, steps), dtype)
    else:
        outputs.update({o.name: None for o in sess.pm.outputs if o.kind == "post"})
    a, b = be.create_event(st.device, True), be.create_event(st.device, True)
    be.set_device(st.device)
    be.synchronize(st.stream)
    be.record(a, st.stream)
    t0 = time.perf_counter()
    st.runner.run(inputs, outputs)
    host_ms = (time.perf_counter() - t0) * 1e3
    be.record(b, st.stream)
    be.synchronize(st.stream)
    gpu_ms = be.elapsed_ms(a, b)
    for ev in (a, b):
        be.destroy_event(ev)
    be.free(x_buf)
    be.free(zero_buf)
    return {"run_host_ms": host_ms, "run_gpu_ms": gpu_ms, "run_blocks": host_ms >= 0.9 * gpu_ms,
            "note": "run_blocks false: Run only enqueues (the run option took effect); true: it synchronised"}


def bench_case(name, model, feeds, devices, args, kind: str, backend) -> dict:
    T, B = feeds["X"].shape[:2]
    single = SingleGpu(model, devices[0], cpu=args.dry_run)
    ref = single.run(feeds)
    single_run_ms, _ = median_ms(lambda: single.run(feeds), args.runs, args.warmup)
    single_dev_ms, _ = median_ms(single.bound(feeds), args.runs, args.warmup)
    # Throughput as a server sees it: a stream of calls of B rows each, one after another on one
    # GPU, pipelined across calls by run_batches (the pipeline fills and drains once per stream).
    stream = [feeds] * stream_calls(B) if kind == "throughput" else []
    single_stream_ms = median_ms(lambda: [single.run(f) for f in stream], max(3, args.runs // 3), 1)[0] if stream else None
    single = None  # free its GPU memory before the pipeline loads

    sess = PipelineSession(model, devices=devices, backend=backend)
    out = {"case": name, "kind": kind, "B": B, "T": T, "single_gpu_run_ms": single_run_ms,
           "single_gpu_device_only_ms": single_dev_ms, "stages": sess.describe()}
    got = sess.run(None, feeds)
    auto = sess.last_plan
    auto_ms, _ = median_ms(lambda: sess.run(None, feeds), args.runs, args.warmup)
    out["auto"] = {"plan": auto.as_dict(), "describe": auto.describe(), "ms": auto_ms,
                   "max_abs_vs_single_gpu": max_abs(ref, got)}
    sweep = []
    chunkable = sess.pm.chunk_refusal is None
    for mb, tc in sweep_options(B, T, chunkable, args.quick):
        sess.set_schedule(mb, tc)
        ms, _ = median_ms(lambda: sess.run(None, feeds), max(3, args.runs // 2), 1)
        sweep.append({"micro_batch": mb, "time_chunk": tc, "items": sess.last_plan.num_items, "ms": ms,
                      "modelled_ms": sess.last_plan.modelled_ms})
    best = min(sweep, key=lambda r: r["ms"]) if sweep else None
    # Profile the auto plan and the best swept one (events around every call and copy).
    profiles = {}
    for label, (mb, tc) in (("auto", (auto.micro_batch, auto.time_chunk)),
                            ("best", (best["micro_batch"], best["time_chunk"]) if best else (None, None))):
        sess.set_schedule(mb, tc)
        sess.profile = True
        sess.run(None, feeds)  # warm: a new plan's first call sizes buffers and ORT's arenas
        sess.run(None, feeds)
        prof = sess.last_profile.as_dict()
        prof["plan"] = sess.last_plan.describe()
        prof["render"] = sess.last_profile.render(100)
        profiles[label] = prof
        sess.profile = False
    sess.set_schedule(None, None)
    sess.run(None, feeds)
    out["ort_run_probe"] = run_blocks_probe(sess, feeds)
    if stream:
        got_stream = sess.run_batches(None, stream)
        pipe_stream_ms = median_ms(lambda: sess.run_batches(None, stream), max(3, args.runs // 3), 1)[0]
        out["stream"] = {"calls": len(stream), "rows_per_call": B, "single_gpu_ms": single_stream_ms,
                         "pipeline_ms": pipe_stream_ms, "speedup": single_stream_ms / pipe_stream_ms,
                         "plan": sess.last_plan.describe(),
                         "max_abs_vs_single_gpu": max(max_abs(ref, g) for g in got_stream),
                         "sequences_per_s": {"single_gpu": len(stream) * B / single_stream_ms * 1e3,
                                             "pipeline": len(stream) * B / pipe_stream_ms * 1e3}}
        out["target_met_stream"] = out["stream"]["speedup"] >= TARGETS["throughput_speedup_min"]
    out["sweep"] = sweep
    out["best"] = best
    out["profiles"] = profiles
    base = single_run_ms
    if kind == "throughput":
        out["speedup_auto_vs_run"] = base / auto_ms
        out["speedup_auto_vs_device_only"] = single_dev_ms / auto_ms
        out["speedup_best_vs_run"] = base / best["ms"] if best else None
        out["target_met"] = out["speedup_auto_vs_run"] >= TARGETS["throughput_speedup_min"]
        out["sequences_per_s"] = {"single_gpu": B / base * 1e3, "pipeline_auto": B / auto_ms * 1e3}
    else:
        out["latency_ratio_auto_vs_run"] = auto_ms / base
        out["latency_ratio_auto_vs_device_only"] = auto_ms / single_dev_ms
        out["latency_ratio_best_vs_run"] = best["ms"] / base if best else None
        out["target_met"] = out["latency_ratio_auto_vs_run"] <= TARGETS["latency_ratio_max"]
    sess.close()
    return out


def host_probe(repeats: int = 15, runs: int = 200) -> dict:
    """Host-side costs of the pipeline's per-call and per-item work that need no GPU: a stage Run
    through a binding kept for its buffers against one bound afresh (CPU EP, 3 inputs and 3
    outputs of [20, 64, 16], a graph of Identity ops, so the time is ORT's and Python's
    bookkeeping), and choosing a plan for the 8 x H1024 stack. Both sides interleaved, medians."""
    from onnx import TensorProto, helper

    from lstm_ort.pipeline.backend import Bindings, DeviceBuffer
    from lstm_ort.pipeline.partition import layer_costs
    from lstm_ort.pipeline.schedule import choose

    names_in, names_out = ["x", "h0", "c0"], ["y", "yh", "yc"]
    graph = helper.make_graph([helper.make_node("Identity", [i], [o]) for i, o in zip(names_in, names_out)], "probe",
                              [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in names_in],
                              [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in names_out])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    sess = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    arrays = {n: np.zeros((20, 64, 16), np.float32) for n in names_in + names_out}
    views = {n: DeviceView(DeviceBuffer(a.ctypes.data, 0, a.nbytes, owner=a), a.shape, a.dtype) for n, a in arrays.items()}
    ins, outs = {n: views[n] for n in names_in}, {n: views[n] for n in names_out}
    kept = Bindings(sess, "cpu", 0)
    sides = {"kept binding": lambda: kept.run(ins, outs), "binding per Run": lambda: Bindings(sess, "cpu", 0).run(ins, outs)}
    flops = layer_costs(8, 1, 1024, 1024)
    for B, T in ((64, 100), (256, 100)):
        sides[f"plan B={B} T={T}"] = lambda B=B, T=T: choose(flops, [(0, 4), (4, 8)], B, T, chunkable=True,
                                                            one_gpu_ok=True)
    times: dict[str, list] = {k: [] for k in sides}
    for _ in range(repeats):
        for k, fn in sides.items():
            n = runs if "binding" in k else max(1, runs // 10)
            t0 = time.perf_counter()
            for _ in range(n):
                fn()
            times[k].append((time.perf_counter() - t0) / n * 1e6)
    return {k: {"median_us": statistics.median(v), "min_us": min(v)} for k, v in times.items()}


class Models:
    """The benched model: the fused stack built directly, or torch.nn.LSTM exported and optimized
    (``--torch-export``; a dynamo export once per length, since it runs at its example's only)."""

    def __init__(self, args, rng):
        self.args, self.rng, self.cache = args, rng, {}

    def describe(self) -> str:
        a = self.args
        what = f"torch.nn.LSTM({a.input}, {a.hidden}, num_layers={a.layers})"
        if a.torch_export:
            return f"{what} exported by torch.onnx.export ({a.torch_export}), then lstm_ort.optimize"
        return f"{what}'s shape built by lstm_ort.builders.fused_model (random weights)"

    def get(self, B: int, T: int):
        a = self.args
        key = T if a.torch_export == "dynamo" else None
        if key not in self.cache:
            self.cache.clear()  # one model at a time: a production-size stack is 256 MiB
            if a.torch_export:
                from lstm_ort import optimize
                from lstm_ort.pipeline.testing import torch_export

                exported, _ = torch_export("plain", a.torch_export, input_size=a.input, hidden=a.hidden,
                                           layers=a.layers, batch=2, steps=T)
                self.cache[key] = optimize(exported)
            else:
                spec = LstmSpec(input_size=a.input, hidden_size=a.hidden, num_layers=a.layers)
                self.cache[key] = fused_model(spec, random_layers(spec, self.rng))
        return self.cache[key]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--devices", default="0,1", help="one device per stage, e.g. 0,1 or 0,0 (default 0,1)")
    p.add_argument("--layers", type=int, default=8)
    p.add_argument("--hidden", type=int, default=1024)
    p.add_argument("--input", type=int, default=1024)
    p.add_argument("--batches", default="64,256")
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--long-steps", type=int, default=2000, help="T of the latency case (0: no latency case)")
    p.add_argument("--runs", type=int, default=10)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--quick", action="store_true", help="a 4-layer H=256 stack, fewer runs and sweep points")
    p.add_argument("--json", type=Path, help="write the results here")
    p.add_argument("--torch-export", choices=("torchscript", "dynamo"),
                   help="bench torch.nn.LSTM exported by torch.onnx.export with this exporter, then optimized")
    p.add_argument("--dry-run", action="store_true",
                   help="no GPU: the fake device layer and the CPU EP on a tiny stack (checks this script only)")
    p.add_argument("--host-probe", action="store_true",
                   help="only the host-side probe (no GPU): a kept I/O binding against one per Run, plan choice")
    args = p.parse_args(argv)
    if args.host_probe:
        probe = host_probe()
        for k, v in probe.items():
            print(f"{k}: {v['median_us']:.1f} µs median ({v['min_us']:.1f} min)")
        if args.json:
            args.json.write_text(json.dumps(probe, indent=1))
        return 0
    if args.dry_run:
        args.layers, args.hidden, args.input, args.runs, args.warmup = 4, 16, 16, 2, 1
        args.batches, args.steps, args.long_steps = "4,8", 20, 60
    if args.quick:
        args.layers, args.hidden, args.input, args.runs, args.warmup = 4, 256, 256, 5, 2
        args.long_steps = min(args.long_steps, 500)
    devices = tuple(int(d) for d in args.devices.split(","))
    if args.dry_run:
        from lstm_ort.pipeline.fake import FakeBackend

        be = FakeBackend(max(devices) + 1)
    else:
        be = CudaBackend()
    n = be.device_count()
    if max(devices) >= n:
        print(f"devices {devices}: only {n} visible", file=sys.stderr)
        return 2
    info = {"devices": [{"id": d, "name": be.device_name(d)} for d in sorted(set(devices))],
            "peer_access": {f"{a}->{b}": be.can_access_peer(a, b) for a in set(devices) for b in set(devices) if a != b},
            "onnxruntime": ort.__version__, "config": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
            "targets": TARGETS}
    print(json.dumps(info, indent=1))
    rng = np.random.default_rng(0)
    models = Models(args, rng)
    info["model"] = models.describe()
    results = []
    cases = [(f"throughput B={b} T={args.steps}", b, args.steps, "throughput") for b in map(int, args.batches.split(","))]
    if args.long_steps > 0:
        cases.append((f"latency B=1 T={args.long_steps}", 1, args.long_steps, "latency"))
    for name, B, T, kind in cases:
        feeds = {"X": rng.standard_normal((T, B, args.input)).astype(np.float32)}
        model = models.get(B, T)
        info["weights_mib"] = sum(i.ByteSize() for i in model.graph.initializer) / 2**20
        t0 = time.perf_counter()
        r = bench_case(name, model, feeds, devices, args, kind, be)
        r["bench_seconds"] = time.perf_counter() - t0
        results.append(r)
        head = (f"x{r['speedup_auto_vs_run']:.2f} (device-only baseline x{r['speedup_auto_vs_device_only']:.2f})"
                if kind == "throughput" else
                f"{r['latency_ratio_auto_vs_run']:.2f} of one GPU (device-only baseline {r['latency_ratio_auto_vs_device_only']:.2f})")
        prof = r["profiles"]["auto"]
        print(f"{name}: one GPU {r['single_gpu_run_ms']:.2f} ms (device-only {r['single_gpu_device_only_ms']:.2f}), "
              f"pipeline {r['auto']['ms']:.2f} ms: {head}; target met: {r['target_met']}")
        print(f"  plan: {r['auto']['describe']}")
        print(f"  bubble measured {prof['measured_bubble']:.1%} vs GPipe {prof['gpipe_bubble']:.1%}; "
              f"copy per item {[round(c, 4) for c in prof['copy_ms_per_item']]} ms, "
              f"{[round(g, 1) if g else None for g in prof['copy_gb_per_s']]} GB/s; max-abs {r['auto']['max_abs_vs_single_gpu']:.2e}")
        print("  timeline of one call (GPU: item index mod 10; host: the thread's Run calls):")
        print("\n".join("    " + line for line in prof["render"].splitlines()))
        if r["best"]:
            print(f"  best swept: micro_batch={r['best']['micro_batch']} time_chunk={r['best']['time_chunk']} "
                  f"{r['best']['ms']:.2f} ms")
        if r.get("stream"):
            st = r["stream"]
            print(f"  stream of {st['calls']} calls x B={B}: one GPU {st['single_gpu_ms']:.1f} ms, run_batches "
                  f"{st['pipeline_ms']:.1f} ms: x{st['speedup']:.2f}; target met: {r['target_met_stream']}; "
                  f"max-abs {st['max_abs_vs_single_gpu']:.2e}\n    plan: {st['plan']}")
        print(f"  ORT Run: host {r['ort_run_probe']['run_host_ms']:.3f} ms vs GPU {r['ort_run_probe']['run_gpu_ms']:.3f} ms "
              f"(blocks: {r['ort_run_probe']['run_blocks']})")
    info["results"] = results
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(info, indent=1))
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
