"""Throughput of the bucketing batcher on a skewed ragged dataset (issue 16).

Lengths clip(round(exp(N(4, 1))), 5, 1000) (median ~55, long tail), a stacked LSTM (default
2 layers, H=512, I=128), batches of 64. Compares:
  none     arrival order, each batch padded to its longest sequence
  fixed    fixed buckets (powers of two up to the longest)
  auto     greedy buckets from the data (the batcher's default)
  dp-K     K optimal buckets (dynamic programming)
Reports boundaries, padding, computed / real tokens and throughput; --json for machines.

  python tools/bench_batcher.py --n 1000 --hidden 256          # a small CPU run
  python tools/bench_batcher.py --providers cuda,cpu            # the full run on a GPU
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import numpy as np

from lstm_ort.builders import LstmSpec, random_layers, stock_model
from lstm_ort.rewriter import optimize
from lstm_ort.serving import BucketingBatcher
from lstm_ort.serving.batch.plan import BatchStats, BucketStats
from lstm_ort.serving.batch.batcher import normalize_providers


def lengths_for(n: int, rng) -> np.ndarray:
    return np.clip(np.round(np.exp(rng.normal(4, 1, n))), 5, 1000).astype(np.int64)


def run_unbucketed(batcher: BucketingBatcher, seqs, batch: int) -> BatchStats:
    """Arrival order, each batch padded to its own longest: one bucket (the chunk's longest) per chunk."""
    stats = BatchStats()
    start = time.perf_counter()
    for lo in range(0, len(seqs), batch):
        chunk = seqs[lo: lo + batch]
        batcher.run(chunk)
        s = batcher.stats
        stats.sequences += s.sequences
        stats.batches += s.batches
        stats.real_tokens += s.real_tokens
        stats.padded_tokens += s.padded_tokens
    stats.seconds = time.perf_counter() - start
    stats.buckets = [BucketStats(boundary=0, sequences=stats.sequences, batches=stats.batches,
                                 real_tokens=stats.real_tokens, padded_tokens=stats.padded_tokens)]
    return stats


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--n", type=int, default=10_000, help="sequences (default 10000)")
    p.add_argument("--hidden", type=int, default=512)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--input-size", type=int, default=128)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--dp", type=int, nargs="*", default=[8, 16], help="bucket counts for the DP split")
    p.add_argument("--providers", default="cpu", help="comma-separated, e.g. cuda,cpu")
    p.add_argument("--fp16", action="store_true")
    p.add_argument("--only", nargs="*", help="subset of: none fixed auto dp-K")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)

    rng = np.random.default_rng(args.seed)
    lengths = lengths_for(args.n, rng)
    dtype = np.float16 if args.fp16 else np.float32
    seqs = [rng.standard_normal((int(n), args.input_size)).astype(dtype) for n in lengths]
    spec = LstmSpec(args.input_size, args.hidden, num_layers=args.layers)
    model = optimize(stock_model(spec, random_layers(spec, rng), dtype, outputs=("Y", "Y_h")),
                     sequence_lens_input=True)
    providers = normalize_providers(args.providers)
    fixed = [b for b in (16, 32, 64, 128, 256, 512, 1024) if b < lengths.max()] + [int(lengths.max())]
    configs = [("none", None), ("fixed", fixed), ("auto", "auto"), *((f"dp-{k}", k) for k in args.dp)]
    if args.only:
        configs = [c for c in configs if c[0] in args.only]
    # One session for every configuration (warmed up once), so they differ only in batching.
    session_batcher = BucketingBatcher(model, providers=providers, max_batch_size=args.batch)
    session_batcher.run(seqs[:args.batch])
    rows = []
    for name, buckets in configs:
        if buckets is None:
            one = BucketingBatcher(session_batcher.session, buckets=1, max_batch_size=args.batch)
            stats = run_unbucketed(one, seqs, args.batch)
            bounds = []
        else:
            b = BucketingBatcher(session_batcher.session, buckets=buckets, max_batch_size=args.batch)
            b.run(seqs)
            stats = b.stats
            bounds = [x.boundary for x in stats.buckets]
        rows.append(dict(config=name, boundaries=bounds, buckets=len(bounds), batches=stats.batches,
                         padding_fraction=stats.padding_fraction, computed_per_real=stats.computed_per_real,
                         seconds=stats.seconds, sequences_per_s=stats.sequences_per_s,
                         tokens_per_s=stats.tokens_per_s))
        print(f"  {name}: {stats.seconds:.1f} s", file=sys.stderr)
    base = next((r["tokens_per_s"] for r in rows if r["config"] == "none"), None)
    for r in rows:
        r["speedup_vs_none"] = r["tokens_per_s"] / base if base else None
    info = dict(n=args.n, median_length=float(np.median(lengths)), max_length=int(lengths.max()),
                real_tokens=int(lengths.sum()), layers=args.layers, hidden=args.hidden, input_size=args.input_size,
                batch=args.batch, dtype=np.dtype(dtype).name, providers=session_batcher.session.get_providers())
    if args.json:
        print(json.dumps(dict(setup=info, results=rows), indent=2))
        return 0
    print(f"{info['n']} sequences (median length {info['median_length']:.0f}, max {info['max_length']}), "
          f"L={args.layers} H={args.hidden} I={args.input_size} batch {args.batch} {info['dtype']} "
          f"on {info['providers'][0]}")
    print(f"{'config':<8} {'buckets':>7} {'batches':>7} {'padding':>8} {'computed/real':>13} {'seq/s':>8} "
          f"{'tokens/s':>9} {'vs none':>7}")
    for r in rows:
        print(f"{r['config']:<8} {r['buckets']:>7} {r['batches']:>7} {100 * r['padding_fraction']:>7.1f}% "
              f"{r['computed_per_real']:>13.3f} {r['sequences_per_s']:>8.1f} {r['tokens_per_s']:>9.0f} "
              f"{r['speedup_vs_none'] or 0:>6.2f}x")
    for r in rows:
        if r["boundaries"]:
            print(f"{r['config']} boundaries: {r['boundaries']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
