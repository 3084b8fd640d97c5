#!/usr/bin/env python3
"""Compare two `tools/bench.py --json` files of the CUDA path, measured on the same machine (a
baseline build and a change): ours per config and per forced strategy, new / base. Exit status 1
when a time grew past the tolerance (default 3%, the bench target of a same-results change).

    python tools/bench_compare.py base.json new.json [--tolerance 0.03]
"""

from __future__ import annotations

import argparse
import json
import sys


def times(path: str) -> dict[str, float]:
    """config (and config/strategy) -> ms."""
    data = json.load(open(path))
    out = {}
    for row in data["rows"]:
        out[row["config"]] = row["ours_ms"]
        for name, (ms, _err) in (row.get("strategies") or {}).items():
            out[f"{row['config']} {name}"] = ms
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("base")
    p.add_argument("new")
    p.add_argument("--tolerance", type=float, default=0.03)
    args = p.parse_args()
    base, new = times(args.base), times(args.new)
    worst = 1.0
    for key in base:
        if key not in new:
            print(f"{key:40s} missing from {args.new}")
            continue
        ratio = new[key] / base[key]
        worst = max(worst, ratio)
        flag = "  <-- slower" if ratio > 1 + args.tolerance else ""
        print(f"{key:40s} base {base[key]:9.3f} ms  new {new[key]:9.3f} ms  new/base {ratio:5.3f}{flag}")
    print(f"worst new/base {worst:.3f} (tolerance {1 + args.tolerance:.2f})")
    return 1 if worst > 1 + args.tolerance else 0


if __name__ == "__main__":
    sys.exit(main())
