"""Parity helpers: feeds, stock/fused/reference runs, layout conversion.

Used by the tests and tools/bench.py, so every comparison the project reports is made one way.
"""

from __future__ import annotations

import dataclasses
import itertools
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort

from lstm_ort.builders import LstmSpec, fused_model, stock_model
from lstm_ort.ops.factoring import truncated_svd
from lstm_ort.ops.identity import is_fused, num_directions
from lstm_ort.ops.packing import LayerWeights
from lstm_ort.runtime.session import DEBUG_PREFIX, PRECISION_KEY, STRATEGY_KEY, InferenceSession
from lstm_ort.verify import CPU, max_abs

__all__ = ["CPU", "CUDA", "max_abs"]  # re-exported: tests and tools compare through one function
# Stock's CUDA provider computes in TF32 unless told not to; parity is against FP32.
CUDA = [("CUDAExecutionProvider", {"use_tf32": "0"}), "CPUExecutionProvider"]
DEFAULT_ACTIVATIONS = ("Sigmoid", "Tanh", "Tanh")

# The parity grids every kernel is held to (CPU and CUDA tests share them).
DIRECTIONS = ("forward", "reverse", "bidirectional")
# (direction, layout, T, B, H, L)
SHAPE_GRID = list(itertools.product(DIRECTIONS, [0, 1], [1, 7, 100], [1, 3, 64], [1, 17, 128], [1, 3]))
# (direction, layout, seq_lens, initial_states, peepholes, clip, input_forget, non-default activations)
FEATURE_GRID = list(itertools.product(DIRECTIONS, [0, 1], [False, True], [False, True], [False, True],
                                      [None, 0.4], [0, 1], [False, True]))
NON_DEFAULT_ACTS = {
    1: dict(activations=["HardSigmoid", "LeakyRelu", "Softsign"], activation_alpha=[0.3, 0.05], activation_beta=[0.6]),
    2: dict(activations=["HardSigmoid", "LeakyRelu", "Softsign", "Sigmoid", "ScaledTanh", "Elu"],
            activation_alpha=[0.3, 0.05, 0.9, 0.8], activation_beta=[0.6, 1.1]),
}


def feature_spec(direction: str, layout: int = 0, *, peepholes: bool = False, clip: float | None = None,
                 input_forget: int = 0, acts: bool = False, input_size: int, hidden_size: int,
                 num_layers: int) -> LstmSpec:
    """The LstmSpec of a FEATURE_GRID case: ``acts``, the NON_DEFAULT_ACTS of its directions."""
    return LstmSpec(input_size=input_size, hidden_size=hidden_size, num_layers=num_layers, direction=direction,
                    layout=layout, clip=clip, input_forget=input_forget, peepholes=peepholes,
                    **(NON_DEFAULT_ACTS[num_directions(direction)] if acts else {}))


def make_lengths(T: int, B: int, rng: np.random.Generator) -> np.ndarray:
    """Lengths that include 1 and T whenever the batch has room for them."""
    lens = rng.integers(1, T + 1, size=B).astype(np.int32)
    lens[0] = T
    if B > 1:
        lens[1] = 1
    return lens


def make_feeds(spec: LstmSpec, T: int, B: int, rng: np.random.Generator, dtype=np.float32, *,
               seq_lens: bool = False, initial_states: bool = False) -> dict[str, np.ndarray]:
    x_shape = (T, B, spec.input_size) if spec.layout == 0 else (B, T, spec.input_size)
    LD = spec.num_layers * spec.num_directions
    s_shape = (LD, B, spec.hidden_size) if spec.layout == 0 else (B, LD, spec.hidden_size)
    feeds = {"X": rng.standard_normal(x_shape).astype(dtype)}
    if seq_lens:
        feeds["sequence_lens"] = make_lengths(T, B, rng)
    if initial_states:
        feeds["initial_h"] = rng.standard_normal(s_shape).astype(dtype)
        feeds["initial_c"] = rng.standard_normal(s_shape).astype(dtype)
    return feeds


def run(model: onnx.ModelProto, feeds: dict, providers=CPU, fused: bool = True,
        strategy: str | None = None, precision: str | None = None, debug: dict | None = None) -> list[np.ndarray]:
    """One session, one run; ``strategy`` forces a CUDA strategy, ``precision`` a precision mode and
    ``debug`` ({key: value}) the kernel's debug overrides on every FusedLSTM node, through the
    session options."""
    options = ort.SessionOptions()
    if strategy is not None:
        options.add_session_config_entry(STRATEGY_KEY, strategy)
    if precision is not None:
        options.add_session_config_entry(PRECISION_KEY, precision)
    for key, value in (debug or {}).items():
        options.add_session_config_entry(DEBUG_PREFIX + key, str(value))
    cls = InferenceSession if fused else ort.InferenceSession
    sess = cls(model.SerializeToString(), options, providers=providers)
    names = {i.name for i in sess.get_inputs()}
    return sess.run(None, {k: v for k, v in feeds.items() if k in names})


def to_layout0(spec: LstmSpec, feeds: dict) -> dict:
    """Feeds of a layout-1 model, rearranged for the layout-0 model of the same network."""
    out = dict(feeds)
    for name in ("X", "initial_h", "initial_c"):
        if name in out:
            out[name] = np.ascontiguousarray(out[name].swapaxes(0, 1))
    return out


def outputs_to_layout1(outputs: list[np.ndarray]) -> list[np.ndarray]:
    y, *states = outputs
    return [np.ascontiguousarray(y.transpose(2, 0, 1, 3)), *(np.ascontiguousarray(s.swapaxes(0, 1)) for s in states)]


def run_stock(spec: LstmSpec, layers: list[LayerWeights], feeds: dict, dtype=np.float32, providers=CPU,
              **model_kw) -> list[np.ndarray]:
    """Stock onnxruntime's LSTM on the same network; layout 1 runs as its layout-0 equivalent
    (stock's CPU provider refuses layout=1)."""
    if spec.layout == 0:
        return run(stock_model(spec, layers, dtype, **model_kw), feeds, providers, fused=False)
    spec0 = LstmSpec(**{**spec.__dict__, "layout": 0})
    outs = run(stock_model(spec0, layers, dtype, **model_kw), to_layout0(spec, feeds), providers, fused=False)
    return outputs_to_layout1(outs)


def run_fused(spec: LstmSpec, layers: list[LayerWeights], feeds: dict, dtype=np.float32, providers=CPU,
              strategy: str | None = None, precision: str | None = None, debug: dict | None = None,
              **model_kw) -> list[np.ndarray]:
    return run(fused_model(spec, layers, dtype, **model_kw), feeds, providers, strategy=strategy, precision=precision,
               debug=debug)


def planned_fallbacks(spec: LstmSpec, T: int, B: int, dtype=np.float32, strategy: str | None = None,
                      precision: str | None = None) -> list[str]:
    """The fallbacks the CUDA kernel's plan names for one call (its description, as `lstm-ort check`
    prints it; the environment's override aliases included)."""
    from lstm_ort.runtime import native
    from lstm_ort.runtime.nodes import NodeShape

    shape = NodeShape(spec.num_layers, spec.num_directions, spec.input_size, spec.hidden_size, np.dtype(dtype).name)
    text = native.describe(shape, T, B, strategy or "auto", precision or "fp32")
    return [part[len("fallback: "):] for part in text.split("; ") if part.startswith("fallback: ")]


def run_fused_strict(spec: LstmSpec, layers: list[LayerWeights], feeds: dict, dtype=np.float32,
                     strategy: str | None = None, precision: str | None = None, **model_kw) -> list[np.ndarray]:
    """run_fused on CUDA in strict mode (lstm_ort.debug.strict=1), so the outputs come from the path the
    call's plan names: a fallback, planned or at launch, fails the call. Where the plan itself names
    fallbacks, first checks that strict mode refuses the call naming the first, then runs it without."""
    X = feeds["X"]
    T, B = (X.shape[0], X.shape[1]) if spec.layout == 0 else (X.shape[1], X.shape[0])
    expected = planned_fallbacks(spec, T, B, dtype, strategy, precision)
    kw = dict(strategy=strategy, precision=precision, **model_kw)
    try:
        strict = run_fused(spec, layers, feeds, dtype, CUDA, debug={"strict": "1"}, **kw)
    except Exception as e:  # onnxruntime's error for the kernel's status
        if not expected or expected[0] not in str(e):
            raise
    else:
        if expected:
            raise AssertionError(f"strict mode ran a call whose plan names a fallback: {expected[0]}")
        return strict
    return run_fused(spec, layers, feeds, dtype, CUDA, **kw)


def weights_as_graph_input(model: onnx.ModelProto) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """A copy of `model` whose FusedLSTM reads its W from a graph input instead of an initializer
    (no constant, as when weights are fed at run time), and the feed that gives W its value."""
    model = onnx.ModelProto.FromString(model.SerializeToString())
    name = next(n for n in model.graph.node if is_fused(n)).input[1]
    init = next(i for i in model.graph.initializer if i.name == name)
    model.graph.initializer.remove(init)
    model.graph.input.append(onnx.helper.make_tensor_value_info(name, init.data_type, list(init.dims)))
    return model, {name: onnx.numpy_helper.to_array(init)}


def factored_layers(layers: list[LayerWeights], rank_input: int = 0, rank_recurrent: int = 0) -> list[LayerWeights]:
    """Copies of `layers` whose input (W) and recurrent (R) matrices are replaced by truncated-SVD
    factors of these ranks (0: kept whole; a rank beyond a matrix's side is cut to it)."""
    out = []
    for layer in layers:
        D = layer.num_directions
        f = lambda m, r: truncated_svd(m, min(r, *m.shape)) if r else None  # noqa: E731
        W_f = [f(layer.W[d], rank_input) for d in range(D)] if rank_input else None
        R_f = [f(layer.R[d], rank_recurrent) for d in range(D)] if rank_recurrent else None
        out.append(dataclasses.replace(layer, W_factors=W_f, R_factors=R_f))
    return out


def dense_layers(layers: list[LayerWeights]) -> list[LayerWeights]:
    """The same network with every factored matrix multiplied out (float64 products, stored fp32)."""
    out = []
    for layer in layers:
        W = np.stack([f.product() if (f := layer.factors("input", d)) is not None else layer.W[d]
                      for d in range(layer.num_directions)]).astype(np.float32)
        R = np.stack([f.product() if (f := layer.factors("recurrent", d)) is not None else layer.R[d]
                      for d in range(layer.num_directions)]).astype(np.float32)
        out.append(dataclasses.replace(layer, W=W, R=R, W_factors=None, R_factors=None))
    return out


def reference_applies(spec: LstmSpec, seq_lens: bool) -> bool:
    """onnx.reference's LSTM ignores sequence_lens, clip, input_forget and activations."""
    default_acts = spec.activations is None or tuple(spec.activations) == DEFAULT_ACTIVATIONS * spec.num_directions
    return not seq_lens and spec.clip is None and not spec.input_forget and default_acts


def run_reference(spec: LstmSpec, layers: list[LayerWeights], feeds: dict, **model_kw) -> list[np.ndarray]:
    from onnx.reference import ReferenceEvaluator

    model = stock_model(spec, layers, np.float32, **model_kw)
    return ReferenceEvaluator(model).run(None, {i.name: feeds[i.name] for i in model.graph.input})


def child_python(code: str, *args: str, env: dict | None = None) -> tuple[list[str], dict]:
    """argv and environment of a fresh interpreter running `code` that imports this lstm_ort.

    `python -c` puts its working directory first on sys.path, so a child started in a source tree
    would import the source package (which holds no built library) while the suite tests an
    install: PYTHONSAFEPATH (3.11+) leaves the working directory off, the package's own parent goes
    first on PYTHONPATH, and callers start the child in a folder of their own (for 3.10)."""
    child = {**os.environ, **(env or {})}
    here = str(Path(__file__).resolve().parent.parent)
    child["PYTHONPATH"] = os.pathsep.join([here] + ([child["PYTHONPATH"]] if child.get("PYTHONPATH") else []))
    child["PYTHONSAFEPATH"] = "1"
    return [sys.executable, "-c", code, *args], child


def child_when_ready(code: str, *args: str, ready: Path, cwd: Path, timeout: float = 120) -> subprocess.Popen:
    """A child_python running `code` in `cwd`, once it has written the file `ready` (where it waits to
    be signalled), stdout and stderr piped. SIGINT reaches it as in a terminal: a suite started in
    the background hands it down ignored."""
    argv, env = child_python("import signal\nsignal.signal(signal.SIGINT, signal.default_int_handler)\n" + code, *args)
    proc = subprocess.Popen(argv, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + timeout
    while not ready.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert ready.exists(), proc.communicate()
    return proc
