#!/usr/bin/env python3
"""A session's device memory on CUDA, ours against stock onnxruntime (issue 46's memory target):
each side in a process of its own, the device memory in use after the session is created and has
run three times (inputs and outputs bound on the device), less what the process used before it
(the CUDA context, which both sides pay alike).

    python tools/gpu_memory.py --config 4,100,512,64 --config 4,100,1024,256 --precisions auto,fp16

ours = what `optimize` writes in each precision mode; stock = the original LSTM model at stock's
TF32 default (its FP32 setting allocates the same).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

MIB = 1 << 20


def used_bytes() -> int:
    from cuda.bindings import runtime as cudart

    err, free, total = cudart.cudaMemGetInfo()
    if err != cudart.cudaError_t.cudaSuccess:
        raise RuntimeError(f"cudaMemGetInfo: {err}")
    return total - free


def child(cfg: str, system: str, precision: str) -> dict:
    import numpy as np
    from bench import parse_config
    from cuda.bindings import runtime as cudart

    from lstm_ort.builders import LstmSpec, fused_model, random_layers, stock_model
    from lstm_ort.tuning.timing import OrtRunner

    cudart.cudaFree(0)  # the context first, so that it is in the baseline
    before = used_bytes()
    L, T, H, B, bi = parse_config(cfg)
    spec = LstmSpec(input_size=H, hidden_size=H, num_layers=L, direction="bidirectional" if bi else "forward")
    rng = np.random.default_rng(0)
    layers = random_layers(spec, rng)
    x = rng.standard_normal((T, B, H)).astype(np.float32)
    if system == "stock":
        runner = OrtRunner(stock_model(spec, layers), {"X": x}, "cuda", fused=False, tf32=True)
    else:
        runner = OrtRunner(fused_model(spec, layers), {"X": x}, "cuda", fused=True, precision=precision)
    for _ in range(3):
        runner()
    runner.outputs()
    weights = sum(w.nbytes for lw in layers for w in (lw.W, lw.R, lw.B) if w is not None)
    return {"config": cfg, "system": system, "precision": precision if system == "ours" else "tf32 (default)",
            "used_mib": (used_bytes() - before) / MIB, "weights_mib": weights / MIB}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", action="append", help="L,T,H,B[,bi]; repeatable (default: the seed, 4,100,512,64)")
    p.add_argument("--precisions", default="auto", help="ours in each of these modes, comma-separated")
    p.add_argument("--json", help="write the rows here")
    p.add_argument("--child", nargs=3, metavar=("CONFIG", "SYSTEM", "PRECISION"), help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        print(json.dumps(child(*args.child)))
        return 0
    rows = []
    for cfg in args.config or ["4,100,512,64"]:
        for system, precision in [("stock", "-")] + [("ours", m) for m in args.precisions.split(",") if m]:
            done = subprocess.run([sys.executable, __file__, "--child", cfg, system, precision],
                                  capture_output=True, text=True, check=False)
            if done.returncode != 0:
                print(f"{cfg} {system} {precision}: failed\n{done.stderr[-2000:]}", file=sys.stderr)
                continue
            rows.append(json.loads(done.stdout.strip().splitlines()[-1]))
            r = rows[-1]
            print(f"{r['config']:>16s}  {r['system']:5s} {r['precision']:15s} {r['used_mib']:8.1f} MiB "
                  f"(weights {r['weights_mib']:.1f} MiB)", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
