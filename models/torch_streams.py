"""Streaming models exported from torch for the StreamBatcher's benchmarks: a convolutional front
end and a 2-layer LSTM whose (h, c) are carried from one chunk to the next, as keyword spotters
and speech enhancers are built (tools/bench_streams.py --corpus torch). Needs torch; the export
is the original model (optimize it, or let `lstm-ort streams-bench` do it)."""

from __future__ import annotations

import io
import warnings

import onnx

FEATURES, CHANNELS, HIDDEN, LAYERS, CLASSES, FRAMES = 40, 64, 128, 2, 5, 4
CARRY = {"hn": "h", "cn": "c"}
CHUNK = {"x": [1, FRAMES, FEATURES]}  # one stream's step: FRAMES frames of FEATURES features, batch first


def conv_lstm(features: int = FEATURES, channels: int = CHANNELS, hidden: int = HIDDEN, layers: int = LAYERS,
              classes: int = CLASSES) -> onnx.ModelProto:
    """x [B, T, features] -> Conv1d over time (kernel 3, same padding) -> ReLU -> LSTM (``layers``,
    batch first, (h, c) [layers, B, hidden] in and out) -> Linear: outputs y [B, T, classes], hn,
    cn. Exported by TorchScript (opset 17) with batch and time symbolic; seeded weights."""
    import torch

    class ConvLstm(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = torch.nn.Conv1d(features, channels, 3, padding=1)
            self.lstm = torch.nn.LSTM(channels, hidden, layers, batch_first=True)
            self.head = torch.nn.Linear(hidden, classes)

        def forward(self, x, h, c):
            y = torch.relu(self.conv(x.transpose(1, 2))).transpose(1, 2)
            y, (hn, cn) = self.lstm(y, (h, c))
            return self.head(y), hn, cn

    torch.manual_seed(0)
    # batch 2 in the example: the exporter specializes dims of size 1
    args = (torch.randn(2, FRAMES, features), torch.zeros(layers, 2, hidden), torch.zeros(layers, 2, hidden))
    axes = {"x": {0: "batch", 1: "time"}, "h": {1: "batch"}, "c": {1: "batch"}, "y": {0: "batch", 1: "time"},
            "hn": {1: "batch"}, "cn": {1: "batch"}}
    f = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(ConvLstm().eval(), args, f, dynamo=False, input_names=["x", "h", "c"],
                          output_names=["y", "hn", "cn"], opset_version=17, dynamic_axes=axes)
    return onnx.load_from_string(f.getvalue())
