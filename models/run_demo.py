#!/usr/bin/env python3
"""Run the optimized demo model with lstm_ort.InferenceSession and compare it with the original
model on stock onnxruntime.

    python models/run_demo.py [--original models/demo_lstm.onnx] [--optimized models/demo_lstm.fused.onnx]
"""

import argparse
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort

import lstm_ort

HERE = Path(__file__).parent


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--original", default=str(HERE / "demo_lstm.onnx"))
    p.add_argument("--optimized", default=str(HERE / "demo_lstm.fused.onnx"))
    args = p.parse_args()
    fused_ops = [n.op_type for n in onnx.load(args.optimized).graph.node if n.domain == "lstm_ort"]
    x = np.random.default_rng(0).standard_normal((50, 8, 16)).astype(np.float32)  # T=50, B=8
    ours = lstm_ort.InferenceSession(args.optimized, providers=["CPUExecutionProvider"]).run(None, {"X": x})[0]
    stock = ort.InferenceSession(args.original, providers=["CPUExecutionProvider"]).run(None, {"X": x})[0]
    print(f"optimized model runs {fused_ops} in place of the LSTM stack")
    print("predicted classes:", ours.argmax(axis=1).tolist())
    print(f"max-abs difference from stock onnxruntime: {np.abs(ours - stock).max():.2e}")


if __name__ == "__main__":
    main()
