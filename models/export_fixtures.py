#!/usr/bin/env python3
"""Export real torch LSTM models with both torch exporters (TorchScript-based and dynamo-based),
as fixtures for the rewriter. Needs torch (the CPU build is enough).

    python models/export_fixtures.py --out models/fixtures
"""

from __future__ import annotations

import argparse
import io
import warnings
from pathlib import Path

import onnx

IR_VERSION = 10  # onnxruntime 1.21 and later read it


def _modules():
    import torch

    class WithStates(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lstm = torch.nn.LSTM(8, 16, 2)

        def forward(self, x, h0, c0):
            return self.lstm(x, (h0, c0))

    class Classifier(torch.nn.Module):
        """Embedding -> 2-layer LSTM -> linear on the last step."""

        def __init__(self):
            super().__init__()
            self.embed = torch.nn.Embedding(50, 8)
            self.lstm = torch.nn.LSTM(8, 16, 2, batch_first=True)
            self.head = torch.nn.Linear(16, 3)

        def forward(self, tokens):
            y, _ = self.lstm(self.embed(tokens))
            return self.head(y[:, -1])

    class InIfBranch(torch.nn.Module):
        """The LSTM runs only in one branch of a data-dependent If."""

        def __init__(self):
            super().__init__()
            self.lstm = torch.nn.LSTM(8, 16, 1)

        def forward(self, x):
            return torch.cond(x.sum() > 0, lambda v: self.lstm(v)[0], lambda v: torch.zeros(v.shape[0], v.shape[1], 16), (x,))

    x = torch.randn(5, 3, 8)
    return {
        "lstm1": (torch.nn.LSTM(8, 16, 1), (x,), ["X"], ["Y", "Y_h", "Y_c"]),
        "lstm3": (torch.nn.LSTM(8, 16, 3), (x,), ["X"], ["Y", "Y_h", "Y_c"]),
        "bidirectional2": (torch.nn.LSTM(8, 16, 2, bidirectional=True), (x,), ["X"], ["Y", "Y_h", "Y_c"]),
        "batch_first_bi2": (torch.nn.LSTM(8, 16, 2, batch_first=True, bidirectional=True), (x.transpose(0, 1),),
                            ["X"], ["Y", "Y_h", "Y_c"]),
        "initial_states": (WithStates(), (x, torch.randn(2, 3, 16), torch.randn(2, 3, 16)),
                           ["X", "h0", "c0"], ["Y", "Y_h", "Y_c"]),
        "classifier": (Classifier(), (torch.randint(0, 50, (3, 5)),), ["tokens"], ["logits"]),
        "if_branch": (InIfBranch(), (x,), ["X"], ["Y"]),
    }


NAMES = ["lstm1", "lstm3", "bidirectional2", "batch_first_bi2", "initial_states", "classifier", "if_branch"]
EXPORTERS = ["torchscript", "dynamo"]


def export(name: str, exporter: str) -> onnx.ModelProto:
    """One fixture as a ModelProto; raises if this exporter cannot export it."""
    import torch

    torch.manual_seed(0)
    module, args, inputs, outputs = _modules()[name]
    module.eval()
    if name == "if_branch" and exporter == "torchscript":
        raise NotImplementedError("torch.cond exports with the dynamo exporter only")
    f = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(module, args, f, dynamo=exporter == "dynamo", input_names=inputs, output_names=outputs,
                          opset_version=18 if exporter == "dynamo" else 17, verbose=False)
    model = onnx.load_from_string(f.getvalue())
    model.ir_version = min(model.ir_version, IR_VERSION)
    return model


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default=str(Path(__file__).parent / "fixtures"))
    args = p.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for name in NAMES:
        for exporter in EXPORTERS:
            try:
                onnx.save(export(name, exporter), str(out / f"{name}.{exporter}.onnx"))
                print(f"wrote {name}.{exporter}.onnx")
            except Exception as e:  # an exporter that cannot take a model is reported, not fatal
                print(f"skipped {name}.{exporter}: {type(e).__name__}: {str(e)[:120]}")


if __name__ == "__main__":
    main()
