"""CPU shape grid for tools/bench.py --cpu: the original stock-LSTM model against the optimized
FusedLSTM model, on the session's intra-op pool with a given thread count.

Each row is timed two ways: interleaved (stock and ours alternate run by run, so machine noise
hits both alike; the median of each) and alone (each session's intra-op threads spin after a run,
which interleaving disturbs). Alone runs come in blocks that alternate between the sessions, each
block after a pause and one untimed run, which together outlast the other session's spinning:
a block of all of stock's runs and then one of all of ours let a noisy neighbour on a shared
machine land on one side only (the same row measured 7 ms and 22 ms that way). The median of
each side's runs. Ratio = stock / ours, above 1 means the optimized model is faster.
"""

from __future__ import annotations

import itertools
import statistics
import time
from dataclasses import asdict, dataclass

import numpy as np
import onnxruntime as ort

from lstm_ort.builders import LstmSpec, fused_model, random_layers, stock_model
from lstm_ort.runtime.session import register

# (H, B, T, L, D)
GRID = list(itertools.product([32, 64, 128, 256, 512, 1024], [1, 8, 64], [1, 32, 100], [1, 2], [1, 2]))
QUICK = list(itertools.product([32, 128, 512], [1, 64], [1, 32], [1, 2], [1, 2]))


@dataclass
class GridRow:
    config: str
    threads: int
    ours_ms: float        # interleaved medians
    stock_ms: float
    ratio: float
    ours_alone_ms: float  # each session alone
    stock_alone_ms: float
    ratio_alone: float
    max_abs: float


def label(H, B, T, L, D, I=None) -> str:
    return f"H{H} B{B} T{T} L{L}" + (" bi" if D == 2 else "") + (f" I{I}" if I is not None and I != H else "")


class Runner:
    def __init__(self, model, feeds, threads: int, fused: bool):
        so = ort.SessionOptions()
        so.intra_op_num_threads = threads
        so.inter_op_num_threads = 1
        if fused:
            register(so)
        self.sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
        self.binding = self.sess.io_binding()
        for name, value in feeds.items():
            self.binding.bind_ortvalue_input(name, ort.OrtValue.ortvalue_from_numpy(value))
        for out in self.sess.get_outputs():
            self.binding.bind_output(out.name, "cpu")

    def __call__(self) -> float:
        start = time.perf_counter()
        self.sess.run_with_iobinding(self.binding)
        return (time.perf_counter() - start) * 1e3

    def outputs(self):
        self()
        return [o.numpy() for o in self.binding.get_outputs()]


def _runs_for(ms: float, budget_ms: float, lo: int, hi: int) -> int:
    return int(min(hi, max(lo, budget_ms / max(ms, 1e-3))))


ALONE_BLOCKS = 6
# ORT's idle workers spin ~35 ms after a run before they block (process CPU time after a run of
# stock at 2 threads, this box): the pause and the untimed run together outlast it.
PAUSE_S = 0.03


def alone_in_blocks(stock: Runner, ours: Runner, runs: int) -> tuple[list[float], list[float]]:
    """Each session's runs back to back, in blocks that alternate (stock first in even blocks)."""
    per = max(1, -(-runs // ALONE_BLOCKS))
    times: dict[int, list[float]] = {0: [], 1: []}
    for k in range(ALONE_BLOCKS):
        for side in (0, 1) if k % 2 == 0 else (1, 0):
            run = (stock, ours)[side]
            time.sleep(PAUSE_S)
            run()
            times[side] += [run() for _ in range(per)]
    return times[0], times[1]


def bench_row(H, B, T, L, D, threads: int, budget_ms: float = 300.0, I: int | None = None, seed: int = 0) -> GridRow:
    I = I or H
    spec = LstmSpec(input_size=I, hidden_size=H, num_layers=L, direction="bidirectional" if D == 2 else "forward")
    rng = np.random.default_rng(seed)
    layers = random_layers(spec, rng)
    feeds = {"X": rng.standard_normal((T, B, I)).astype(np.float32)}
    stock = Runner(stock_model(spec, layers), feeds, threads, fused=False)
    ours = Runner(fused_model(spec, layers), feeds, threads, fused=True)
    err = max(float(np.max(np.abs(a - b))) for a, b in zip(ours.outputs(), stock.outputs()))
    first = min(stock(), stock()), min(ours(), ours())  # warm-up, and a size for the run counts
    runs = _runs_for(first[0] + first[1], budget_ms, 5, 400)
    # Interleaved, alternating which goes first.
    s_times, o_times = [], []
    for i in range(runs):
        if i % 2:
            s_times.append(stock())
            o_times.append(ours())
        else:
            o_times.append(ours())
            s_times.append(stock())
    s_alone, o_alone = alone_in_blocks(stock, ours, runs)
    med = statistics.median
    return GridRow(label(H, B, T, L, D, I), threads, med(o_times), med(s_times), med(s_times) / med(o_times),
                   med(o_alone), med(s_alone), med(s_alone) / med(o_alone), err)


def print_rows(rows: list[GridRow]) -> None:
    head = (f"{'config':<24}{'thr':>4}{'ours ms':>10}{'stock ms':>10}{'ratio':>7}"
            f"{'ours alone':>11}{'stock alone':>12}{'ratio':>7}{'max-abs':>10}")
    print(head)
    print("-" * len(head))
    for r in rows:
        print(f"{r.config:<24}{r.threads:>4}{r.ours_ms:>10.3f}{r.stock_ms:>10.3f}{r.ratio:>7.2f}"
              f"{r.ours_alone_ms:>11.3f}{r.stock_alone_ms:>12.3f}{r.ratio_alone:>7.2f}{r.max_abs:>10.1e}")


def summary(rows: list[GridRow]) -> str:
    if not rows:
        return ""
    lines = []
    for t in sorted({r.threads for r in rows}):
        sel = [r for r in rows if r.threads == t]
        ratios = [r.ratio for r in sel]
        alone = [r.ratio_alone for r in sel]
        worst = min(sel, key=lambda r: r.ratio)
        lines.append(f"threads {t}: {len(sel)} rows, ratio median {statistics.median(ratios):.2f} "
                     f"(alone {statistics.median(alone):.2f}), worst {worst.ratio:.2f} ({worst.config}), "
                     f"rows < 1.0: {sum(x < 1.0 for x in ratios)} (alone {sum(x < 1.0 for x in alone)})")
    return "\n".join(lines)


def plot(rows: list[GridRow], path: str) -> None:
    try:
        import matplotlib
    except ImportError:
        print(f"--plot {path}: matplotlib is not installed, no chart written")
        return

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    threads = sorted({r.threads for r in rows})
    configs = list(dict.fromkeys(r.config for r in rows))
    xs = np.arange(len(configs))
    width = 0.8 / len(threads)
    fig, ax = plt.subplots(figsize=(max(8, 0.25 * len(configs)), 4.5))
    for k, t in enumerate(threads):
        by = {r.config: r.ratio for r in rows if r.threads == t}
        ax.bar(xs + k * width, [by.get(c, 0) for c in configs], width, label=f"{t} thread(s)")
    ax.axhline(1.0, color="k", lw=0.8)
    ax.set_xticks(xs + width * (len(threads) - 1) / 2, configs, rotation=90, fontsize=6)
    ax.set_ylabel("stock ms / ours ms")
    ax.set_yscale("log")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def as_dicts(rows: list[GridRow]) -> list[dict]:
    return [asdict(r) for r in rows]
