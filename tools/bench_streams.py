"""Many concurrent streams of a stateful model: StreamBatcher against one `run` per stream per
step (issue 39), on the same session options, the two interleaved and repeated (medians).

  # CPU: silero-vad and the g2p-id decoder from the corpus, 256 streams, 8 client threads
  python tools/bench_streams.py --corpus silero --streams 256 --threads 8 --repeats 5
  python tools/bench_streams.py --corpus g2p --streams 256 --threads 8 --repeats 5
  # any model
  python tools/bench_streams.py model.onnx --carry stateN=state --chunk input=1,576 --value sr=16000
  # GPU (H100): the ladder of streams at real time (32 ms a chunk), p50/p99 step latency
  python tools/bench_streams.py --corpus silero --providers cuda,cpu --interval-ms 32 \\
      --ladder 1,64,256,1024,4096,10000 --threads 16 --seconds 10 --no-baseline --json silero_gpu.json
  # the same, each client round one step_batch of its streams' chunks stacked (a server's tick)
  python tools/bench_streams.py --corpus silero --providers cuda,cpu --interval-ms 32 --stacked \\
      --ladder 1,64,256,1024,4096,10000,16384 --threads 4 --seconds 10 --no-baseline

Prints a table; --json FILE writes every measurement.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

import numpy as np
import onnx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "models"))

CORPUS = {  # name -> (corpus entry, step chunk, fixed values)
    "silero": ("silero_vad 16k", {"input": [1, 576]}, {"sr": [16000]}),
    "g2p": ("g2p_id decoder (tf2onnx)", {"input_2": [1, 1, 32]}, {}),
}


def corpus_model(name: str, directory: Path) -> tuple[Path, dict[str, str]]:
    """The optimized corpus model and its carry."""
    import corpus

    from lstm_ort.rewriter import optimize

    entry = next(e for e in corpus.ENTRIES if e.name == CORPUS[name][0])
    path = directory / f"{name}.opt.onnx"
    onnx.save(optimize(entry.build()), path)
    return path, dict(entry.carry)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("model", nargs="?")
    p.add_argument("--corpus", choices=sorted(CORPUS))
    p.add_argument("--carry", action="append", default=[], metavar="OUTPUT=INPUT")
    p.add_argument("--chunk", action="append", default=[], metavar="NAME=D0,D1,...")
    p.add_argument("--value", action="append", default=[], metavar="NAME=V")
    p.add_argument("--streams", type=int, default=256)
    p.add_argument("--ladder", help="comma-separated stream counts (replaces --streams)")
    p.add_argument("--threads", type=int, default=8)
    p.add_argument("--seconds", type=float, default=3.0)
    p.add_argument("--warmup", type=float, default=1.0)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--interval-ms", type=float)
    p.add_argument("--max-batch", type=int, default=256)
    p.add_argument("--max-wait-ms", type=float, default=2.0)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--providers", default=None)
    p.add_argument("--intra-op-threads", type=int, default=0)
    p.add_argument("--no-baseline", action="store_true")
    p.add_argument("--stacked", action="store_true", help="clients call step_batch with their chunks stacked")
    p.add_argument("--no-batch-convs", action="store_true")
    p.add_argument("--json")
    args = p.parse_args(argv)
    from lstm_ort.runtime.session import InferenceSession
    from lstm_ort.serving.batch.batcher import normalize_providers
    from lstm_ort.serving.streams import StreamBatcher
    from lstm_ort.serving.streams.cli import (_pair, _shape, _value, chunk_pool, print_table, run_baseline,
                                              run_streams, session_options, write_json)

    tmp = tempfile.TemporaryDirectory()
    if args.corpus:
        model, carry = corpus_model(args.corpus, Path(tmp.name))
        chunks, values = CORPUS[args.corpus][1], CORPUS[args.corpus][2]
    elif args.model:
        model, carry = Path(args.model), dict(_pair(c) for c in args.carry)
        chunks, values = {}, {}
    else:
        p.error("give a MODEL or --corpus")
    chunks.update(dict(_shape(c) for c in args.chunk))
    values.update(dict(_value(v) for v in args.value))
    counts = [int(c) for c in args.ladder.split(",")] if args.ladder else [args.streams]
    so = session_options(args.intra_op_threads)
    batcher = StreamBatcher(model, carry, providers=args.providers, session_options=so, max_batch=args.max_batch,
                            max_wait_ms=args.max_wait_ms, workers=args.workers,
                            batch_convs=False if args.no_batch_convs else None)
    pool = chunk_pool(batcher.model, carry, chunks, values)
    session = InferenceSession(str(model), so, providers=normalize_providers(args.providers))
    initial = {inp: np.zeros(s, batcher._inputs[inp][0]) for inp, s in batcher._state_shapes.items()}
    interval = None if args.interval_ms is None else args.interval_ms / 1e3
    rows, doc = [], {"model": str(model), "providers": batcher.session.get_providers(), "runs": []}
    for n in counts:
        base, ours, lat = [], [], []
        for _ in range(args.repeats):
            if not args.no_baseline:
                base.append(run_baseline(session, carry, initial, pool, n, args.threads, args.seconds,
                                         args.warmup)["steps_per_s"])
            r = run_streams(batcher, pool, n, args.threads, args.seconds, args.warmup, interval, args.stacked)
            ours.append(r["steps_per_s"])
            lat.append(r["stats"])
            doc["runs"].append({"streams": n, "baseline_steps_per_s": base[-1] if base else None, **r})
        b = statistics.median(base) if base else float("nan")
        o = statistics.median(ours)
        mid = sorted(lat, key=lambda s: s["steps_per_s"])[len(lat) // 2]
        rows.append((f"{n} streams", f"baseline {b:,.0f} steps/s | batcher {o:,.0f} steps/s ({o / b:.2f}x) | "
                                     f"mean batch {mid['mean_batch']:.1f} | latency p50 {mid['latency_p50_ms']:.2f} "
                                     f"p99 {mid['latency_p99_ms']:.2f} ms"))
        print(rows[-1][1], "| runs:", [round(x) for x in base], [round(x) for x in ours], flush=True)
    batcher.shutdown()
    print_table(f"{Path(str(model)).name}: {args.threads} client threads, medians of {args.repeats}", rows)
    if args.json:
        write_json(args.json, {k: v for k, v in doc.items()})
    return 0


if __name__ == "__main__":
    sys.exit(main())
