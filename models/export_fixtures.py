#!/usr/bin/env python3
"""Export real torch LSTM models with both torch exporters (TorchScript-based and dynamo-based),
as fixtures for the rewriter: ``nn.LSTM`` modules, and ``nn.LSTMCell`` called in a Python loop over
time (which both exporters unroll into one cell per step). Needs torch (the CPU build is enough).

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


CELL_LOOPS = {
    # name: (kind, input size, hidden size, steps); x is [B, T, I] unless the kind is time-major
    "cells_forward": ("forward", 11, 16, 6),
    "cells_flip": ("flip", 11, 16, 6),
    "cells_reverse_index": ("reverse_index", 11, 16, 6),
    "cells_time_major": ("time_major", 11, 16, 6),
    "cells_bidirectional": ("bidirectional", 11, 16, 6),
    "cells_stacked": ("stacked", 11, 16, 6),
    "cells_stacked_bidirectional": ("stacked_bidirectional", 11, 16, 6),
    "cells_initial_states": ("initial_states", 11, 16, 6),
    "cells_scripted": ("scripted", 11, 16, 6),  # torch.jit.script: a Loop, TorchScript exporter only
}


def cell_loop_module(kind: str, input_size: int, hidden_size: int):
    """``nn.LSTMCell`` in a Python loop over time, as models write it by hand (a CRNN's recurrent
    head, a decoder): kinds "forward", "flip" (the input reversed by torch.flip, the outputs put
    back in time order), "reverse_index" (steps read x[:, T-1-t]), "time_major" (x [T, B, I], outputs
    stacked on axis 0, final h and c returned), "bidirectional" (a forward and a flipped loop,
    outputs concatenated on the feature axis), "stacked" (two cells per step, the second reading
    the first's h), "stacked_bidirectional" (two bidirectional layers), "initial_states" (h0 and c0
    are inputs), "scripted" (the forward loop under torch.jit.script, which the TorchScript exporter
    writes as a Loop over a one-step LSTM carrying a list of outputs). Zero states are built from
    the input's shape, as people write them."""
    import torch

    if kind == "scripted":
        return torch.jit.script(_scripted_loop(input_size, hidden_size))

    class CellLoop(torch.nn.Module):
        def __init__(self):
            super().__init__()
            layers = 2 if kind.startswith("stacked") else 1
            directions = 2 if kind.endswith("bidirectional") else 1
            widths = [input_size] + [hidden_size * directions] * (layers - 1)
            self.cells = torch.nn.ModuleList(torch.nn.LSTMCell(widths[k // directions], hidden_size)
                                             for k in range(layers * directions))

        def run(self, cell, x, reverse=False, state=None):
            """x [B, T, I] -> [B, T, H], final (h, c)."""
            if state is None:
                state = (x.new_zeros(x.shape[0], hidden_size), x.new_zeros(x.shape[0], hidden_size))
            steps = torch.flip(x, [1]) if reverse else x
            outs = []
            for t in range(steps.shape[1]):
                state = cell(steps[:, t], state)
                outs.append(state[0])
            y = torch.stack(outs, 1)
            return (torch.flip(y, [1]) if reverse else y), state

        def forward(self, x, h0=None, c0=None):
            if kind in ("forward", "initial_states"):
                return self.run(self.cells[0], x, state=(h0, c0) if h0 is not None else None)[0]
            if kind == "flip":
                return self.run(self.cells[0], x, reverse=True)[0]
            if kind == "reverse_index":
                state = (x.new_zeros(x.shape[0], hidden_size), x.new_zeros(x.shape[0], hidden_size))
                outs = []
                for t in range(x.shape[1] - 1, -1, -1):
                    state = self.cells[0](x[:, t], state)
                    outs.append(state[0])
                return torch.stack(outs[::-1], 1)
            if kind == "time_major":
                state = (x.new_zeros(x.shape[1], hidden_size), x.new_zeros(x.shape[1], hidden_size))
                outs = []
                for t in range(x.shape[0]):
                    state = self.cells[0](x[t], state)
                    outs.append(state[0])
                return torch.stack(outs), state[0], state[1]
            if kind == "stacked":
                zeros = x.new_zeros(x.shape[0], hidden_size)
                s1, s2, outs = (zeros, zeros), (zeros, zeros), []
                for t in range(x.shape[1]):
                    s1 = self.cells[0](x[:, t], s1)
                    s2 = self.cells[1](s1[0], s2)
                    outs.append(s2[0])
                return torch.stack(outs, 1)
            y = x  # bidirectional layers
            for layer in range(len(self.cells) // 2):
                forward = self.run(self.cells[2 * layer], y)[0]
                backward = self.run(self.cells[2 * layer + 1], y, reverse=True)[0]
                y = torch.cat([forward, backward], 2)
            return y

    return CellLoop()


def _scripted_loop(input_size: int, hidden_size: int):
    import torch

    class ScriptedLoop(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.cell = torch.nn.LSTMCell(input_size, hidden_size)
            self.hidden = hidden_size

        def forward(self, x):
            h = torch.zeros(x.shape[0], self.hidden, dtype=x.dtype)
            c = torch.zeros(x.shape[0], self.hidden, dtype=x.dtype)
            outs: list[torch.Tensor] = []
            for t in range(x.shape[1]):
                h, c = self.cell(x[:, t], (h, c))
                outs.append(h)
            return torch.stack(outs, 1)

    return ScriptedLoop()


def cell_loop_case(name: str, batch: int = 3):
    """(module, example args, input names, output names) of a CELL_LOOPS fixture."""
    import torch

    kind, I, H, T = CELL_LOOPS[name]
    module = cell_loop_module(kind, I, H)
    if kind == "time_major":
        return module, (torch.randn(T, batch, I),), ["X"], ["Y", "Y_h", "Y_c"]
    if kind == "initial_states":
        return module, (torch.randn(batch, T, I), torch.randn(batch, H), torch.randn(batch, H)), ["X", "h0", "c0"], ["Y"]
    return module, (torch.randn(batch, T, I),), ["X"], ["Y"]


NAMES = ["lstm1", "lstm3", "bidirectional2", "batch_first_bi2", "initial_states", "classifier", "if_branch",
         *CELL_LOOPS]
EXPORTERS = ["torchscript", "dynamo"]


def export_module(module, args, inputs: list[str], outputs: list[str], exporter: str, *,
                  dynamic_batch: dict[str, int] | None = None) -> onnx.ModelProto:
    """`module` exported by one torch exporter (opset 17 TorchScript, 18 dynamo); `dynamic_batch`
    names the inputs whose batch axis is left symbolic (input name -> axis)."""
    import torch

    module.eval()
    kwargs = {}
    if dynamic_batch:
        if exporter == "dynamo":
            batch = torch.export.Dim("batch")
            kwargs["dynamic_shapes"] = tuple({dynamic_batch[n]: batch} if n in dynamic_batch else None for n in inputs)
        else:
            kwargs["dynamic_axes"] = {n: {axis: "batch"} for n, axis in dynamic_batch.items()}
    f = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(module, args, f, dynamo=exporter == "dynamo", input_names=inputs, output_names=outputs,
                          opset_version=18 if exporter == "dynamo" else 17, verbose=False, **kwargs)
    model = onnx.load_from_string(f.getvalue())
    model.ir_version = min(model.ir_version, IR_VERSION)
    return model


def batch_axes(name: str) -> dict[str, int]:
    """Each input's batch axis in fixture `name`."""
    if name in CELL_LOOPS:
        kind = CELL_LOOPS[name][0]
        return {"X": 1 if kind == "time_major" else 0, **({"h0": 0, "c0": 0} if kind == "initial_states" else {})}
    if name in ("batch_first_bi2", "classifier"):
        return {"tokens" if name == "classifier" else "X": 0}
    return {"X": 1, **({"h0": 1, "c0": 1} if name == "initial_states" else {})}


def export(name: str, exporter: str, *, dynamic_batch: bool = False) -> onnx.ModelProto:
    """One fixture as a ModelProto, its batch fixed or left symbolic; raises if this exporter
    cannot export it."""
    import torch

    torch.manual_seed(0)
    dynamic = batch_axes(name) if dynamic_batch else None
    if name in CELL_LOOPS:
        if CELL_LOOPS[name][0] == "scripted" and exporter == "dynamo":
            raise NotImplementedError("a ScriptModule exports with the TorchScript exporter only")
        return export_module(*cell_loop_case(name), exporter, dynamic_batch=dynamic)
    module, args, inputs, outputs = _modules()[name]
    if name == "if_branch" and exporter == "torchscript":
        raise NotImplementedError("torch.cond exports with the dynamo exporter only")
    return export_module(module, args, inputs, outputs, exporter, dynamic_batch=dynamic)


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
