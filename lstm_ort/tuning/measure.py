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
