"""`lstm-ort tune`: time every CUDA strategy for a FusedLSTM node shape and precision on this GPU."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from lstm_ort.builders import LstmSpec, fused_model, random_layers
from lstm_ort.ops.identity import DEFAULT_PRECISION, TUNABLE_STRATEGIES
from lstm_ort.runtime.native import describe
from lstm_ort.runtime.nodes import NodeShape
from lstm_ort.tuning.timing import OrtRunner, median_ms


@dataclass
class TuneResult:
    shape: NodeShape
    T: int
    B: int
    ms: dict[str, float]
    winner: str
    plan: str
    precision: str = DEFAULT_PRECISION


def tune_shape(shape: NodeShape, T: int, B: int, runs: int = 20, warmup: int = 3,
               candidates=TUNABLE_STRATEGIES, precision: str = DEFAULT_PRECISION) -> TuneResult:
    """Time each candidate strategy on a node of this shape running in ``precision``, with random
    weights (CUDA EP)."""
    rng = np.random.default_rng(0)
    spec = LstmSpec(input_size=shape.input_size, hidden_size=shape.hidden_size, num_layers=shape.layers,
                    direction="bidirectional" if shape.directions == 2 else "forward")
    dtype = np.float16 if shape.dtype == "float16" else np.float32
    model = fused_model(spec, random_layers(spec, rng), dtype)
    feeds = {"X": rng.standard_normal((T, B, shape.input_size)).astype(dtype)}
    ms = {name: median_ms(OrtRunner(model, feeds, "cuda", fused=True, strategy=name, precision=precision), runs,
                          warmup)
          for name in candidates}
    winner = min(ms, key=ms.get)
    return TuneResult(shape, T, B, ms, winner, describe(shape, T, B, winner, precision), precision)


def tune_cpu_shape(shape: NodeShape, T: int, B: int, threads: int, runs: int = 20,
                   precision: str = DEFAULT_PRECISION) -> TuneResult:
    """The CPU kernel's own choice for a node of this shape, in ``precision``, at T and B on
    ``threads`` intra-op threads (0: onnxruntime's default): a session of cpu_kernel auto, random
    weights, runs until the kernel's tuner has decided the class (cpu/kernel_tuner.h: paired rounds
    of every candidate, a confidence test, the floor where in doubt), and its decision and medians
    are the result, so `tune --cpu` chooses as the kernel does, in a quiet process of its own. T is
    reported as its shape class's bucket, the key the kernel looks the winner up by. ``runs``: the
    calls given to the tuner at least (its rounds decide within a few hundred)."""
    if shape.dtype != "float32":
        raise ValueError(f"{shape.key}: onnxruntime's CPU LSTM has no {shape.dtype} kernel, nothing to choose")
    from lstm_ort.runtime.native import cpu_kernel_report

    rng = np.random.default_rng(0)
    spec = LstmSpec(input_size=shape.input_size, hidden_size=shape.hidden_size, num_layers=shape.layers,
                    direction="bidirectional" if shape.directions == 2 else "forward")
    model = fused_model(spec, random_layers(spec, rng))
    model.graph.node[0].name = node = f"lstm_ort_tune_{shape.key.replace(' ', '_')}_T{T}_B{B}_{threads}"
    feeds = {"X": rng.standard_normal((T, B, shape.input_size)).astype(np.float32)}
    runner = OrtRunner(model, feeds, "cpu", fused=True, cpu_kernel="auto", threads=threads, precision=precision)
    bucket = 1 << max(0, T - 1).bit_length()
    choice = None
    for call in range(max(runs, 2000)):
        runner()
        choice = next((c for c in cpu_kernel_report() if c.node == node and c.B == B), None)
        if choice is not None and choice.chosen != "auto" and call + 1 >= runs:
            break
    if choice is None or choice.chosen == "auto":
        raise RuntimeError(f"{shape.key} T={T} B={B}: the CPU kernel's tuner did not decide")
    return TuneResult(shape, bucket, B, choice.median_ms, choice.chosen,
                      f"CPU, {threads or 'default'} thread(s): {choice.chosen}", str(precision))
