#!/usr/bin/env python3
"""CPU time of corpus models (models/corpus.py), original on stock onnxruntime against the
optimized model, at several batch sizes and thread counts: the ratio per pattern that the
odd-shape grid (tools/cpu_grid.py, on builder models) does not show, e.g. unrolled cell chains.

    python tools/bench_corpus_cpu.py --only "LSTMCell loop" --batch 1 8 32 --threads 1 2 [--json out.json]

Timing as cpu_grid does it (interleaved runs and alternating blocks of each side alone; medians;
ratio = original / optimized, above 1 means faster). Batch sizes apply to models whose only
symbolic dimension is the batch (the corpus' cell loops and tf2onnx mirrors).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).parent))

from cpu_grid import Runner, _runs_for, alone_in_blocks  # noqa: E402


def load_corpus():
    spec = importlib.util.spec_from_file_location("corpus", ROOT / "models" / "corpus.py")
    corpus = importlib.util.module_from_spec(spec)
    sys.modules["corpus"] = corpus
    spec.loader.exec_module(corpus)
    return corpus


def bench(model, optimized, feeds, threads: int, budget_ms: float) -> dict:
    stock, ours = Runner(model, feeds, threads, fused=False), Runner(optimized, feeds, threads, fused=True)
    err = max(float(np.max(np.abs(a - b))) for a, b in zip(ours.outputs(), stock.outputs()))
    first = min(stock(), stock()), min(ours(), ours())
    runs = _runs_for(first[0] + first[1], budget_ms, 5, 300)
    s_times, o_times = [], []
    for i in range(runs):
        pair = (stock, ours) if i % 2 else (ours, stock)
        for run in pair:
            (s_times if run is stock else o_times).append(run())
    s_alone, o_alone = alone_in_blocks(stock, ours, runs)
    med = statistics.median
    return {"stock_ms": med(s_times), "ours_ms": med(o_times), "ratio": med(s_times) / med(o_times),
            "stock_alone_ms": med(s_alone), "ours_alone_ms": med(o_alone), "ratio_alone": med(s_alone) / med(o_alone),
            "max_abs": err}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--only", action="append", help="entries whose name contains this (repeatable)")
    p.add_argument("--batch", type=int, nargs="+", default=[1, 8, 32])
    p.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    p.add_argument("--budget-ms", type=float, default=400.0, help="time per side and row, roughly")
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
        for threads in args.threads:
            for batch in args.batch:
                feeds = random_feeds(model, np.random.default_rng(batch), dim=batch)
                row = {"model": entry.name, "threads": threads, "batch": batch,
                       **bench(model, optimized, feeds, threads, args.budget_ms)}
                rows.append(row)
                print(f"{entry.name[:66]:66} {threads:>3} {batch:>3} {row['stock_ms']:>8.3f} {row['ours_ms']:>8.3f} "
                      f"{row['ratio']:>6.2f} {row['ratio_alone']:>6.2f} {row['max_abs']:>8.1e}", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
