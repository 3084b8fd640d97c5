#!/usr/bin/env python3
"""Time FusedLSTM against stock onnxruntime's LSTM and torch's nn.LSTM, in one process, on the
same weights and inputs; print ratios and the max-abs error of each against stock.

    python tools/bench.py                 # CUDA EP, the reference configs
    python tools/bench.py --cpu           # CPU EP: the reference configs and a shape grid (tools/cpu_grid.py),
                                          # original stock-LSTM model vs optimized, interleaved and alone
    python tools/bench.py --cpu --quick --threads 1,2 --json cpu.json --plot cpu.png
    python tools/bench.py --config 2,100,256,8 --config 2,100,512,64,bi --json out.json --plot out.png
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import onnxruntime as ort

from lstm_ort.builders import LstmSpec, fused_model, random_layers, stock_model
from lstm_ort.ops.identity import OPTIMIZE_PRECISION, TUNABLE_STRATEGIES
from lstm_ort.testing import max_abs
from lstm_ort.tuning.timing import OrtRunner, median_ms

sys.path.insert(0, str(Path(__file__).resolve().parent))
import table  # noqa: E402  (tools/table.py)

# (L, T, H, B, bidirectional): DEVELOPERS.md's reference configs.
REFERENCE = [(4, 100, 512, 64, False), (1, 100, 512, 64, False), (2, 200, 1024, 32, False), (4, 100, 512, 1, False),
             (2, 100, 256, 8, False), (4, 100, 512, 256, False), (2, 100, 512, 64, True)]

# (L, T, H, B, bidirectional): the GPU shape grid (--grid): H 128-2048 x B 1-512 at T=100 for one
# layer, deep stacks, both directions, T = 1 and 1000 at the corners that stay affordable, short
# calls (T = 1, 4, 10) and two dynamo-export shapes.
GPU_GRID = ([(1, 100, H, B, False) for H in (128, 256, 512, 1024, 2048) for B in (1, 8, 64, 256, 512)]
            + [(4, 100, H, B, False) for H in (256, 1024) for B in (1, 64, 512)]
            + [(1, 100, H, B, True) for H in (512, 2048) for B in (8, 256)]
            + [(1, 1, 128, 1, False), (4, 1, 2048, 512, True), (1, 1, 512, 64, False), (4, 1, 128, 512, False)]
            + [(1, 1000, 128, 1, False), (4, 1000, 128, 8, True), (1, 1000, 512, 64, False), (1, 1000, 2048, 1, False),
               (4, 1000, 256, 512, False)]
            # Short calls (T = 1, 4, 10: streaming and short items, where the fixed cost of a call counts)
            + [(L, T, H, B, False) for T in (1, 4, 10) for L, H, B in ((2, 128, 1), (2, 128, 64), (2, 512, 16),
                                                                          (2, 512, 256), (1, 1024, 1024))]
            # The torch dynamo exporter's shapes of issue 40's table
            + [(2, 100, 768, 32, False), (1, 64, 1536, 128, True)])


@dataclass
class Row:
    config: str
    ours_ms: float
    stock_ms: float
    stock_tf32_ms: float | None
    torch_ms: float | None
    vs_stock: float
    vs_torch: float | None
    err_ours: float
    err_torch: float | None
    strategies: dict = field(default_factory=dict)  # --strategies: name -> [ms, max-abs vs stock]
    # --precisions: mode -> [ms, max-abs vs FP32 stock, x the best stock at any precision]
    precisions: dict = field(default_factory=dict)
    stock_fp16_ms: float | None = None  # stock's CUDA LSTM on the fp16 model (with --precisions fp16)
    torch_fp32_ms: float | None = None  # torch cuDNN with TF32 off: the FP32-accurate torch path
    err_stock_tf32: float | None = None  # stock's default (TF32) against stock FP32: the error class to match


def parse_config(text: str):
    parts = text.split(",")
    if len(parts) not in (4, 5) or (len(parts) == 5 and parts[4] != "bi"):
        raise argparse.ArgumentTypeError("--config takes L,T,H,B or L,T,H,B,bi")
    L, T, H, B = (int(p) for p in parts[:4])
    return L, T, H, B, len(parts) == 5


def label(cfg) -> str:
    L, T, H, B, bi = cfg
    return f"L{L} T{T} H{H} B{B}" + (" bi" if bi else "")


def torch_runner(spec: LstmSpec, layers, x: np.ndarray, device: str, tf32: bool = True):
    import torch

    H = spec.hidden_size
    lstm = torch.nn.LSTM(spec.input_size, H, spec.num_layers, bidirectional=spec.num_directions == 2).to(device).eval()
    order = np.concatenate([np.arange(0, H), np.arange(2 * H, 3 * H), np.arange(3 * H, 4 * H), np.arange(H, 2 * H)])
    with torch.no_grad():
        for k, lw in enumerate(layers):
            for d in range(spec.num_directions):
                sfx = f"_l{k}" + ("_reverse" if d else "")
                getattr(lstm, "weight_ih" + sfx).copy_(torch.from_numpy(lw.W[d][order]))
                getattr(lstm, "weight_hh" + sfx).copy_(torch.from_numpy(lw.R[d][order]))
                getattr(lstm, "bias_ih" + sfx).copy_(torch.from_numpy(lw.B[d][:4 * H][order]))
                getattr(lstm, "bias_hh" + sfx).copy_(torch.from_numpy(lw.B[d][4 * H:][order]))
    xt = torch.from_numpy(x).to(device)
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)

    def run():
        # cuDNN reads the flag when the call is made; set it per call so two runners can interleave
        torch.backends.cudnn.allow_tf32 = tf32
        with torch.no_grad():
            return lstm(xt)

    def outputs():
        y, (h, c) = run()
        sync()
        D = spec.num_directions
        T, B = x.shape[0], x.shape[1]
        return [y.reshape(T, B, D, H).permute(0, 2, 1, 3).cpu().numpy(), h.cpu().numpy(), c.cpu().numpy()]

    return run, outputs, sync


def config_case(cfg):
    """(spec, layers, x) of a config: I = H, weights and input drawn from seed 0."""
    L, T, H, B, bi = cfg
    spec = LstmSpec(input_size=H, hidden_size=H, num_layers=L, direction="bidirectional" if bi else "forward")
    rng = np.random.default_rng(0)
    layers = random_layers(spec, rng)
    return spec, layers, rng.standard_normal((T, B, H)).astype(np.float32)


def bench_config(cfg, device: str, runs: int, warmup: int, use_torch: bool, strategies=(), precisions=()) -> Row:
    spec, layers, x = config_case(cfg)
    feeds = {"X": x}
    stock = OrtRunner(stock_model(spec, layers), feeds, device, fused=False)
    ours = OrtRunner(fused_model(spec, layers), feeds, device, fused=True, precision=OPTIMIZE_PRECISION)
    ref = stock.outputs()
    err_ours = max_abs(ours.outputs(), ref)
    stock_ms = median_ms(stock, runs, warmup)
    ours_ms = median_ms(ours, runs, warmup)
    stock_tf32_ms = err_stock_tf32 = None
    if device == "cuda":  # stock's default CUDA setting: TF32 on, faster and less exact
        stock_tf32 = OrtRunner(stock_model(spec, layers), feeds, device, False, tf32=True)
        err_stock_tf32 = max_abs(stock_tf32.outputs(), ref)
        stock_tf32_ms = median_ms(stock_tf32, runs, warmup)
    torch_ms = err_torch = torch_fp32_ms = None
    if use_torch:
        run, outputs, sync = torch_runner(spec, layers, x, device)
        err_torch = max_abs(outputs(), ref)
        torch_ms = median_ms(run, runs, warmup, sync)
        if device == "cuda":
            run32, _, sync32 = torch_runner(spec, layers, x, device, tf32=False)
            torch_fp32_ms = median_ms(run32, runs, warmup, sync32)
    by_strategy = {}
    for name in strategies:
        forced = OrtRunner(fused_model(spec, layers), feeds, device, fused=True, strategy=name)
        by_strategy[name] = [median_ms(forced, runs, warmup), max_abs(forced.outputs(), ref)]
    best_stock = min(stock_ms, stock_tf32_ms or stock_ms)
    best_any = min(best_stock, torch_ms or best_stock)
    by_precision = {}
    for mode in precisions:
        runner = OrtRunner(fused_model(spec, layers), feeds, device, fused=True, precision=mode)
        ms = median_ms(runner, runs, warmup)
        by_precision[mode] = [ms, max_abs(runner.outputs(), ref), best_any / ms]
    stock_fp16_ms = None
    if "fp16" in precisions and device == "cuda":
        feeds16 = {"X": x.astype(np.float16)}
        stock_fp16_ms = median_ms(OrtRunner(stock_model(spec, layers, np.float16), feeds16, device, False, tf32=True),
                                  runs, warmup)
    return Row(label(cfg), ours_ms, stock_ms, stock_tf32_ms, torch_ms, best_stock / ours_ms,
               torch_ms / ours_ms if torch_ms else None, err_ours, err_torch, by_strategy, by_precision,
               stock_fp16_ms, torch_fp32_ms, err_stock_tf32)


def fmt(v, spec):
    return "-" if v is None else format(v, spec)


def print_table(rows: list[Row], device: str) -> None:
    print(f"\nFusedLSTM vs stock onnxruntime ({device}) and torch nn.LSTM; ratio > 1 means ours is faster.")
    print(f"ours = what `optimize` writes (precision {OPTIMIZE_PRECISION}); stock = FP32 (use_tf32=0, the error "
          "reference); stock tf32 = stock's default; x stock uses the faster one.")
    table.print_table([("config", 22, table.field("config")), ("ours ms", 10, table.field("ours_ms", ".3f")),
                 ("stock ms", 10, table.field("stock_ms", ".3f")), ("stk tf32", 10, table.field("stock_tf32_ms", ".3f")),
                 ("torch ms", 10, table.field("torch_ms", ".3f")), ("x stock", 9, table.field("vs_stock", ".2f")),
                 ("x torch", 9, table.field("vs_torch", ".2f")), ("err ours", 11, table.field("err_ours", ".2e")),
                 ("err torch", 11, table.field("err_torch", ".2e"))], rows)
    if any(r.precisions for r in rows):
        print("\nours per precision mode (ms, max-abs vs FP32 stock, x best stock at any precision);"
              " stock fp16 = stock's CUDA LSTM on the fp16 model:")
        for r in rows:
            print(f"{r.config:<22}" + "  ".join(f"{k} {v[0]:.3f} ({v[1]:.1e}, {v[2]:.2f}x)" for k, v in r.precisions.items())
                  + (f"  stock fp16 {r.stock_fp16_ms:.3f}" if r.stock_fp16_ms else "")
                  + (f"  torch fp32 {r.torch_fp32_ms:.3f}" if r.torch_fp32_ms else "")
                  + (f"  stock tf32 err {r.err_stock_tf32:.1e}" if r.err_stock_tf32 is not None else ""))
    if any(r.strategies for r in rows):
        print("\nours per forced strategy (ms, max-abs vs stock):")
        for r in rows:
            print(f"{r.config:<22}" + "  ".join(f"{k} {v[0]:.3f} ({v[1]:.1e})" for k, v in r.strategies.items()))


def plot(rows: list[Row], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    xs = np.arange(len(rows))
    fig, ax = plt.subplots(figsize=(max(6, 1.3 * len(rows)), 4))
    ax.bar(xs - 0.2, [r.vs_stock for r in rows], 0.4, label="vs stock onnxruntime")
    ax.bar(xs + 0.2, [r.vs_torch or 0 for r in rows], 0.4, label="vs torch cuDNN")
    ax.axhline(1.0, color="k", lw=0.8)
    ax.set_xticks(xs, [r.config for r in rows], rotation=30, ha="right")
    ax.set_ylabel("speed-up of FusedLSTM (x)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cpu", action="store_true", help="time the CPU execution provider instead of CUDA")
    p.add_argument("--config", action="append", type=parse_config, help="L,T,H,B[,bi]; repeatable")
    p.add_argument("--grid", action="store_true", help="CUDA: the GPU shape grid (GPU_GRID) after the configs")
    p.add_argument("--runs", type=int, default=None, help="timed runs per variant (default 30 GPU, 5 CPU)")
    p.add_argument("--warmup", type=int, default=None)
    p.add_argument("--no-torch", action="store_true")
    p.add_argument("--json", help="write the rows as JSON here")
    p.add_argument("--plot", help="write a bar chart of the ratios here (PNG)")
    p.add_argument("--strategies", default="", help="also time ours with each of these CUDA strategies forced, "
                   f"comma-separated ({', '.join(TUNABLE_STRATEGIES)})")
    p.add_argument("--precisions", default="", help="also time ours in each of these precision modes, "
                   "comma-separated (fp32, tf32, fp16, bf16, auto)")
    p.add_argument("--threads", default="2", help="--cpu: intra_op_num_threads, comma-separated (e.g. 1,2)")
    p.add_argument("--quick", action="store_true", help="--cpu: a small subset of the grid, for development")
    p.add_argument("--odd", action="store_true", help="--cpu: the odd-shape grid (tools/cpu_grid.py ODD_AXES, "
                   "ODD_ROWS rows) and the corpus models at their call shapes, instead of the power-of-two grid")
    p.add_argument("--odd-rows", type=int, default=None, help="--cpu --odd: the first N rows of the odd grid only")
    p.add_argument("--no-grid", action="store_true", help="--cpu: the reference configs only")
    p.add_argument("--budget-ms", type=float, default=300.0, help="--cpu: time per row and mode (sets run counts)")
    p.add_argument("--max-gflop", type=float, default=60.0, help="--cpu: skip grid rows heavier than this")
    args = p.parse_args(argv)
    if args.cpu:
        return cpu_main(args)
    device = "cpu" if args.cpu else "cuda"
    if device == "cuda" and "CUDAExecutionProvider" not in ort.get_available_providers():
        p.error("onnxruntime's CUDA execution provider is not available; use --cpu")
    runs = args.runs or (5 if args.cpu else 30)
    warmup = args.warmup if args.warmup is not None else (1 if args.cpu else 5)
    use_torch = not args.no_torch
    if use_torch:
        try:
            import torch
            use_torch = device == "cpu" or torch.cuda.is_available()
        except ImportError:
            use_torch = False
    rows = []
    for cfg in (args.config or REFERENCE) + (GPU_GRID if args.grid else []):
        strategies = [x for x in args.strategies.split(",") if x]
        precisions = [x for x in args.precisions.split(",") if x]
        rows.append(bench_config(cfg, device, runs, warmup, use_torch, strategies, precisions))
        print(f"  {rows[-1].config}: ours {rows[-1].ours_ms:.3f} ms, stock {rows[-1].stock_ms:.3f} ms", flush=True)
        if args.json:  # row by row: a run cut short keeps what it measured
            Path(args.json).write_text(json.dumps({"device": device, "rows": [asdict(r) for r in rows]}, indent=2))
    print_table(rows, device)
    if args.plot:
        plot(rows, args.plot)
    return 0


def cpu_main(args) -> int:
    import cpu_grid

    threads = [int(t) for t in args.threads.split(",")]
    if args.odd:
        configs = cpu_grid.odd_grid()[: args.odd_rows]
    else:
        configs = [(H, B, T, L, 2 if bi else 1) for (L, T, H, B, bi) in (args.config or REFERENCE)]
        if not args.config and not args.no_grid:
            configs += [c for c in (cpu_grid.QUICK if args.quick else cpu_grid.GRID) if c not in configs]
    gflop = lambda H, B, T, L, D, I=None: 2 * T * B * 4 * H * ((I or H) + H) * L * D / 1e9  # noqa: E731
    rows = []

    def show(r):
        print(f"  {r.config} x{r.threads}: stock {r.stock_ms:.3f} ms, ours {r.ours_ms:.3f} ms ({r.chosen}), "
              f"{r.ratio:.2f}x (alone {r.ratio_alone:.2f}x); fused kernel {r.fused_ratio:.2f}x", flush=True)

    for cfg in configs:
        if gflop(*cfg) > args.max_gflop:
            print(f"  {cpu_grid.label(*cfg)}: skipped ({gflop(*cfg):.0f} GFLOP > --max-gflop)", flush=True)
            continue
        for t in threads:
            rows.append(cpu_grid.bench_row(*cfg[:5], threads=t, budget_ms=args.budget_ms, I=cfg[5] if len(cfg) > 5 else None))
            show(rows[-1])
    if args.odd:
        for t in threads:
            for r in cpu_grid.bench_corpus(t, args.budget_ms):
                rows.append(r)
                show(r)
    print("\nFusedLSTM (optimized model) vs the original stock-LSTM model, CPU EP; ratio = stock / ours.")
    cpu_grid.print_rows(rows)
    print(cpu_grid.summary(rows))
    if args.json:
        Path(args.json).write_text(json.dumps({"device": "cpu", "rows": cpu_grid.as_dicts(rows)}, indent=2))
    if args.plot:
        cpu_grid.plot(rows, args.plot)
    return 0


if __name__ == "__main__":
    sys.exit(main())
