#!/usr/bin/env python3
"""Factored weights (optimize --low-rank): speed of our factored kernel against our own full-rank
kernel, in one process on the same inputs, and how the error grows as the rank falls on real
models of the corpus (models/corpus.py).

    python tools/bench_low_rank.py --cpu --threads 1,2        # CPU EP: speed (interleaved medians) and error
    python tools/bench_low_rank.py                            # CUDA EP: speed (device-bound medians) and error
    python tools/bench_low_rank.py --cpu --no-error --config 4,100,512,64 --rank-div 4 --json out.json

Speed rows: the same random stack (uniform +-1/sqrt(H) weights, as torch initialises nn.LSTM)
run whole and factored at rank H/div (input and recurrent weights), ratio = full / factored.
The CPU rows alternate the two sessions run by run (machine noise hits both alike) and take
medians. Error rows: each corpus model optimized with --low-rank at H/2, H/4, H/8 (the factored
model against the unfactored optimized one, on the entry's own input draws), max-abs and
relative error of every output.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tools"))

from lstm_ort.builders import LstmSpec, fused_model, random_layers  # noqa: E402
from lstm_ort.testing import factored_layers, max_abs  # noqa: E402
from table import field, print_table  # noqa: E402

# (L, T, H, B): the targets.
CONFIGS = [(4, 100, 512, 64), (4, 100, 1024, 64)]
# Real models with LSTMs: silero-vad (H 128, LSTM inside If branches), g2p-id's tf2onnx encoder.
CORPUS = ["silero_vad 16k", "g2p_id encoder (tf2onnx)"]
SAMPLES = 4


@dataclass
class SpeedRow:
    config: str
    device: str
    threads: int | None
    rank: int
    full_ms: float
    factored_ms: float
    ratio: float
    max_abs: float  # factored against full: what the rank costs on random weights


@dataclass
class ErrorRow:
    model: str
    hidden: int
    rank: int
    factored: str  # "k of n matrices"
    weights: str  # "before -> after elements"
    energy: float  # the factored matrices' kept energy, mean
    output: str  # a model output, or "node NAME": that FusedLSTM node alone on its own inputs
    max_abs: float
    relative: float


def parse_config(text: str):
    L, T, H, B = (int(p) for p in text.split(","))
    return L, T, H, B


def label(L, T, H, B) -> str:
    return f"L{L} T{T} H{H} B{B}"


def interleaved_ms(a, b, runs: int) -> tuple[float, float]:
    """Medians of `runs` calls each, alternating which of the two goes first."""
    a(), b()  # warm-up
    ta, tb = [], []
    for i in range(runs):
        first, second = (a, b) if i % 2 == 0 else (b, a)
        t1, t2 = first(), second()
        (ta if first is a else tb).append(t1)
        (tb if first is a else ta).append(t2)
    return statistics.median(ta), statistics.median(tb)


def speed_cpu(cfg, div: int, threads: int, runs: int) -> SpeedRow:
    from cpu_grid import Runner

    L, T, H, B = cfg
    spec = LstmSpec(input_size=H, hidden_size=H, num_layers=L)
    rng = np.random.default_rng(0)
    layers = random_layers(spec, rng)
    feeds = {"X": rng.standard_normal((T, B, H)).astype(np.float32)}
    rank = H // div
    full = Runner(fused_model(spec, layers), feeds, threads, fused=True)
    factored = Runner(fused_model(spec, factored_layers(layers, rank, rank)), feeds, threads, fused=True)
    err = max_abs(factored.outputs(), full.outputs())
    full_ms, factored_ms = interleaved_ms(full, factored, runs)
    return SpeedRow(label(*cfg), "cpu", threads, rank, full_ms, factored_ms, full_ms / factored_ms, err)


def speed_cuda(cfg, div: int, runs: int) -> SpeedRow:
    from lstm_ort.tuning.timing import OrtRunner, median_ms

    L, T, H, B = cfg
    spec = LstmSpec(input_size=H, hidden_size=H, num_layers=L)
    rng = np.random.default_rng(0)
    layers = random_layers(spec, rng)
    feeds = {"X": rng.standard_normal((T, B, H)).astype(np.float32)}
    rank = H // div
    full = OrtRunner(fused_model(spec, layers), feeds, "cuda", fused=True)
    factored = OrtRunner(fused_model(spec, factored_layers(layers, rank, rank)), feeds, "cuda", fused=True)
    err = max_abs(factored.outputs(), full.outputs())
    # Device-bound calls: median_ms waits for each run; alternate blocks of runs between the two.
    full_ms, factored_ms = [], []
    for _ in range(3):
        full_ms.append(median_ms(full, runs, 3))
        factored_ms.append(median_ms(factored, runs, 3))
    f, g = statistics.median(full_ms), statistics.median(factored_ms)
    return SpeedRow(label(*cfg), "cuda", None, rank, f, g, f / g, err)


def error_rows(name: str, divs=(2, 4, 8)) -> list[ErrorRow]:
    sys.path.insert(0, str(ROOT / "models"))
    import corpus

    from lstm_ort.rewriter import Report, optimize
    from lstm_ort.rewriter.low_rank import LowRank
    from lstm_ort.runtime.nodes import node_shapes

    entry = next(e for e in corpus.ENTRIES if e.name == name)
    model = entry.build()
    hidden = max(s.hidden_size for _, s in node_shapes(optimize(model)) if s is not None)
    samples = [entry.feeds(np.random.default_rng(seed)) for seed in range(SAMPLES)]
    rows = []
    for div in divs:
        report = Report()
        # The error of factoring, wherever it saves work: the CPU's rule (the CUDA rule keeps
        # layers whole where the factored path would be slower; low_rank_cost.py).
        optimize(model, low_rank=LowRank(rank=hidden // div, device="cpu"), calibration=samples, report=report)
        lr = report.low_rank
        energy = float(np.mean([m.kept_energy for m in lr.matrices if m.rank])) if lr.factored else 1.0
        for o in [*lr.outputs, *lr.nodes]:
            short = o.name if len(o.name) <= 24 else "..." + o.name[-21:]  # silero's inlined If-branch names
            what = o.name if o in lr.outputs else f"node {short}" + (" (random X)" if "random" in o.inputs else "")
            rows.append(ErrorRow(name, hidden, hidden // div, f"{lr.factored} of {len(lr.matrices)}",
                                 f"{lr.elements_before} -> {lr.elements_after}", energy, what, o.max_abs, o.relative))
    return rows


def print_speed(rows: list[SpeedRow]) -> None:
    print("\nours factored (rank H/div, input and recurrent) vs ours full rank; ratio = full / factored")
    print_table([("config", 22, field("config")), ("device", 7, field("device")),
                 ("thr", 5, lambda r: r.threads or "-"), ("rank", 6, field("rank")),
                 ("full ms", 11, field("full_ms", ".2f")), ("factored ms", 13, field("factored_ms", ".2f")),
                 ("ratio", 8, field("ratio", ".2f")), ("max-abs", 10, field("max_abs", ".2e"))], rows)


def print_errors(rows: list[ErrorRow]) -> None:
    print("\nerror of the factored model against the unfactored optimized one (the entry's inputs, "
          f"{SAMPLES} draws); relative = ||diff|| / ||unfactored||")
    print_table([("model", 26, field("model")), ("H", 5, field("hidden")), ("rank", 6, field("rank")),
                 ("factored", 10, field("factored")), ("weights", 22, field("weights")),
                 ("energy", 8, field("energy", ".3f")), ("", 2, lambda r: ""), ("output", "<34", field("output")),
                 ("max-abs", 10, field("max_abs", ".2e")), ("relative", 10, field("relative", ".2e"))], rows)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cpu", action="store_true", help="time the CPU execution provider instead of CUDA")
    p.add_argument("--config", action="append", type=parse_config, help="L,T,H,B (repeatable)")
    p.add_argument("--rank-div", type=int, default=4, help="speed rows factor at rank H / this (default 4)")
    p.add_argument("--threads", default="1,2", help="--cpu: intra_op_num_threads, comma-separated")
    p.add_argument("--runs", type=int, default=None, help="timed runs per variant (default 5 CPU, 20 GPU)")
    p.add_argument("--no-speed", action="store_true")
    p.add_argument("--no-error", action="store_true")
    p.add_argument("--model", action="append", help="corpus entries for the error rows (default: silero, g2p)")
    p.add_argument("--json", help="write the rows as JSON here")
    args = p.parse_args(argv)
    speed, errors = [], []
    if not args.no_speed:
        if not args.cpu:
            import onnxruntime as ort

            if "CUDAExecutionProvider" not in ort.get_available_providers():
                p.error("onnxruntime's CUDA execution provider is not available; use --cpu")
        for cfg in args.config or CONFIGS:
            for t in ([int(x) for x in args.threads.split(",")] if args.cpu else [None]):
                row = (speed_cpu(cfg, args.rank_div, t, args.runs or 5) if args.cpu
                       else speed_cuda(cfg, args.rank_div, args.runs or 20))
                speed.append(row)
                print(f"  {row.config} {row.device} x{row.threads or '-'}: full {row.full_ms:.2f} ms, factored "
                      f"{row.factored_ms:.2f} ms, {row.ratio:.2f}x", flush=True)
        print_speed(speed)
    if not args.no_error:
        for name in args.model or CORPUS:
            errors += error_rows(name)
        print_errors(errors)
    if args.json:
        Path(args.json).write_text(json.dumps({"speed": [asdict(r) for r in speed],
                                               "error": [asdict(r) for r in errors]}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
