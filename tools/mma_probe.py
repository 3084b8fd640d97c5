"""Developer probe for the tensor-core persistent kernel: parity of every operand type
(LSTM_ORT_MMA) against stock FP32 on a grid, then timings of a few shapes per operand.

    python tools/mma_probe.py [--parity] [--time]
"""

from __future__ import annotations

import argparse
import itertools
import os

import numpy as np

from lstm_ort.builders import LstmSpec, fused_model, random_layers
from lstm_ort.runtime.session import InferenceSession
from lstm_ort.testing import CUDA, make_feeds, max_abs, run_stock

OPERANDS = ("fma", "3xtf32", "tf32", "fp16", "bf16")


def session(spec, layers, dtype=np.float32, strategy="auto", **kw):
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.add_session_config_entry("lstm_ort.strategy", strategy)
    return InferenceSession(fused_model(spec, layers, dtype, **kw).SerializeToString(), so, providers=CUDA)


def parity() -> None:
    rng = np.random.default_rng(0)
    rows = []
    for direction, L, H, B, T, extras in itertools.product(("forward", "bidirectional"), (1, 3), (8, 40, 512),
                                                           (1, 33), (37,), (False, True)):
        spec = LstmSpec(input_size=24, hidden_size=H, num_layers=L, direction=direction, peepholes=extras)
        layers = random_layers(spec, rng)
        feeds = make_feeds(spec, T, B, rng, seq_lens=extras, initial_states=extras)
        ref = run_stock(spec, layers, feeds, providers=CUDA, seq_lens=extras, initial_states=extras)
        worst = {}
        for op in OPERANDS:
            os.environ["LSTM_ORT_MMA"] = op
            for strategy in ("persistent", "wavefront"):
                sess = session(spec, layers, strategy=strategy, seq_lens=extras, initial_states=extras)
                names = {i.name for i in sess.get_inputs()}
                got = sess.run(None, {k: v for k, v in feeds.items() if k in names})
                worst[op] = max(worst.get(op, 0.0), max_abs(got, ref))
        rows.append(((direction, L, H, B, T, extras), worst))
        print(direction, L, H, B, T, extras, " ".join(f"{op}={worst[op]:.1e}" for op in OPERANDS), flush=True)
    os.environ.pop("LSTM_ORT_MMA", None)
    for op in OPERANDS:
        print(f"worst {op}: {max(w[op] for _, w in rows):.2e}")


def timing(configs, operands=OPERANDS, runs=20) -> None:
    from lstm_ort.tuning.timing import OrtRunner, median_ms

    rng = np.random.default_rng(1)
    for L, T, H, B in configs:
        spec = LstmSpec(input_size=H, hidden_size=H, num_layers=L, direction="forward")
        layers = random_layers(spec, rng)
        feeds = make_feeds(spec, T, B, rng)
        ref = None
        line = [f"L{L} T{T} H{H} B{B}:"]
        for op in operands:
            os.environ["LSTM_ORT_MMA"] = op
            runner = OrtRunner(fused_model(spec, layers), feeds, "cuda", fused=True)
            out = runner.outputs()
            if ref is None:
                ref = out
            line.append(f"{op} {median_ms(runner, runs, 3):.3f} ms ({max_abs(out, ref):.1e})")
        print("  ".join(line), flush=True)
    os.environ.pop("LSTM_ORT_MMA", None)


if __name__ == "__main__":
    import onnxruntime as ort

    if "CUDAExecutionProvider" not in ort.get_available_providers():
        raise SystemExit("mma_probe: this onnxruntime has no CUDA provider")
    ap = argparse.ArgumentParser()
    ap.add_argument("--parity", action="store_true")
    ap.add_argument("--time", action="store_true")
    ap.add_argument("--one", help="L,T,H,B,operand: two runs of one config (for ncu)")
    args = ap.parse_args()
    if args.one:
        *dims, op = args.one.split(",")
        timing([tuple(int(v) for v in dims)], operands=(op,), runs=1)
    if args.parity:
        parity()
    if args.time:
        timing([(4, 100, 512, 64), (4, 100, 512, 256), (1, 100, 512, 64), (2, 200, 1024, 32), (1, 100, 1024, 256),
                (1, 100, 2048, 32), (4, 100, 512, 16), (1, 100, 256, 512)])
