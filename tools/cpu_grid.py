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
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import onnxruntime as ort

from lstm_ort.builders import LstmSpec, fused_model, random_layers, stock_model
from lstm_ort.ops.identity import CPU_KERNELS
from lstm_ort.runtime import native
from lstm_ort.runtime.session import register, with_attributes
from table import field, print_table

# (H, B, T, L, D)
GRID = list(itertools.product([32, 64, 128, 256, 512, 1024], [1, 8, 64], [1, 32, 100], [1, 2], [1, 2]))
QUICK = list(itertools.product([32, 128, 512], [1, 64], [1, 32], [1, 2], [1, 2]))


# The odd-shape grid (issue 34): the widths, batches and lengths the shipped models have, not
# powers of two with I = H. A fixed sample of ODD_ROWS rows (seeded) from the product below.
ODD_AXES = dict(H=[40, 72, 100, 200, 320, 640], I=[13, 28, 40, 80, 161, 257], B=[1, 3, 5, 8, 16, 32, 64],
                T=[1, 7, 24, 50, 150], D=[1, 2], L=[1, 2])
ODD_ROWS = 120


def odd_grid(rows: int = ODD_ROWS, seed: int = 34) -> list[tuple[int, int, int, int, int, int]]:
    """(H, B, T, L, D, I) rows sampled without repeats from ODD_AXES, in a fixed order."""
    full = list(itertools.product(*ODD_AXES.values()))
    picks = np.random.default_rng(seed).choice(len(full), size=min(rows, len(full)), replace=False)
    return [(H, B, T, L, D, I) for (H, I, B, T, D, L) in (full[k] for k in sorted(picks))]


@dataclass
class GridRow:
    config: str
    threads: int
    ours_ms: float        # interleaved medians; ours = the optimized model as it ships (cpu_kernel auto)
    stock_ms: float
    ratio: float
    ours_alone_ms: float  # each session alone
    stock_alone_ms: float
    ratio_alone: float
    max_abs: float
    chosen: str = ""      # what auto chose for the row's shape class (a CPU_KERNELS name)
    fused_ms: float = 0.0  # FusedLSTM's own kernel alone (cpu_kernel fused), interleaved and alone
    fused_alone_ms: float = 0.0
    fused_ratio: float = 0.0
    fused_ratio_alone: float = 0.0


def label(H, B, T, L, D, I=None) -> str:
    return f"H{H} B{B} T{T} L{L}" + (" bi" if D == 2 else "") + (f" I{I}" if I is not None and I != H else "")


class Runner:
    def __init__(self, model, feeds, threads: int, fused: bool, cpu_kernel: str | None = None):
        so = ort.SessionOptions()
        so.intra_op_num_threads = threads
        so.inter_op_num_threads = 1
        data = model.SerializeToString()
        if fused:
            register(so)
            if cpu_kernel:
                data = with_attributes(data, {"cpu_kernel": cpu_kernel})
        self.sess = ort.InferenceSession(data, so, providers=["CPUExecutionProvider"])
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
# stock at 2 threads, this box): the pause outlasts it, with room for a loaded machine.
PAUSE_S = 0.06
# Runs that let auto measure a shape class before any is timed here: until its report says the class
# is decided (up to four candidates in blocks of an untimed and two timed runs, two rounds at least,
# up to eight rounds where in doubt: cpu/kernel_tuner.h), at most this many.
TUNING_RUNS = 100


def alone_in_blocks(runners: list[Runner], runs: int) -> list[list[float]]:
    """Each session's runs back to back, in blocks that rotate which session goes first."""
    per = max(1, -(-runs // ALONE_BLOCKS))
    times: list[list[float]] = [[] for _ in runners]
    for k in range(ALONE_BLOCKS):
        for side in (list(range(len(runners)))[k % len(runners):] + list(range(len(runners)))[:k % len(runners)]):
            run = runners[side]
            time.sleep(PAUSE_S)
            run()
            times[side] += [run() for _ in range(per)]
    return times


def _choice(node: str) -> str:
    """What auto chose for the one shape class the row's auto session has run, per node."""
    try:
        report = native.cpu_kernel_report()
    except (AttributeError, ValueError):  # a library from before the choice (LSTM_ORT_LIBRARY, for an A/B)
        return "-"
    chosen = [c.chosen for c in report if (c.node == node or c.node.startswith(node + "_")) and c.B > 0]
    return chosen[0] if len(chosen) == 1 else ",".join(chosen)


def bench_models(name: str, original, optimized, feeds: dict, threads: int, budget_ms: float = 300.0) -> GridRow:
    """The original model against the optimized one as it ships (auto) and with the fused kernel
    alone, on the same feeds, interleaved and each alone."""
    node = "lstm_ort_bench_auto"
    optimized = _renamed_fused_nodes(optimized, node)
    stock = Runner(original, feeds, threads, fused=False)
    ours = Runner(optimized, feeds, threads, fused=True, cpu_kernel="auto")
    fused = Runner(optimized, feeds, threads, fused=True, cpu_kernel="fused")
    err = max(float(np.max(np.abs(a - b))) for a, b in zip(ours.outputs(), stock.outputs()))
    # auto measures its candidates on these calls: alone, as in a process with one session, once the
    # other sessions' workers have stopped spinning (they took the cores from it otherwise and made
    # its choice at 2 threads a matter of luck).
    time.sleep(PAUSE_S)
    for _ in range(TUNING_RUNS):
        ours()
        chosen = _choice(node)
        if "auto" not in chosen.split(","):
            break
    first = min(stock(), stock()) + min(ours(), ours()) + min(fused(), fused())
    runs = _runs_for(first, budget_ms, 5, 400)
    runners = [stock, ours, fused]
    inter: list[list[float]] = [[] for _ in runners]
    for i in range(runs):  # interleaved, rotating which goes first
        for k in range(3):
            side = (i + k) % 3
            inter[side].append(runners[side]())
    alone = alone_in_blocks(runners, runs)
    med = statistics.median
    s, o, f = (med(t) for t in inter)
    sa, oa, fa = (med(t) for t in alone)
    return GridRow(name, threads, o, s, s / o, oa, sa, sa / oa, err, chosen, f, fa, s / f, sa / fa)


def _renamed_fused_nodes(model, name: str):
    """A copy whose FusedLSTM nodes carry `name` (numbered after the first), so the kernel report
    tells this row's session from others alive in the process."""
    import copy

    from lstm_ort.runtime.nodes import fused_nodes

    out = copy.deepcopy(model)
    for k, n in enumerate(fused_nodes(out)):
        n.name = name if k == 0 else f"{name}_{k}"
    return out


def bench_row(H, B, T, L, D, threads: int, budget_ms: float = 300.0, I: int | None = None, seed: int = 0) -> GridRow:
    I = I or H
    spec = LstmSpec(input_size=I, hidden_size=H, num_layers=L, direction="bidirectional" if D == 2 else "forward")
    rng = np.random.default_rng(seed)
    layers = random_layers(spec, rng)
    feeds = {"X": rng.standard_normal((T, B, I)).astype(np.float32)}
    return bench_models(label(H, B, T, L, D, I), stock_model(spec, layers), fused_model(spec, layers), feeds, threads,
                        budget_ms)


def print_rows(rows: list[GridRow]) -> None:
    print_table([("config", 26, field("config")), ("thr", 4, field("threads")), ("stock ms", 10, field("stock_ms", ".3f")),
                 ("ours ms", 10, field("ours_ms", ".3f")), ("ratio", 7, field("ratio", ".2f")),
                 ("chosen", 13, field("chosen")), ("fused ms", 10, field("fused_ms", ".3f")),
                 ("ratio", 7, field("fused_ratio", ".2f")), ("stock alone", 12, field("stock_alone_ms", ".3f")),
                 ("ours alone", 11, field("ours_alone_ms", ".3f")), ("ratio", 7, field("ratio_alone", ".2f")),
                 ("fused alone", 12, field("fused_alone_ms", ".3f")), ("ratio", 7, field("fused_ratio_alone", ".2f")),
                 ("max-abs", 10, field("max_abs", ".1e"))], rows)


def summary(rows: list[GridRow]) -> str:
    if not rows:
        return ""
    lines = []
    for t in sorted({r.threads for r in rows}):
        sel = [r for r in rows if r.threads == t]
        ratios = [r.ratio for r in sel]
        alone = [r.ratio_alone for r in sel]
        worst = min(sel, key=lambda r: r.ratio)
        fused = [r.fused_ratio for r in sel if r.fused_ratio]
        shares = {k: sum(r.chosen == k for r in sel) for k in CPU_KERNELS[1:]}
        lines.append(f"threads {t}: {len(sel)} rows, ratio median {statistics.median(ratios):.2f} "
                     f"(alone {statistics.median(alone):.2f}), worst {worst.ratio:.2f} ({worst.config}), "
                     f"rows < 1.0: {sum(x < 1.0 for x in ratios)} (alone {sum(x < 1.0 for x in alone)}); "
                     f"fused kernel alone: median {statistics.median(fused) if fused else 0:.2f}, "
                     f"rows < 1.0: {sum(x < 1.0 for x in fused)}; chosen: "
                     + ", ".join(f"{k} {v}" for k, v in shares.items()))
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


# The corpus models at the shapes they are called with (silero-vad: a 512-sample chunk with its
# state, one stream per call and 64 streams per call; the g2p-id encoder over a word of 32 letters
# and its decoder one step at a time, at batches 1, 8 and 64).
def corpus_cases() -> list[tuple[str, str, dict]]:
    """(row name, corpus entry name, feeds) for each corpus row."""
    rng = np.random.default_rng(0)
    f32 = lambda *shape: (0.1 * rng.standard_normal(shape)).astype(np.float32)  # noqa: E731
    cases = []
    for streams in (1, 64):
        cases.append((f"silero-vad 16k B{streams} (chunk 512)", "silero_vad 16k",
                      {"input": f32(streams, 512), "sr": np.array(16000, np.int64), "state": f32(2, streams, 128)}))
    for B in (1, 8, 64):
        cases.append((f"g2p-id encoder B{B} T32", "g2p_id encoder (tf2onnx)", {"input_1": f32(B, 32, 28)}))
        cases.append((f"g2p-id decoder B{B} T1", "g2p_id decoder (tf2onnx)",
                      {"input_2": f32(B, 1, 32), "input_3": f32(B, 256), "input_4": f32(B, 256)}))
    return cases


def bench_corpus(threads: int, budget_ms: float = 300.0) -> list[GridRow]:
    """The corpus rows (corpus_cases) at `threads`; rows whose model cannot be had are skipped with a
    line saying why."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "models"))
    import corpus

    import lstm_ort

    entries = {e.name: e for e in corpus.ENTRIES}
    rows, built = [], {}
    for name, entry, feeds in corpus_cases():
        try:
            if entry not in built:
                original = entries[entry].build()
                built[entry] = (original, lstm_ort.optimize(original))
        except corpus.Unavailable as e:
            print(f"  {name}: skipped ({e})", flush=True)
            continue
        original, optimized = built[entry]
        rows.append(bench_models(name, original, optimized, feeds, threads, budget_ms))
    return rows
