"""Shared by the StreamBatcher tests: the corpus models they serve, a torch export with (h, c)
carried, and the check that many streams stepping concurrently from several threads each get what
they get running alone."""

from __future__ import annotations

import importlib.util
import io
import sys
import threading
import warnings
from pathlib import Path

import numpy as np
import onnx
import pytest

from lstm_ort.rewriter import optimize
from lstm_ort.runtime.session import InferenceSession

_spec = importlib.util.spec_from_file_location("corpus", Path(__file__).parents[1] / "models" / "corpus.py")
corpus = sys.modules.get("corpus")
if corpus is None:
    corpus = importlib.util.module_from_spec(_spec)
    sys.modules["corpus"] = corpus  # dataclasses look their module up while the file runs
    _spec.loader.exec_module(corpus)

SILERO = "silero_vad 16k"
G2P_DECODER = "g2p_id decoder (tf2onnx)"


def corpus_optimized(name: str) -> tuple[onnx.ModelProto, dict[str, str]]:
    """An optimized corpus model and its carry; skips where it cannot be fetched."""
    entry = next(e for e in corpus.ENTRIES if e.name == name)
    try:
        model = entry.build()
    except corpus.Unavailable as e:
        pytest.skip(f"{name}: {e}")
    return optimize(model), dict(entry.carry)


def torch_lstm(layers: int = 2, input_size: int = 40, hidden: int = 64, exporter: str = "torchscript") -> onnx.ModelProto:
    """A torch nn.LSTM with a linear head, exported with (h, c) in and out and a symbolic batch
    (and time), then optimized: carry {"hn": "h", "cn": "c"}; x is [T, B, input_size]."""
    torch = pytest.importorskip("torch", reason="torch exports the model")

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lstm = torch.nn.LSTM(input_size, hidden, layers)
            self.head = torch.nn.Linear(hidden, 5)

        def forward(self, x, h, c):
            y, (hn, cn) = self.lstm(x, (h, c))
            return self.head(y), hn, cn

    torch.manual_seed(0)
    # batch 2 in the example: torch.export specializes dims of size 1
    args = (torch.randn(4, 2, input_size), torch.zeros(layers, 2, hidden), torch.zeros(layers, 2, hidden))
    f = io.BytesIO()
    axes = {"x": {0: "time", 1: "batch"}, "h": {1: "batch"}, "c": {1: "batch"}, "y": {0: "time", 1: "batch"},
            "hn": {1: "batch"}, "cn": {1: "batch"}}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if exporter == "dynamo":
            batch, time = torch.export.Dim("batch"), torch.export.Dim("time")
            torch.onnx.export(Net().eval(), args, f, dynamo=True, input_names=["x", "h", "c"], verbose=False,
                              output_names=["y", "hn", "cn"], dynamic_shapes={"x": {0: time, 1: batch},
                                                                               "h": {1: batch}, "c": {1: batch}})
        else:
            torch.onnx.export(Net().eval(), args, f, dynamo=False, input_names=["x", "h", "c"],
                              output_names=["y", "hn", "cn"], opset_version=17, dynamic_axes=axes)
    return optimize(onnx.load_from_string(f.getvalue()))


def alone(model: onnx.ModelProto, carry: dict[str, str], chunks: list[dict], initial: dict,
          sess=None) -> list[list[np.ndarray]]:
    """One stream's outputs, step by step, through its own session call per step (on ``sess``,
    default a CPU session of ``model``)."""
    sess = sess or InferenceSession(model.SerializeToString())
    names = [o.name for o in sess.get_outputs()]
    state, outs = dict(initial), []
    for feeds in chunks:
        out = sess.run(None, {**feeds, **state})
        state = {inp: out[names.index(o)] for o, inp in carry.items()}
        outs.append(out)
    return outs


def serve_concurrently(batcher, streams: list[list[dict]], threads: int, initial=None) -> list[list]:
    """Every stream's chunks through ``batcher``, ``threads`` client threads each stepping its share
    of the streams round by round: thread k uses step_many, submit().result() or step in turn."""
    ids = [batcher.open(initial[s] if initial else None) for s in range(len(streams))]
    results = [[] for _ in streams]
    errors = []

    def client(k):
        mine = list(range(k, len(streams), threads))
        try:
            for r in range(max((len(streams[s]) for s in mine), default=0)):
                live = [s for s in mine if r < len(streams[s])]
                if k % 3 == 0:
                    outs = batcher.step_many([(ids[s], streams[s][r]) for s in live])
                elif k % 3 == 1:
                    outs = [f.result() for f in [batcher.submit(ids[s], streams[s][r]) for s in live]]
                else:
                    outs = [batcher.step(ids[s], streams[s][r]) for s in live]
                for s, out in zip(live, outs):
                    results[s].append(out)
        except Exception as e:  # noqa: BLE001 - re-raised in the test's thread
            errors.append(e)

    workers = [threading.Thread(target=client, args=(k,)) for k in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    if errors:
        raise errors[0]
    for i in ids:
        batcher.close(i)
    return results


def worst_difference(got: list[list], want: list[list]) -> float:
    worst = 0.0
    for g_stream, w_stream in zip(got, want):
        assert len(g_stream) == len(w_stream)
        for g, w in zip(g_stream, w_stream):
            assert [a.shape for a in g] == [b.shape for b in w]
            assert [a.dtype for a in g] == [b.dtype for b in w]
            worst = max(worst, *(float(np.max(np.abs(a.astype(np.float64) - b))) for a, b in zip(g, w)))
    return worst
