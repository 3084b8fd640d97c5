#!/usr/bin/env python3
"""The real-model corpus (models/corpus.py) as a table: LSTM nodes and cells before and after
`optimize`, FusedLSTM nodes, parity with the original on stock onnxruntime (CPU), the seconds
`optimize` took and its peak memory (each model optimized in a process of its own, so the peak
is that model's).

    python tools/corpus_report.py [--json out.json] [--only SUBSTRING]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def load_corpus():
    spec = importlib.util.spec_from_file_location("corpus", ROOT / "models" / "corpus.py")
    corpus = importlib.util.module_from_spec(spec)
    sys.modules["corpus"] = corpus
    spec.loader.exec_module(corpus)
    return corpus


def measure(name: str) -> dict:
    """One entry, in this process: build, optimize (timed), parity over 3 inputs."""
    import numpy as np
    import onnxruntime as ort

    from lstm_ort.rewriter import Report, optimize
    from lstm_ort.runtime.model_io import iter_graphs
    from lstm_ort.runtime.nodes import fused_nodes
    from lstm_ort.runtime.session import InferenceSession
    from lstm_ort.verify import max_abs

    corpus = load_corpus()
    entry = next(e for e in corpus.ENTRIES if e.name == name)
    try:
        model = entry.build()
    except corpus.Unavailable as e:
        return {"model": name, "skipped": str(e)}
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    report = Report()
    start = time.perf_counter()
    optimized = optimize(model, report=report)
    seconds = time.perf_counter() - start
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    lstms = lambda m: sum(n.op_type == "LSTM" for g in iter_graphs(m) for n in g.node)  # noqa: E731
    stock = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    ours = InferenceSession(optimized.SerializeToString(), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(0)
    worst = 0.0
    for _ in range(3):
        feeds = entry.feeds(rng)
        worst = max(worst, max_abs(ours.run(None, feeds), stock.run(None, feeds)))
    return {"model": name, "lstm_nodes_before": lstms(model), "found": report.lstm_count,
            "rewritten": sum(len(f.nodes) for f in report.findings if f.rewritten), "lstm_nodes_after": lstms(optimized),
            "fused_nodes": len(fused_nodes(optimized)), "max_abs": worst, "optimize_s": round(seconds, 2),
            "peak_rss_mb": round(peak_mb), "rss_before_mb": round(rss_before / 1024)}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--json", help="write the rows here")
    p.add_argument("--only", help="entries whose name contains this")
    p.add_argument("--one", help=argparse.SUPPRESS)  # internal: measure one entry, print its JSON
    args = p.parse_args(argv)
    if args.one:
        print(json.dumps(measure(args.one)))
        return 0
    rows = []
    header = f"{'model':58} {'LSTM/cells':>10} {'left':>4} {'fused':>5} {'max-abs':>9} {'opt s':>6} {'peak MB':>7}"
    print(header + "\n" + "-" * len(header))
    for entry in load_corpus().ENTRIES:
        if args.only and args.only not in entry.name:
            continue
        out = subprocess.run([sys.executable, __file__, "--one", entry.name], capture_output=True, text=True)
        lines = [line for line in out.stdout.splitlines() if line.startswith("{")]
        row = json.loads(lines[-1]) if lines else {"model": entry.name, "error": out.stderr.strip()[-300:]}
        rows.append(row)
        if "found" in row:
            print(f"{row['model'][:58]:58} {row['found']:>10} {row['lstm_nodes_after']:>4} {row['fused_nodes']:>5} "
                  f"{row['max_abs']:>9.2e} {row['optimize_s']:>6.2f} {row['peak_rss_mb']:>7}")
        else:
            print(f"{row['model'][:58]:58} {row.get('skipped') or row.get('error')}")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
