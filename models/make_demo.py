#!/usr/bin/env python3
"""Make the demo model: a 2-layer LSTM sequence classifier with fixed-seed weights, built with
onnx.helper the way torch's exporter lays out nn.LSTM (stock LSTM nodes and their glue).

    python models/make_demo.py [--out models/demo_lstm.onnx]
"""

import argparse
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from lstm_ort.builders import LstmSpec, random_layers, stock_model

INPUT, HIDDEN, CLASSES = 16, 32, 4


def build() -> onnx.ModelProto:
    rng = np.random.default_rng(2026)
    spec = LstmSpec(input_size=INPUT, hidden_size=HIDDEN, num_layers=2)
    model = stock_model(spec, random_layers(spec, rng), outputs=("Y_h",))
    g = model.graph
    # Head: the last layer's final state -> linear -> logits [B, CLASSES].
    g.initializer.extend([
        numpy_helper.from_array(np.array([1], np.int64), "last_start"),
        numpy_helper.from_array(np.array([2], np.int64), "last_end"),
        numpy_helper.from_array(np.array([0], np.int64), "axis0"),
        numpy_helper.from_array(rng.standard_normal((HIDDEN, CLASSES)).astype(np.float32) * 0.3, "head_W"),
        numpy_helper.from_array(np.zeros(CLASSES, np.float32), "head_b"),
    ])
    g.node.extend([
        helper.make_node("Slice", ["Y_h", "last_start", "last_end", "axis0"], ["h_last"]),
        helper.make_node("Squeeze", ["h_last", "axis0"], ["h_final"]),
        helper.make_node("MatMul", ["h_final", "head_W"], ["logits_raw"]),
        helper.make_node("Add", ["logits_raw", "head_b"], ["logits"]),
    ])
    del g.output[:]
    g.output.append(helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["B", CLASSES]))
    g.name = "demo_lstm_classifier"
    onnx.checker.check_model(model)
    return model


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default=str(Path(__file__).parent / "demo_lstm.onnx"))
    args = p.parse_args()
    onnx.save(build(), args.out)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
