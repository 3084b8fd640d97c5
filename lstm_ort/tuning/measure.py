"""`lstm-ort tune`: time every CUDA strategy for a FusedLSTM node shape and precision on this GPU."""

from __future__ import annotations

import os
import statistics
import time
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


def cpu_candidates(B: int, threads: int) -> tuple[str, ...]:
    """The CPU kernels a call of batch B can run on `threads` intra-op threads (0: onnxruntime's
    default, the cores), as cpu/lstm_cpu.cc lists them for the tuner: stock_split only where the
    batch can be cut, stock_threads only where the pool has more than one thread."""
    several = (os.cpu_count() or 1) > 1 and threads != 1
    return ("fused", "stock") + (("stock_split", ) if B > 1 and (os.cpu_count() or 1) > 1 else ()) + \
        (("stock_threads", ) if several else ())


def tune_cpu_shape(shape: NodeShape, T: int, B: int, threads: int, runs: int = 20) -> TuneResult:
    """Time FusedLSTM's own CPU kernel and stock's (cpu_kernel fused, stock, stock_split, stock_threads) on a node
    of this shape with random weights, ``threads`` intra-op threads. The candidates take turns in
    blocks, as the kernel's own tuner does (cpu/kernel_tuner.h): an untimed run, then two timed,
    so that a candidate does not pay for the threads of the one before it still spinning, and the
    machine's noise falls on all of them alike. T is reported as its shape class's bucket, the key
    the kernel looks the winner up by."""
    if shape.dtype != "float32":
        raise ValueError(f"{shape.key}: onnxruntime's CPU LSTM has no {shape.dtype} kernel, nothing to choose")
    rng = np.random.default_rng(0)
    spec = LstmSpec(input_size=shape.input_size, hidden_size=shape.hidden_size, num_layers=shape.layers,
                    direction="bidirectional" if shape.directions == 2 else "forward")
    model = fused_model(spec, random_layers(spec, rng))
    feeds = {"X": rng.standard_normal((T, B, shape.input_size)).astype(np.float32)}
    kernels = cpu_candidates(B, threads)
    runners = [OrtRunner(model, feeds, "cpu", fused=True, cpu_kernel=k, threads=threads) for k in kernels]
    times: dict[str, list[float]] = {k: [] for k in kernels}
    for r in runners:  # warm-up: buffers, stock's session
        r(), r()
    for _ in range(-(-runs // 2)):
        for kernel, run in zip(kernels, runners):
            run()  # untimed: the switch from the kernel before
            for _ in range(2):
                start = time.perf_counter()
                run()
                times[kernel].append((time.perf_counter() - start) * 1e3)
    ms = {k: statistics.median(v) for k, v in times.items()}
    winner = min(ms, key=ms.get)
    bucket = 1 << max(0, T - 1).bit_length()
    return TuneResult(shape, bucket, B, ms, winner, f"CPU, {threads} thread(s): {winner}", "fp32")
