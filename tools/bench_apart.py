#!/usr/bin/env python3
"""CPU timing with each side in a process of its own: the original model on stock onnxruntime in
one worker process, the optimized model in another, one session alive per process, as a server runs
a model (two sessions in one process tax each other through their pools' spinning: issue 47 saw the
same rows read 0.36-0.63 in one process where separate processes read 1.09-1.27).

    python tools/bench_apart.py --rows odd --threads 1 2 [--odd-rows 40] [--json out.json]
    python tools/bench_apart.py --rows corpus int8 bf16 --threads 1 2

Rows: `odd` (tools/cpu_grid.py's odd-shape grid, fp32, the optimized model as it ships: cpu_kernel
auto), `corpus` (the float corpus models of tools/bench.py --odd at their own sizes), `bf16` (odd
rows of B >= 8, T >= 24, H >= 128 in precision bf16 against stock fp32), `int8` (text2tashkeel and
the torch quantize_dynamic fixtures at B 8 and 32, FusedLSTM's int8 weights against stock's
DynamicQuantizeLSTM at the same thread count; `--int8-scales row` for per-row scales).

Protocol per row and thread count: both workers load their model; the optimized side runs until
its kernel report says auto has decided every class; then ROUNDS rounds, each a block per side in
alternating order, each block after a 60 ms pause (the other process's pool stops spinning) and one
untimed run. A side's time is the median of all its timed runs; ratio = original / optimized.
The workers never run at once. Take the machine for yourself (flock -x /work/quiet.lock) per row:
--lock does that around each row.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

ROUNDS = 6
PAUSE_S = 0.06
WARMUP_RUNS = 120  # most runs auto may take to decide a class: a cold round and 8 of 4 blocks of 3 (cpu/kernel_tuner.h)

_WORKER = r"""
import json, sys, time
import numpy as np, onnxruntime as ort
from lstm_ort.runtime.session import InferenceSession
from lstm_ort.runtime import native
sess = feeds = binding = None
def run():
    t = time.perf_counter(); sess.run_with_iobinding(binding); return (time.perf_counter() - t) * 1e3
for line in sys.stdin:
    cmd = json.loads(line)
    if cmd["op"] == "load":
        sess = binding = None
        so = ort.SessionOptions(); so.intra_op_num_threads = cmd["threads"]; so.inter_op_num_threads = 1
        if cmd["fused"]:
            sess = InferenceSession(cmd["model"], so, providers=["CPUExecutionProvider"], precision=cmd.get("precision"))
        else:
            sess = ort.InferenceSession(cmd["model"], so, providers=["CPUExecutionProvider"])
        feeds = dict(np.load(cmd["feeds"]))
        binding = sess.io_binding()
        for name, value in feeds.items():
            binding.bind_ortvalue_input(name, ort.OrtValue.ortvalue_from_numpy(value))
        for out in sess.get_outputs():
            binding.bind_output(out.name, "cpu")
        chosen = ""
        if cmd["fused"]:  # until auto has decided this row's classes
            for _ in range(cmd["warmup"]):
                run()
                report = [c for c in native.cpu_kernel_report() if c.B > 0]
                chosen = ",".join(sorted({c.chosen for c in report}))
                if report and "auto" not in chosen.split(","):
                    break
        out = [o.numpy() for o in binding.get_outputs()] if run() >= 0 else []
        np.savez(cmd["outputs"], *out)
        print(json.dumps({"chosen": chosen}), flush=True)
    elif cmd["op"] == "run":
        run()
        print(json.dumps({"ms": [run() for _ in range(cmd["n"])]}), flush=True)
"""


class Worker:
    def __init__(self, env: dict | None = None):
        from lstm_ort.testing import child_python

        argv, child_env = child_python(_WORKER, env=env)
        self.proc = subprocess.Popen(argv, env=child_env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                     cwd=tempfile.gettempdir())

    def ask(self, **cmd) -> dict:
        self.proc.stdin.write(json.dumps(cmd) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError("a worker process ended")
        return json.loads(line)

    def close(self):
        self.proc.stdin.close()
        self.proc.wait(timeout=30)


class Lock:
    """flock -x on /work/quiet.lock around one row, where asked."""

    def __init__(self, path: str | None):
        self.path = path

    def __enter__(self):
        if self.path:
            self.fd = os.open(self.path, os.O_RDONLY | os.O_CREAT)
            fcntl.flock(self.fd, fcntl.LOCK_EX)

    def __exit__(self, *exc):
        if self.path:
            fcntl.flock(self.fd, fcntl.LOCK_UN)
            os.close(self.fd)


def time_row(stock: Worker, ours: Worker, folder: Path, threads: int, budget_ms: float, precision: str | None) -> dict:
    stock.ask(op="load", model=str(folder / "original.onnx"), feeds=str(folder / "feeds.npz"), threads=threads,
              fused=False, outputs=str(folder / "stock_out.npz"))
    chosen = ours.ask(op="load", model=str(folder / "optimized.onnx"), feeds=str(folder / "feeds.npz"),
                      threads=threads, fused=True, precision=precision, warmup=WARMUP_RUNS,
                      outputs=str(folder / "ours_out.npz"))["chosen"]
    a, b = np.load(folder / "stock_out.npz"), np.load(folder / "ours_out.npz")
    err = max(float(np.max(np.abs(a[k].astype(np.float64) - b[k]))) for k in a.files)
    first = min(stock.ask(op="run", n=1)["ms"]) + min(ours.ask(op="run", n=1)["ms"])
    per = int(min(60, max(2, budget_ms / ROUNDS / max(first / 2, 1e-3))))
    times = {"stock": [], "ours": []}
    for k in range(ROUNDS):
        for side in (("stock", "ours") if k % 2 == 0 else ("ours", "stock")):
            time.sleep(PAUSE_S)
            times[side] += (stock if side == "stock" else ours).ask(op="run", n=per)["ms"]
    s, o = statistics.median(times["stock"]), statistics.median(times["ours"])
    return {"stock_ms": s, "ours_ms": o, "ratio": s / o, "chosen": chosen, "max_abs": err, "runs": per * ROUNDS}


# ---- rows ----

def odd_rows(n: int | None):
    from cpu_grid import label, odd_grid

    from lstm_ort.builders import LstmSpec, fused_model, random_layers, stock_model

    for H, B, T, L, D, I in odd_grid()[:n]:
        spec = LstmSpec(input_size=I, hidden_size=H, num_layers=L, direction="bidirectional" if D == 2 else "forward")
        rng = np.random.default_rng(0)
        layers = random_layers(spec, rng)
        feeds = {"X": rng.standard_normal((T, B, I)).astype(np.float32)}
        yield label(H, B, T, L, D, I), stock_model(spec, layers), fused_model(spec, layers), feeds, None


def bf16_rows(n: int | None):
    for name, original, optimized, feeds, _ in odd_rows(None):
        H, B, T = (int(part[1:]) for part in name.split()[:3])
        if B >= 8 and T >= 24 and H >= 128:
            yield name + " bf16", original, optimized, feeds, "bf16"


def corpus_rows(only: list[str], int8: bool, batches: list[int], scales: str | None):
    from corpus_report import load_corpus

    from lstm_ort.rewriter import optimize
    from lstm_ort.runtime.session import with_attributes
    from lstm_ort.verify import random_feeds

    corpus = load_corpus()

    def scaled(optimized):
        if not scales:
            return optimized
        import onnx

        return onnx.load_from_string(with_attributes(optimized.SerializeToString(), {"int8_scales": scales}))

    if int8:
        for name, model, optimized, feeds, precision in torch_quantized_rows(corpus, only, batches):
            yield name, model, scaled(optimized), feeds, precision
    for entry in corpus.ENTRIES:
        if bool(entry.stock_threads) != int8 or (only and not any(s in entry.name for s in only)):
            continue
        if int8 and "quantize_dynamic" in entry.name:
            continue  # exported at their sizes by torch_quantized_rows
        try:
            model = entry.build()
        except corpus.Unavailable as e:
            print(f"{entry.name}: skipped ({e})", file=sys.stderr)
            continue
        optimized = scaled(optimize(model))
        for B in batches or [None]:
            feeds = entry.feeds(np.random.default_rng(B or 0))
            if B:
                feeds = _resized(feeds, B, random_feeds)
            yield f"{entry.name}" + (f" B{B}" if B else ""), model, optimized, feeds, None


def torch_quantized_rows(corpus, only: list[str], batches: list[int]):
    """The torch quantize_dynamic fixtures (models/corpus.py, TORCH_QUANTIZED_CONFIGS) exported at
    T = TORCH_STEPS and batch B: the corpus exports them at T=5, B=3 (fixed shapes)."""
    import dataclasses

    from lstm_ort.rewriter import optimize

    for cfg in corpus.TORCH_QUANTIZED_CONFIGS:
        name = (f"torch quantize_dynamic I{cfg.input_size} H{cfg.hidden_size} L{cfg.num_layers}"
                f"{' bi' if cfg.bidirectional else ''}")
        if only and not any(s in name for s in only):
            continue
        for B in batches:
            sized = Sized(**dataclasses.asdict(cfg), batch=B)
            try:
                model = corpus.torch_quantized(sized)()
            except corpus.Unavailable as e:
                print(f"{name} B{B}: skipped ({e})", file=sys.stderr)
                continue
            yield f"{name} B{B} T{TORCH_STEPS}", model, optimize(model), sized.feeds(np.random.default_rng(B)), None


def _sized_class():
    from corpus_report import load_corpus

    base = load_corpus().TorchLstm

    @__import__("dataclasses").dataclass(frozen=True)
    class SizedLstm(base):
        batch: int = 8

        @property
        def state_shape(self):
            return (self.num_layers * (2 if self.bidirectional else 1), self.batch, self.hidden_size)

        def feeds(self, rng):
            shape = (self.batch, TORCH_STEPS, self.input_size) if self.batch_first else (TORCH_STEPS, self.batch,
                                                                                           self.input_size)
            out = {"X": rng.standard_normal(shape).astype(np.float32)}
            if self.initial_states:
                out["h0"] = rng.standard_normal(self.state_shape).astype(np.float32)
                out["c0"] = rng.standard_normal(self.state_shape).astype(np.float32)
            return out
    return SizedLstm


def Sized(**kw):
    return _sized_class()(**kw)


# The int8 corpus entries' feeds at batch B: tashkeel's [4, 60] character ids as [B, 120]; the torch
# fixtures' X [5, 3, I] (or [3, 5, I] batch-first) and states [L*D, 3, H] at T = 50 and B.
INT8_STEPS = {"input": 120}
TORCH_STEPS = 50


def _resized(feeds: dict, B: int, _unused) -> dict:
    rng = np.random.default_rng(B)
    out = {}
    for name, value in feeds.items():
        if name in INT8_STEPS:
            out[name] = rng.integers(0, 236, (B, INT8_STEPS[name])).astype(value.dtype)
            continue
        shape = [B if d == 3 else TORCH_STEPS if d == 5 else d for d in value.shape]
        out[name] = rng.standard_normal(shape).astype(value.dtype)
    return out


def main(argv=None) -> int:
    import onnx

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rows", nargs="+", choices=["odd", "corpus", "bf16", "int8"], default=["odd"])
    p.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    p.add_argument("--odd-rows", type=int, default=None, help="the first N rows of the odd grid only")
    p.add_argument("--only", action="append", default=[], help="rows whose name holds this (any kind; e.g. 'H100 B16 T150')")
    p.add_argument("--int8-batch", type=int, nargs="+", default=[8, 32])
    p.add_argument("--int8-scales", choices=["call", "row", "slices"], default=None)
    p.add_argument("--budget-ms", type=float, default=600.0, help="timed milliseconds per side and row, roughly")
    p.add_argument("--lock", default=None, help="flock -x this file around each row (e.g. /work/quiet.lock)")
    p.add_argument("--env", action="append", default=[], help="NAME=VALUE for the optimized side's process")
    p.add_argument("--json", help="write the rows here")
    args = p.parse_args(argv)

    def rows():
        for kind in args.rows:
            if kind in ("odd", "bf16"):
                grid = odd_rows(args.odd_rows) if kind == "odd" else bf16_rows(args.odd_rows)
                yield from (row for row in grid if not args.only or any(s in row[0] for s in args.only))
            elif kind == "corpus":
                yield from corpus_rows(args.only or ["torch", "silero", "g2p", "Keras", "LSTMCell"], False, [], None)
            else:
                yield from corpus_rows(args.only, True, args.int8_batch, args.int8_scales)

    ours_env = dict(kv.split("=", 1) for kv in args.env)
    out = []
    print(f"{'row':58} {'thr':>3} {'orig ms':>9} {'ours ms':>9} {'ratio':>6} {'chosen':>14} {'max-abs':>8}", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        workers = {t: (Worker(), Worker(ours_env)) for t in args.threads}
        try:
            for name, original, optimized, feeds, precision in rows():
                onnx.save(original, str(folder / "original.onnx"))
                onnx.save(optimized, str(folder / "optimized.onnx"))
                np.savez(folder / "feeds.npz", **feeds)
                for threads in args.threads:
                    stock, ours = workers[threads]
                    with Lock(args.lock):
                        row = {"row": name, "threads": threads,
                               **time_row(stock, ours, folder, threads, args.budget_ms, precision)}
                    out.append(row)
                    print(f"{name[:58]:58} {threads:>3} {row['stock_ms']:>9.3f} {row['ours_ms']:>9.3f} "
                          f"{row['ratio']:>6.2f} {row['chosen'][:14]:>14} {row['max_abs']:>8.1e}", flush=True)
        finally:
            for pair in workers.values():
                for w in pair:
                    w.close()
    ratios = {t: [r["ratio"] for r in out if r["threads"] == t] for t in args.threads}
    for t, rs in ratios.items():
        if rs:
            print(f"threads {t}: {len(rs)} rows, median ratio {statistics.median(rs):.2f}, worst {min(rs):.2f}, "
                  f"below 0.97: {sum(r < 0.97 for r in rs)}")
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
