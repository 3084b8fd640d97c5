"""Checking an optimized model against its original: inputs for any model, and the parity run
that `lstm-ort optimize --check` and the tests share."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort

from lstm_ort.runtime.session import InferenceSession

CPU = ["CPUExecutionProvider"]


def random_feeds(model: onnx.ModelProto, rng: np.random.Generator, dim: int = 3) -> dict[str, np.ndarray]:
    """Inputs for every graph input: unknown dimensions become `dim`; integers are 1 (valid lengths and ids)."""
    inits = {i.name for i in model.graph.initializer}
    feeds = {}
    for vi in model.graph.input:
        if vi.name in inits:
            continue
        tt = vi.type.tensor_type
        shape = [d.dim_value if d.HasField("dim_value") else dim for d in tt.shape.dim]
        dtype = onnx.helper.tensor_dtype_to_np_dtype(tt.elem_type)
        if np.issubdtype(dtype, np.integer):
            feeds[vi.name] = np.ones(shape, dtype)
        else:
            feeds[vi.name] = rng.standard_normal(shape).astype(dtype)
    return feeds


def parity(original: onnx.ModelProto, optimized: onnx.ModelProto) -> float:
    """Max-abs difference of stock onnxruntime on the original and ours on the optimized model."""
    feeds = random_feeds(original, np.random.default_rng(0))
    ref = ort.InferenceSession(original.SerializeToString(), providers=CPU).run(None, feeds)
    got = InferenceSession(optimized.SerializeToString(), providers=CPU).run(None, feeds)
    return max_abs(ref, got)


def max_abs(a: list[np.ndarray], b: list[np.ndarray]) -> float:
    """Largest |a - b| over matching outputs, in float64; NaN where either holds a NaN."""
    assert len(a) == len(b)
    worst = 0.0
    for x, y in zip(a, b):
        assert x.shape == y.shape, (x.shape, y.shape)
        diff = np.abs(x.astype(np.float64) - y.astype(np.float64))
        if np.isnan(diff).any():
            return float("nan")
        worst = max(worst, float(diff.max(initial=0.0)))
    return worst
