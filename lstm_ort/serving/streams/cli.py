"""`lstm-ort streams-bench MODEL --carry OUT=IN --streams N --chunk NAME=D0,D1,...`: many streams
of a stateful model through a StreamBatcher, fed by client threads; prints the batcher's counters
(a rich table where rich is installed) and writes them with ``--json FILE``.

Each client thread owns streams/threads of the streams; a round submits one step of each of its
streams (``step_many``) and waits for their results (with ``--interval-ms``, a round starts at most every that
long: real time, e.g. 32 for silero-vad's 512-sample chunks). The load generator and the baseline
(one ``run`` per stream per step, states kept by the caller) are shared with tools/bench_streams.py.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from pathlib import Path

import numpy as np

from lstm_ort.cli_args import dims, integer, named, number

EXIT_OK, EXIT_INPUT, EXIT_USAGE = 0, 1, 2
POOL = 16  # distinct chunks per input, reused round-robin


def add_streams_bench_parser(sub) -> None:
    s = sub.add_parser("streams-bench", help="many concurrent streams of a stateful model through a StreamBatcher: "
                                             "steps/s, batch sizes, queue wait and latency percentiles")
    s.add_argument("model")
    s.add_argument("--carry", action="append", type=_pair, default=[], required=True, metavar="OUTPUT=INPUT",
                   help="a state output and the input it feeds on the next step (repeatable)")
    s.add_argument("--chunk", action="append", type=_shape, default=[], metavar="NAME=D0,D1,...",
                   help="one stream's feed shape for input NAME, batch axis 1 (repeatable; unknown dims default 1)")
    s.add_argument("--value", action="append", type=_value, default=[], metavar="NAME=V[,V...]",
                   help="a fixed value for input NAME (e.g. sr=16000)")
    s.add_argument("--streams", type=int, default=256)
    s.add_argument("--threads", type=int, default=8, help="client threads feeding the streams")
    s.add_argument("--seconds", type=number(above=0), default=5.0, help="measured time (after --warmup)")
    s.add_argument("--warmup", type=number(at_least=0), default=1.0)
    s.add_argument("--interval-ms", type=number(above=0), default=None,
                   help="real time: each stream steps at most once per interval (default: as fast as it can)")
    s.add_argument("--max-batch", type=int, default=256)
    s.add_argument("--max-wait-ms", type=number(at_least=0), default=2.0)
    s.add_argument("--workers", type=int, default=2, help="threads running calls (default 2)")
    s.add_argument("--providers", help="comma-separated: cuda,cpu (default: onnxruntime's)")
    s.add_argument("--intra-op-threads", type=integer(0, "0: onnxruntime's default"), default=0,
                   help="onnxruntime intra-op threads (0: its default)")
    s.add_argument("--stacked", action="store_true",
                   help="each client round is one step_batch of its streams' chunks stacked (a server's tick)")
    s.add_argument("--json", metavar="FILE", help="write the counters and settings as JSON")


def cmd_streams_bench(args) -> int:
    for name in ("streams", "threads", "max_batch", "workers"):
        if getattr(args, name) < 1:
            print(f"lstm-ort: --{name.replace('_', '-')} must be >= 1", file=sys.stderr)
            return EXIT_USAGE
    from lstm_ort.runtime.model_io import ModelError
    from lstm_ort.serving.streams import StreamBatcher, StreamError

    try:
        batcher = StreamBatcher(args.model, dict(args.carry), providers=args.providers,
                                session_options=session_options(args.intra_op_threads), max_batch=args.max_batch,
                                max_wait_ms=args.max_wait_ms, workers=args.workers)
    except (ModelError, ValueError, OSError) as e:
        print(f"lstm-ort: {args.model}: {e}", file=sys.stderr)
        return EXIT_INPUT
    with batcher:
        try:
            pool = chunk_pool(batcher.model, batcher.carry, dict(args.chunk), dict(args.value))
            result = run_streams(batcher, pool, args.streams, args.threads, args.seconds, args.warmup,
                                 None if args.interval_ms is None else args.interval_ms / 1e3, args.stacked)
        except (StreamError, ValueError) as e:
            print(f"lstm-ort: {e}", file=sys.stderr)
            return EXIT_INPUT
    doc = {"model": str(args.model), "streams": args.streams, "threads": args.threads, "stacked": args.stacked,
           "interval_ms": args.interval_ms, "max_batch": args.max_batch, "max_wait_ms": args.max_wait_ms,
           "workers": args.workers, "providers": batcher.session.get_providers(), "batched": batcher.batched,
           "fallback_reasons": batcher.fallback_reasons, **result}
    print_table(f"StreamBatcher: {Path(args.model).name}, {args.streams} streams, {args.threads} client threads",
                [*result["stats_rows"], ("behind real time", f"{result['late_rounds']} rounds")
                 if args.interval_ms else ("mode", "as fast as possible")])
    if args.json:
        from lstm_ort.runtime.output_files import OutputRefused

        try:
            write_json(args.json, {k: v for k, v in doc.items() if k != "stats_rows"}, model=args.model)
        except OutputRefused as e:
            print(f"lstm-ort: {e}", file=sys.stderr)
            return EXIT_USAGE
        except OSError as e:
            print(f"lstm-ort: cannot write {args.json}: {e.strerror or e}", file=sys.stderr)
            return EXIT_INPUT
    return EXIT_OK


# -- load generation (tools/bench_streams.py uses these too) ----------------------------------------
def session_options(intra_op_threads: int = 0):
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.log_severity_level = 3
    if intra_op_threads:
        so.intra_op_num_threads = intra_op_threads
    return so


def chunk_pool(model, carry: dict[str, str], chunks: dict[str, list[int]], values: dict[str, list[float]],
               count: int = POOL, seed: int = 0) -> list[dict[str, np.ndarray]]:
    """``count`` random step feeds (carried inputs left out): ``chunks`` shapes, ``values`` fixed."""
    from lstm_ort.verify import random_feeds

    inits = {i.name for i in model.graph.initializer}
    shapes = {}
    for vi in model.graph.input:
        if vi.name in inits or vi.name in carry.values():
            continue
        dims = vi.type.tensor_type.shape.dim
        shapes[vi.name] = chunks.get(vi.name) or [d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else 1
                                                  for d in dims]
    unknown = sorted((set(chunks) | set(values)) - set(shapes))
    if unknown:
        raise ValueError(f"--chunk/--value name {unknown}, not step inputs of the model ({sorted(shapes)})")
    rng = np.random.default_rng(seed)
    pool = []
    for _ in range(count):
        feeds = {n: v for n, v in random_feeds(model, rng, dim=1, shapes=shapes).items() if n in shapes}
        for name, value in values.items():
            shape = tuple(shapes[name])
            if len(value) not in (1, int(np.prod(shape))):
                raise ValueError(f"--value {name}: {len(value)} values for shape {list(shape)}")
            feeds[name] = np.broadcast_to(np.array(value, feeds[name].dtype).reshape(-1 if len(value) > 1 else ()),
                                          (int(np.prod(shape)),)).reshape(shape).copy()
        for name, v in feeds.items():
            if v.dtype.kind == "f":
                feeds[name] = (0.1 * v).astype(v.dtype)  # audio-like scale
        pool.append(feeds)
    return pool


def run_streams(batcher, pool, streams: int, threads: int, seconds: float, warmup: float = 1.0,
                interval: float | None = None, stacked: bool = False) -> dict:
    """Client threads drive ``streams`` streams of ``batcher`` for ``warmup + seconds``; the counters
    cover the measured part. A round of a client: ``step_many`` of its streams' chunks, or with
    ``stacked`` one ``step_batch`` of them stacked (as a server gathering a tick's chunks would)."""
    ids = [batcher.open() for _ in range(streams)]
    if stacked:
        layout = batcher.layout(pool[0])
        blocks = {}

        def block(mine, k):  # the round's chunks of these streams, stacked (made once per pool offset)
            key = (mine[0], len(mine), k % len(pool))
            if key not in blocks:
                rows = [pool[(k + j) % len(pool)] for j in range(len(mine))]
                blocks[key] = {n: v if layout.inputs.get(n) is None else
                               np.concatenate([r[n] for r in rows], axis=layout.inputs[n]) for n, v in rows[0].items()}
            return blocks[key]

        def round_of(mine, k):
            batcher.step_batch(mine, block(mine, k))
    else:
        def round_of(mine, k):
            batcher.step_many([(s, pool[(k + j) % len(pool)]) for j, s in enumerate(mine)])
    try:
        late = _drive(round_of, ids, threads, warmup, interval, on_measure=batcher.reset_stats, seconds=seconds)
        stats = batcher.stats()
    finally:
        for s in ids:
            batcher.close(s)
    return {"stats": stats.as_dict(), "stats_rows": stats.rows(), "steps_per_s": stats.steps_per_s,
            "late_rounds": late}


def run_baseline(session, carry: dict[str, str], initial: dict[str, np.ndarray], pool, streams: int, threads: int,
                 seconds: float, warmup: float = 1.0) -> dict:
    """One ``run`` per stream per step, each stream's state kept by its client thread."""
    names = [o.name for o in session.get_outputs()]
    where = {inp: names.index(out) for out, inp in carry.items()}
    states = [dict(initial) for _ in range(streams)]
    counted = [0]
    lock = threading.Lock()

    def round_of(mine, k):
        for j, s in enumerate(mine):
            outs = session.run(None, {**pool[(k + j) % len(pool)], **states[s]})
            states[s] = {inp: outs[i] for inp, i in where.items()}
        with lock:
            counted[0] += len(mine)

    t0 = [0.0]

    def measure():
        with lock:
            counted[0] = 0
        t0[0] = time.perf_counter()
    _drive(round_of, list(range(streams)), threads, warmup, None, on_measure=measure, seconds=seconds)
    elapsed = time.perf_counter() - t0[0]
    return {"steps": counted[0], "seconds": elapsed, "steps_per_s": counted[0] / elapsed}


def _drive(round_of, ids, threads: int, warmup: float, interval: float | None, *, on_measure, seconds: float) -> int:
    """Runs ``round_of(my_streams, round)`` on each client thread until warmup + seconds pass."""
    groups = [ids[k::threads] for k in range(threads) if ids[k::threads]]
    start = time.perf_counter()
    measure_at, stop_at = start + warmup, start + warmup + seconds
    late = [0]
    errors = []

    def client(mine):
        k, next_round = 0, time.perf_counter()
        try:
            while time.perf_counter() < stop_at:
                round_of(mine, k)
                k += 1
                if interval is not None:
                    next_round += interval
                    wait = next_round - time.perf_counter()
                    if wait > 0:
                        time.sleep(wait)
                    else:
                        late[0] += 1
        except Exception as e:  # noqa: BLE001 - reported by the caller
            errors.append(e)

    workers = [threading.Thread(target=client, args=(mine,), daemon=True) for mine in groups]
    for w in workers:
        w.start()
    time.sleep(max(0.0, measure_at - time.perf_counter()))
    on_measure()
    for w in workers:
        w.join()
    if errors:
        raise errors[0]
    return late[0]


# -- output ----------------------------------------------------------------------------------------
def print_table(title: str, rows: list[tuple[str, str]], file=None) -> None:
    try:
        from rich.console import Console
        from rich.table import Table
    except ImportError:
        out = file or sys.stdout
        width = max(len(k) for k, _ in rows)
        print(title, file=out)
        for k, v in rows:
            print(f"  {k:<{width}}  {v}", file=out)
        return
    table = Table(title=title)
    table.add_column("counter")
    table.add_column("value", justify="right")
    for k, v in rows:
        table.add_row(k, v)
    Console(file=file).print(table)


def write_json(path, doc, model=None) -> None:
    """Through the commands' one output path (lstm_ort.runtime.output_files): never the model,
    written beside the target and renamed over it, removed on failure or interrupt."""
    from lstm_ort.runtime.output_files import output_target, write_file

    target = output_target(path, [(model, "the model")] if model is not None else [], option="--json")
    write_file(target, lambda p: p.write_text(json.dumps(doc, indent=2, default=str)))


_pair = named("--carry", "OUTPUT=INPUT")
_shape = named("--chunk", "NAME=D0,D1,... with dims >= 0", dims)
_value = named("--value", "NAME=V[,V...]", lambda text: [float(v) for v in text.split(",")])
