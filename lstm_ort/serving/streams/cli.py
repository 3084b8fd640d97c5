"""`lstm-ort streams-bench MODEL --carry OUT=IN [--pattern closed|open|async|rounds] [--clients K]
[--period-ms P] [--streams N | --ladder N,N,...]`: many streams of a stateful model through a
StreamBatcher against what it replaces, one ``run`` per stream per step with the state carried by
hand, by stock onnxruntime on the original model and by lstm_ort's session on the optimized one:
the same client threads (load.py) drive each system (systems.py) in turn, in one process,
interleaved and repeated (``--repeats``), and time every step around the call. Prints steps/s,
per-step latency p50/p99/p99.9 and late ticks per system (a rich table where rich is installed),
the batcher's own counters; ``--json FILE`` writes every phase, ``--plot FILE.png`` the latency
against the streams (matplotlib: ``pip install 'lstm-ort[bench]'``).

MODEL is the original export; it is optimized here (``optimize`` from lstm_ort/cli.py), or
``--optimized FILE`` gives the optimized one. A MODEL that is already optimized (it holds
FusedLSTM nodes) is served as it is, without the stock baseline, which cannot run it.
tools/bench_streams.py adds shortcuts to corpus models on top of this command.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np

from lstm_ort.cli_args import dims, finite, integer, integers, named, number

EXIT_OK, EXIT_INPUT, EXIT_USAGE = 0, 1, 2
POOL = 16  # distinct chunks per input, reused round-robin
OPEN_PERIOD_MS = 32.0  # the open loop's default period: silero-vad's 512 samples at 16 kHz
# what --systems names -> the name tables and JSON give it
SYSTEMS = {"batcher": "batcher", "ours": "run ours", "stock": "run stock"}


def add_streams_bench_parser(sub) -> None:
    s = sub.add_parser("streams-bench", help="many concurrent streams of a stateful model through a StreamBatcher, "
                                             "against one run per stream per step (stock and lstm_ort): steps/s, "
                                             "latency p50/p99/p99.9, late ticks")
    s.add_argument("model", help="the original export (optimized here; see --optimized)")
    s.add_argument("--carry", action="append", type=_pair, default=[], required=True, metavar="OUTPUT=INPUT",
                   help="a state output and the input it feeds on the next step (repeatable)")
    s.add_argument("--optimized", metavar="FILE", help="the optimized model (default: MODEL optimized in memory)")
    s.add_argument("--chunk", action="append", type=_shape, default=[], metavar="NAME=D0,D1,...",
                   help="one stream's feed shape for input NAME, batch axis 1 (repeatable; unknown dims default 1)")
    s.add_argument("--value", action="append", type=_value, default=[], metavar="NAME=V[,V...]",
                   help="a fixed value for input NAME (e.g. sr=16000)")
    s.add_argument("--pattern", choices=("closed", "open", "async", "rounds"), default=None,
                   help="closed (default): each client steps its streams one after another with step(); open: every "
                        "stream sends a chunk every --period-ms, at a random phase, through submit(); async: the same "
                        "chunks from one event loop, a coroutine per stream awaiting astep() (the run systems: "
                        "run_in_executor on --clients threads); rounds: each client steps all its streams at once "
                        "(step_many, or step_batch with --stacked)")
    s.add_argument("--streams", type=integer(1), default=256)
    s.add_argument("--ladder", type=integers(1), metavar="N,N,...",
                   help="stream counts to measure in turn (replaces --streams; with --plot, the latency against them)")
    s.add_argument("--clients", type=integer(1), default=8,
                   help="client threads feeding the streams (closed loop: steps in flight at most)")
    s.add_argument("--threads", dest="clients", type=integer(1), default=argparse.SUPPRESS, help="the same as --clients")
    s.add_argument("--period-ms", type=number(above=0), default=None,
                   help=f"open: each stream's chunk period (default {OPEN_PERIOD_MS:g}); closed, rounds: a client's "
                        "pass over its streams starts at most once per period (real time; late passes are counted)")
    s.add_argument("--interval-ms", dest="period_ms", type=number(above=0), default=argparse.SUPPRESS,
                   help="the same as --period-ms")
    s.add_argument("--seconds", type=number(above=0), default=5.0, help="measured time of each phase (after --warmup)")
    s.add_argument("--warmup", type=number(at_least=0), default=1.0)
    s.add_argument("--repeats", type=integer(1), default=1, help="phases of each system, interleaved (medians)")
    s.add_argument("--systems", type=_systems, default=list(SYSTEMS), metavar="batcher,ours,stock",
                   help="what to measure (default all): the StreamBatcher, one run per stream per step by lstm_ort's "
                        "session on the optimized model, by stock onnxruntime on the original")
    s.add_argument("--seed", type=integer(0), default=0, help="the open loop's phases and the chunks' values")
    s.add_argument("--max-batch", type=integer(1), default=256)
    s.add_argument("--max-wait-ms", type=number(at_least=0), default=2.0)
    s.add_argument("--workers", type=integer(1), default=None,
                   help="the batcher's calls in flight at once (default: 1 on the CPU, 2 on CUDA)")
    s.add_argument("--providers", help="comma-separated: cuda,cpu (default: onnxruntime's)")
    s.add_argument("--intra-op-threads", type=integer(0, "0: onnxruntime's default"), default=0,
                   help="onnxruntime intra-op threads of every session (0: its default; the batcher's "
                        "engine then runs calls on one thread, and on a second session with onnxruntime's pool "
                        "for a lone stream and for long calls: docs/streams.md, Threads)")
    s.add_argument("--stacked", action="store_true",
                   help="rounds: each client round is one step_batch of its streams' chunks stacked (a server's tick)")
    s.add_argument("--json", metavar="FILE", help="write the settings, every phase and the medians as JSON")
    s.add_argument("--plot", metavar="FILE.png", help="plot latency p50/p99 and steps/s against the streams")


def cmd_streams_bench(args, optimize=None) -> int:
    """``optimize(model) -> model``: how MODEL is optimized (lstm_ort/cli.py passes the rewriter's)."""
    from lstm_ort.runtime.model_io import ModelError, load_model
    from lstm_ort.runtime.output_files import OutputRefused
    from lstm_ort.serving.streams.load import PERIODIC, Load, Stalled

    pattern = args.pattern or ("rounds" if args.stacked else "closed")
    if args.stacked and pattern != "rounds":
        return _usage(f"--stacked goes with --pattern rounds, not {pattern}")
    try:
        targets = _targets(args)
    except OutputRefused as e:
        return _usage(str(e))
    period = args.period_ms if args.period_ms is not None else OPEN_PERIOD_MS if pattern in PERIODIC else None
    counts = args.ladder or [args.streams]
    load = Load(pattern, counts[0], args.clients, args.seconds, args.warmup, None if period is None else period / 1e3,
                args.stacked, args.seed)
    try:
        original = load_model(args.model)
    except (ModelError, OSError) as e:
        return _fail(f"{args.model}: {e}")
    try:
        optimized = load_model(args.optimized) if args.optimized else None
    except (ModelError, OSError) as e:
        return _fail(f"{args.optimized}: {e}")
    notes = []
    systems_wanted = list(args.systems)
    if _is_optimized(original):
        optimized, original = optimized or original, None
        if "stock" in systems_wanted:
            systems_wanted.remove("stock")
            notes.append("MODEL is already optimized (it holds FusedLSTM nodes): no stock baseline, which cannot run "
                         "it; give the original export for one")
    if optimized is None:
        if optimize is None:
            return _fail("no optimizer given: pass --optimized FILE")
        try:
            optimized = optimize(original)
        except Exception as e:  # noqa: BLE001 - the rewriter's refusal, named
            return _fail(f"{args.model}: optimize failed: {e}")
    from lstm_ort.runtime.messages import clean_message

    try:
        bench = _Bench(args, original, optimized, systems_wanted)
    except Exception as e:  # noqa: BLE001 - a model, carry or chunk that cannot run: named, exit 1
        return _fail(f"{args.model}: {clean_message(e)}")
    with bench.batcher:
        try:
            phases = bench.measure(load, counts, args.repeats)
        except Stalled as e:
            return _fail(str(e))
        except Exception as e:  # noqa: BLE001 - a system failed a step of valid chunks: named, exit 1
            return _fail(f"{bench.current}: {clean_message(e)}")
    summary = summarize(phases)
    for note in notes:
        print(f"lstm-ort: {note}", file=sys.stderr)
    _print_report(args, bench, load, summary, phases)
    doc = _document(args, bench, load, counts, phases, summary, notes)
    try:
        if targets.get("json"):
            write_json(targets["json"], doc)
        if targets.get("plot"):
            plot_latency(targets["plot"], summary, title=f"{Path(args.model).name}: {_describe(load)}")
    except OSError as e:
        return _fail(f"cannot write {e.filename or ''}: {e.strerror or e}")
    return EXIT_OK


# -- what is measured ------------------------------------------------------------------------------
class _Bench:
    """The systems of one command, made once and measured phase after phase."""

    current = ""  # the phase running (for an error's message)

    def __init__(self, args, original, optimized, wanted: list[str]):
        import onnxruntime as ort

        from lstm_ort.runtime.session import InferenceSession
        from lstm_ort.serving.streams import StreamBatcher
        from lstm_ort.serving.streams.systems import BatcherSystem, RunSystem

        self.batcher = StreamBatcher(optimized, dict(args.carry), providers=args.providers,
                                     session_options=session_options(args.intra_op_threads),
                                     max_batch=args.max_batch, max_wait_ms=args.max_wait_ms, workers=args.workers)
        try:
            self.pool = chunk_pool(self.batcher.model, self.batcher.carry, dict(args.chunk), dict(args.value),
                                   seed=args.seed)
            probe = self.batcher.open()
            initial = self.batcher.state(probe)  # one stream's first carried inputs
            self.batcher.step(probe, self.pool[0])  # bad chunks fail here, named, before anything is timed
            self.batcher.close(probe)
            self.batcher.wait_specialized(120)  # the kind's own models, made once, before anything is timed
        except Exception:
            self.batcher.shutdown()
            raise
        # The baselines run on the providers the batcher's session resolved, each session with
        # options of its own (lstm_ort's session registers its op library in the options it gets).
        providers = self.batcher.session.get_providers()
        self.systems = []
        for name in wanted:
            if name == "batcher":
                self.systems.append(BatcherSystem(self.batcher, SYSTEMS[name]))
                continue
            so = session_options(args.intra_op_threads)
            if name == "ours":
                session = InferenceSession(optimized.SerializeToString(), so, providers=providers)
            elif original is not None:
                session = ort.InferenceSession(original.SerializeToString(), so, providers=providers)
            else:
                continue
            self.systems.append(RunSystem(SYSTEMS[name], session, self.batcher.carry, initial))

    def measure(self, load, counts: list[int], repeats: int) -> list:
        """Every system at every stream count, ``repeats`` times, the order turned each repeat."""
        from lstm_ort.serving.streams.load import run_phase

        phases = []
        for n in counts:
            for r in range(repeats):
                turn = r % len(self.systems)
                for system in self.systems[turn:] + self.systems[:turn]:
                    self.current = f"{system.name}, {n} streams"
                    phase = run_phase(system, replace(load, streams=n), self.pool)
                    phases.append(phase)
                    s = phase.summary()
                    print(f"streams-bench: {n} streams, {system.name}: {s['steps_per_s']:,.0f} steps/s, latency p50 "
                          f"{s['latency_p50_ms']:.3f} p99 {s['latency_p99_ms']:.3f} ms", file=sys.stderr, flush=True)
        return phases


def summarize(phases: list) -> list[dict]:
    """Per stream count and system, the medians over its repeats (and the worst late count)."""
    groups: dict = {}
    for p in phases:
        groups.setdefault((p.load.streams, p.system), []).append(p.summary())
    out = []
    for (n, system), runs in groups.items():
        row = {"streams": n, "system": system, "repeats": len(runs)}
        for key in ("steps_per_s", "latency_p50_ms", "latency_p99_ms", "latency_p999_ms"):
            row[key] = statistics.median(r[key] for r in runs)
        row["late"] = max(r["late"] for r in runs)
        row["ticks"] = max(r["ticks"] for r in runs)
        row["unanswered"] = max(r["unanswered"] for r in runs)
        row["failed"] = sum(r["failed"] for r in runs)
        mid = sorted(runs, key=lambda r: r["steps_per_s"])[len(runs) // 2]
        row["counters"] = mid["counters"]
        out.append(row)
    for row in out:
        batcher = next((r for r in out if r["streams"] == row["streams"] and r["counters"] is not None), None)
        row["batcher_speedup"] = batcher["steps_per_s"] / row["steps_per_s"] if batcher and row["steps_per_s"] else None
    return out


# -- load generation's inputs (tools/bench_streams.py uses these too) -----------------------------
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


# -- output ----------------------------------------------------------------------------------------
def print_table(title: str, rows: list[tuple], file=None, columns: tuple[str, ...] = ("counter", "value")) -> None:
    """A table (rich where installed, else plain text): the first column left-aligned, the rest right."""
    try:
        from rich.console import Console
        from rich.table import Table
    except ImportError:
        out = file or sys.stdout
        print(title, file=out)
        if len(columns) > 2:
            rows = [columns, *rows]
        widths = [max(len(str(r[k])) for r in rows) for k in range(len(columns))]
        for r in rows:
            cells = [f"{r[0]:<{widths[0]}}", *(f"{c:>{w}}" for c, w in zip(r[1:-1], widths[1:-1]))]
            print("  " + "  ".join([*cells, str(r[-1]) if len(columns) == 2 else f"{r[-1]:>{widths[-1]}}"]), file=out)
        return
    table = Table(title=title)
    for k, name in enumerate(columns):
        table.add_column(name, justify="left" if k == 0 else "right")
    for r in rows:
        table.add_row(*(str(c) for c in r))
    Console(file=file).print(table)


def _describe(load) -> str:
    if load.pattern == "async":
        threads = f"{load.clients} executor thread{'s' * (load.clients > 1)}"
        text = f"async loop (a coroutine per stream; run systems on {threads})"
    else:
        text = f"{load.pattern + ' loop' if load.pattern != 'rounds' else 'rounds'}, {load.clients} client " \
               f"thread{'s' * (load.clients > 1)}"
    if load.period:
        text += f", every {load.period * 1e3:g} ms"
    return text


def _print_report(args, bench, load, summary: list[dict], phases: list) -> None:
    from lstm_ort.serving.streams.load import PERIODIC

    name = Path(args.model).name
    last = summary[-1]["streams"]
    batcher_rows = [r for r in summary if r["streams"] == last and r["counters"] is not None]
    if batcher_rows:
        from lstm_ort.serving.streams.stats import StreamStats

        stats = StreamStats(**batcher_rows[0]["counters"])
        extra = [("behind real time", f"{batcher_rows[0]['late']} of {batcher_rows[0]['ticks']} "
                                      f"{'chunks' if load.pattern in PERIODIC else 'passes'}")] if load.period else []
        print_table(f"StreamBatcher's counters: {name}, {last} streams, {_describe(load)}", [*stats.rows(), *extra])
    rows = []
    for r in summary:
        late = f"{r['late']} / {r['ticks']}" if load.period else "-"
        speedup = "" if r["counters"] is not None or r["batcher_speedup"] is None else f"{r['batcher_speedup']:.2f}x"
        rows.append((f"{r['streams']}", r["system"], f"{r['steps_per_s']:,.0f}", f"{r['latency_p50_ms']:.3f}",
                     f"{r['latency_p99_ms']:.3f}", f"{r['latency_p999_ms']:.3f}", late, speedup))
    print_table(f"{name}: {_describe(load)}, medians of {args.repeats}", rows,
                columns=("streams", "system", "steps/s", "p50 ms", "p99 ms", "p99.9 ms", "late", "batcher x"))
    print("batcher: the StreamBatcher; run ours / run stock: one run per stream per step, lstm_ort's session on the "
          "optimized model / stock onnxruntime on the original; latency: per step, as the client threads measured it"
          + ("; late: chunks sent more than 1 ms after their time, of those due" if load.pattern in PERIODIC else
             "; late: passes that began after their time" if load.period else "") +
          "; batcher x: its steps/s over the system's")


def _document(args, bench, load, counts, phases, summary, notes) -> dict:
    from lstm_ort.serving.streams.load import LATE_S

    batcher_last = next((r for r in reversed(summary) if r["counters"] is not None), None)
    return {"model": str(args.model), "optimized": args.optimized, "pattern": load.pattern, "clients": load.clients,
            "threads": load.clients, "period_ms": None if load.period is None else load.period * 1e3,
            "streams": counts[-1], "ladder": counts, "seconds": load.seconds, "warmup": load.warmup,
            "repeats": args.repeats, "stacked": load.stacked, "seed": load.seed, "max_batch": args.max_batch,
            "max_wait_ms": args.max_wait_ms, "workers": args.workers, "intra_op_threads": args.intra_op_threads,
            "providers": bench.batcher.session.get_providers(), "batched": bench.batcher.batched,
            "fallback_reasons": bench.batcher.fallback_reasons, "notes": notes,
            # each kind's own models: '' where it runs them, else why it runs the model as it came
            "specialized": {str(group): why for group, why in sorted(bench.batcher.specialized.items())},
            # each kind's calls of one stream on its CUDA graph, and '' or why it has none
            "cuda_graphs": {str(group): {"calls": calls, "why_not": why}
                            for group, (calls, why) in sorted(bench.batcher.cuda_graphs().items())},
            "late_threshold_ms": LATE_S * 1e3,
            "stats": batcher_last["counters"] if batcher_last else None,
            "steps_per_s": batcher_last["steps_per_s"] if batcher_last else None,
            "summary": summary, "phases": [p.summary() for p in phases]}


def _targets(args) -> dict:
    """The output files, checked before anything runs (never the model)."""
    from lstm_ort.runtime.output_files import output_target

    inputs = [(args.model, "the model")] + ([(args.optimized, "the optimized model")] if args.optimized else [])
    out = {}
    for option, path in (("--json", args.json), ("--plot", args.plot)):
        if path:
            out[option[2:]] = output_target(path, inputs, option=option)
    if out.get("json") and out.get("plot") and out["json"] == out["plot"]:
        from lstm_ort.runtime.output_files import OutputRefused

        raise OutputRefused("--json and --plot name the same file")
    if out.get("plot"):
        try:
            import matplotlib  # noqa: F401 - only whether it is there, before anything is measured
        except ImportError as e:
            from lstm_ort.runtime.output_files import OutputRefused

            raise OutputRefused(f"--plot needs matplotlib (pip install 'lstm-ort[bench]'): {e}") from None
    return out


def write_json(path, doc, model=None) -> None:
    """Through the commands' one output path (lstm_ort.runtime.output_files): never the model,
    written beside the target and renamed over it, removed on failure or interrupt."""
    from lstm_ort.runtime.output_files import output_target, write_file

    target = output_target(path, [(model, "the model")] if model is not None else [], option="--json")
    write_file(target, lambda p: p.write_text(json.dumps(doc, indent=2, default=_plain)))


def plot_latency(path, summary: list[dict], title: str = "") -> None:
    """Latency p50 (solid) and p99 (dashed) and steps/s against the streams, a line per system."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import NullLocator

    from lstm_ort.runtime.output_files import write_file

    fig, (lat, thr) = plt.subplots(1, 2, figsize=(11, 4.2))
    for k, system in enumerate(dict.fromkeys(r["system"] for r in summary)):
        rows = sorted((r for r in summary if r["system"] == system), key=lambda r: r["streams"])
        n = [r["streams"] for r in rows]
        color = f"C{k}"
        lat.plot(n, [r["latency_p50_ms"] for r in rows], "-o", color=color, label=f"{system} p50")
        lat.plot(n, [r["latency_p99_ms"] for r in rows], "--o", color=color, label=f"{system} p99")
        thr.plot(n, [r["steps_per_s"] for r in rows], "-o", color=color, label=system)
    counts = sorted({r["streams"] for r in summary})
    for ax, label in ((lat, "per-step latency (ms)"), (thr, "steps/s")):
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xticks(counts, [str(n) for n in counts])
        ax.xaxis.set_minor_locator(NullLocator())
        ax.set_xlabel("streams")
        ax.set_ylabel(label)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    write_file(path, lambda p: fig.savefig(p, format="png", dpi=120))
    plt.close(fig)


def _plain(value):
    if isinstance(value, (np.integer, np.floating)):
        return value.item()
    return str(value)


def _is_optimized(model) -> bool:
    from lstm_ort.ops.identity import is_fused

    def nodes(graph):
        for node in graph.node:
            yield node
            for a in node.attribute:
                for g in ([a.g] if a.HasField("g") else a.graphs):
                    yield from nodes(g)
    return any(is_fused(n) for n in nodes(model.graph))


def _usage(message: str) -> int:
    print(f"lstm-ort streams-bench: {message}", file=sys.stderr)
    return EXIT_USAGE


def _fail(message: str) -> int:
    print(f"lstm-ort: {message}", file=sys.stderr)
    return EXIT_INPUT


def _systems(text: str) -> list[str]:
    names = [t.strip() for t in text.split(",") if t.strip()]
    bad = [n for n in names if n not in SYSTEMS]
    if not names or bad or len(set(names)) != len(names):
        raise argparse.ArgumentTypeError(f"must be distinct names of {', '.join(SYSTEMS)}, not {text!r}")
    return names


_pair = named("--carry", "OUTPUT=INPUT")
_shape = named("--chunk", "NAME=D0,D1,... with dims >= 0", dims)
_value = named("--value", "NAME=V[,V...] of finite numbers", lambda text: [finite(v) for v in text.split(",")])
