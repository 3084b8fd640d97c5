#!/usr/bin/env python3
"""Time of corpus models (models/corpus.py), original on stock onnxruntime against the optimized
model, at several batch sizes (and thread counts on the CPU): the ratio per pattern that the
odd-shape grid (tools/cpu_grid.py, on builder models) does not show, e.g. unrolled cell chains.

    python tools/bench_corpus.py --only "LSTMCell loop" --batch 1 8 32 --threads 1 2 [--json out.json]
    python tools/bench_corpus.py --device cuda --only "LSTMCell loop" --only "unroll=True"

CPU timing as cpu_grid does it (interleaved runs and alternating blocks of each side alone;
medians); CUDA as tools/bench.py does it (inputs and outputs bound on the device, medians).
Ratio = original / optimized, above 1 means faster. Batch sizes apply to models whose only
symbolic dimension is the batch (the corpus' cell loops and tf2onnx mirrors).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))

from corpus_report import load_corpus  # noqa: E402
from cpu_grid import bench_models  # noqa: E402


def bench(model, optimized, feeds, threads: int, budget_ms: float) -> dict:
    """cpu_grid's comparison (the optimized model as it ships, cpu_kernel auto, and the fused
    kernel alone, against the original; interleaved and each alone) as a dict."""
    from dataclasses import asdict

    return asdict(bench_models("", model, optimized, feeds, threads, budget_ms))


def bench_cuda(model, optimized, feeds, runs: int = 50) -> dict:
    from lstm_ort.tuning.timing import OrtRunner, median_ms

    stock, ours = OrtRunner(model, feeds, "cuda", fused=False), OrtRunner(optimized, feeds, "cuda", fused=True)
    err = max(float(np.max(np.abs(a - b))) for a, b in zip(ours.outputs(), stock.outputs()))
    stock_ms, ours_ms = median_ms(stock, runs, 5), median_ms(ours, runs, 5)
    return {"stock_ms": stock_ms, "ours_ms": ours_ms, "ratio": stock_ms / ours_ms, "stock_alone_ms": stock_ms,
            "ours_alone_ms": ours_ms, "ratio_alone": stock_ms / ours_ms, "max_abs": err}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--only", action="append", help="entries whose name contains this (repeatable)")
    p.add_argument("--batch", type=int, nargs="+", default=[1, 8, 32])
    p.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    p.add_argument("--budget-ms", type=float, default=400.0, help="time per side and row, roughly")
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    p.add_argument("--json", help="write the rows here")
    args = p.parse_args(argv)

    from lstm_ort.rewriter import optimize
    from lstm_ort.verify import random_feeds

    corpus = load_corpus()
    rows = []
    print(f"{'model':66} {'thr':>3} {'B':>3} {'orig ms':>8} {'ours ms':>8} {'ratio':>6} {'alone':>6} {'max-abs':>8}")
    for entry in corpus.ENTRIES:
        if args.only and not any(s in entry.name for s in args.only):
            continue
        try:
            model = entry.build()
        except corpus.Unavailable as e:
            print(f"{entry.name}: skipped ({e})")
            continue
        optimized = optimize(model)
        for threads in args.threads if args.device == "cpu" else [0]:
            for batch in args.batch:
                feeds = random_feeds(model, np.random.default_rng(batch), dim=batch)
                timed = (bench(model, optimized, feeds, threads, args.budget_ms) if args.device == "cpu"
                         else bench_cuda(model, optimized, feeds))
                row = {"model": entry.name, "device": args.device, "threads": threads, "batch": batch, **timed}
                rows.append(row)
                print(f"{entry.name[:66]:66} {threads:>3} {batch:>3} {row['stock_ms']:>8.3f} {row['ours_ms']:>8.3f} "
                      f"{row['ratio']:>6.2f} {row['ratio_alone']:>6.2f} {row['max_abs']:>8.1e}", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
