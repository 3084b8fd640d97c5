"""The comparison run that `lstm-ort optimize --check` and the tests share: stock onnxruntime on the
original against ours on the optimized model (CPU), one call or chained calls, each refusal a
CheckUnavailable (nothing to compare) or a CheckFailed (ours does not run or differs)."""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

import numpy as np
import onnx
import onnxruntime as ort

from lstm_ort.ops.identity import Precision
from lstm_ort.runtime.messages import clean_message
from lstm_ort.runtime.session import InferenceSession
from lstm_ort.verify.feeds import random_feeds
from lstm_ort.verify.stock import has_layout1_lstm, stock_equivalent
from lstm_ort.verify.tolerance import FLOAT32_TOLERANCE, Tolerance, checked_precision

CPU = ["CPUExecutionProvider"]


class CheckUnavailable(Exception):
    """There is nothing to compare against: stock onnxruntime cannot run the original, or the
    inputs or outputs hold no values to compare."""


class CheckFailed(Exception):
    """The optimized model does not run, or its outputs are not those of the original."""


@dataclass
class ParityResult:
    max_abs: float  # largest |ours - stock| (NaN where only one side is NaN)
    excess: float  # largest |ours - stock| beyond the tolerance's relative part: the check passes when <= atol
    compared_with: str  # "stock onnxruntime", or "stock onnxruntime (layout-1 LSTMs as layout 0)", and how

    def passes(self, tolerance: Tolerance) -> bool:
        return bool(self.excess <= tolerance.atol)


def worst_of(*results: ParityResult) -> ParityResult:
    """One result for several comparisons of the same model: the largest difference and excess
    (NaN where any is NaN), and each comparison named."""
    def worst(values):
        return math.nan if any(math.isnan(v) for v in values) else max(values)
    return ParityResult(worst([r.max_abs for r in results]), worst([r.excess for r in results]),
                        "; ".join(r.compared_with for r in results))


class Comparison:
    """Outputs compared so far: the largest |ours - stock| and its excess over the tolerance's
    relative part, NaN once only one side is NaN; and how many values were compared, for a check
    that compared none is no pass (``result`` raises CheckUnavailable)."""

    def __init__(self, tolerance: Tolerance) -> None:
        self.tolerance, self.worst, self.excess, self.values = tolerance, 0.0, 0.0, 0

    def add(self, name: str, ref: np.ndarray, got: np.ndarray, where: str = "") -> None:
        if np.shape(ref) != np.shape(got):
            raise CheckFailed(f"output {name}{where} has shape {list(np.shape(got))}, the original's "
                              f"{list(np.shape(ref))}")
        d = _abs_diff(ref, got)
        self.values += d.size
        if not d.size or np.isnan(self.worst):
            return
        if np.isnan(d).any():
            self.worst = self.excess = float("nan")
            return
        self.worst = max(self.worst, float(d.max()))
        self.excess = max(self.excess, self.tolerance.excess(np.asarray(ref), d))

    def result(self, compared_with: str) -> ParityResult:
        if not self.values:
            raise CheckUnavailable("nothing to compare: every output is empty")
        return ParityResult(self.worst, self.excess, compared_with)


Model = onnx.ModelProto | str | os.PathLike


def require_values(feeds: dict[str, np.ndarray]) -> None:
    """CheckUnavailable for inputs without a value: their outputs would be empty, nothing compared
    (and stock onnxruntime's LSTM aborts the process on an empty batch)."""
    for name, value in feeds.items():
        if np.size(value) == 0:
            raise CheckUnavailable(f"nothing to compare: input {name} has shape {list(np.shape(value))}, no values")


def stock_session(original: Model, *, consume: bool = False,
                  threads: int | None = None) -> tuple[ort.InferenceSession, str]:
    """Stock onnxruntime (CPU) on the original, layout-1 LSTMs as their layout-0 twins, and what it
    is in words; CheckUnavailable when it cannot load it. `consume`: a proto may be changed.
    `threads`: stock's intra-op threads (STOCK_THREADS_INT8 for DynamicQuantizeLSTM models)."""
    compared_with = "stock onnxruntime"
    if isinstance(original, onnx.ModelProto) and has_layout1_lstm(original):
        original = stock_equivalent(original, in_place=consume)
        compared_with += " (layout-1 LSTMs as layout 0)"
    if threads:
        compared_with += f" on {threads} thread{'s' if threads > 1 else ''}"
    try:
        return ort.InferenceSession(_source(original), _quiet(threads), providers=CPU), compared_with
    except Exception as e:
        raise CheckUnavailable(f"stock onnxruntime cannot run the original model: {clean_message(e)}") from e


def optimized_session(optimized: Model, *, consume: bool = False, twin: bool = False) -> ort.InferenceSession:
    """Ours (CPU) on the optimized model, LSTMs the rewrite left in layout 1 as their twins (a
    path's with `twin`); CheckFailed when it cannot load it."""
    if isinstance(optimized, onnx.ModelProto):
        if has_layout1_lstm(optimized):
            optimized = stock_equivalent(optimized, in_place=consume)
    elif twin:
        optimized = stock_equivalent(onnx.load(os.fspath(optimized)), in_place=True)
    # A CPU without bf16 units refuses bf16 nodes: they are checked in fp32 (checked_precision says
    # so), as every other mode already runs there.
    precision = checked_precision(Precision.BF16).session_precision
    try:
        return InferenceSession(_source(optimized), _quiet(), providers=CPU, precision=precision)
    except Exception as e:
        raise CheckFailed(f"the optimized model does not run: {clean_message(e)}") from e


def run_stock(session: ort.InferenceSession, feeds: dict, what: str = "") -> list[np.ndarray]:
    try:
        return session.run(None, _feeds_for(session, feeds))
    except Exception as e:
        raise CheckUnavailable(f"stock onnxruntime cannot run the original model{what}: {clean_message(e)}") from e


def run_optimized(session: ort.InferenceSession, feeds: dict, what: str = "") -> list[np.ndarray]:
    try:
        return session.run(None, _feeds_for(session, feeds))
    except Exception as e:
        raise CheckFailed(f"the optimized model does not run{what}: {clean_message(e)}") from e


def output_names(session: ort.InferenceSession, ours: ort.InferenceSession) -> list[str]:
    names = [o.name for o in session.get_outputs()]
    if len(ours.get_outputs()) != len(names):
        raise CheckFailed(f"the optimized model has {len(ours.get_outputs())} outputs, the original {len(names)}")
    return names


def parity(original: Model, optimized: Model, feeds: dict[str, np.ndarray] | None = None,
           tolerance: Tolerance | None = None, *, consume: bool = False,
           twin_optimized: bool = False, stock_threads: int | None = None) -> ParityResult:
    """Stock onnxruntime on the original against ours on the optimized model, CPU, one run on
    `feeds` (random_feeds of the original if not given). Models may be protos or paths (a path
    lets onnxruntime read the file itself, so no serialized copy is held here); `consume`: the
    protos may be changed. Layout-1 LSTMs (stock's CPU provider refuses them) run as their
    layout-0 twins: the original's always, a path's with `twin_optimized`. `stock_threads`: stock's
    intra-op threads (STOCK_THREADS_INT8 for DynamicQuantizeLSTM models). Raises CheckUnavailable
    or CheckFailed."""
    if feeds is None:
        proto = original if isinstance(original, onnx.ModelProto) else onnx.load(os.fspath(original))
        feeds = random_feeds(proto, np.random.default_rng(0))
        del proto
    require_values(feeds)
    comparison = Comparison(tolerance or FLOAT32_TOLERANCE)
    stock, compared_with = stock_session(original, consume=consume, threads=stock_threads)
    ref, names = run_stock(stock, feeds), [o.name for o in stock.get_outputs()]
    del stock  # before ours loads: one session at a time
    got = run_optimized(optimized_session(optimized, consume=consume, twin=twin_optimized), feeds)
    if len(ref) != len(got):
        raise CheckFailed(f"the optimized model has {len(got)} outputs, the original {len(ref)}")
    for name, a, b in zip(names, ref, got):
        comparison.add(name, a, b)
    return comparison.result(compared_with)


def chained_parity(original: Model, optimized: Model, feeds: dict[str, np.ndarray], carry: dict[str, str],
                   calls: int, tolerance: Tolerance | None = None, stock_threads: int | None = None) -> ParityResult:
    """parity() over `calls` chained calls of a streaming model: after each call, output `out`
    feeds input `carry[out]` of the next one, each side its own outputs, so states drift apart
    only as far as the two computations really do."""
    require_values(feeds)
    stock, compared_with = stock_session(original, threads=stock_threads)
    ours = optimized_session(optimized)
    names = output_names(stock, ours)
    unknown = [f"{o}={i}" for o, i in carry.items() if o not in names or i not in {x.name for x in stock.get_inputs()}]
    if unknown:
        raise CheckUnavailable(f"--carry names no output/input pair of the model: {', '.join(unknown)}")
    comparison = Comparison(tolerance or FLOAT32_TOLERANCE)
    a, b = dict(feeds), dict(feeds)
    for _ in range(calls):
        ref = dict(zip(names, run_stock(stock, a)))
        got = dict(zip(names, run_optimized(ours, b)))
        for name in names:
            comparison.add(name, ref[name], got[name])
        if np.isnan(comparison.worst):
            break
        for out, inp in carry.items():
            a[inp], b[inp] = ref[out], got[out]
    return comparison.result(f"{compared_with} over {calls} chained calls")


# Stock's DynamicQuantizeLSTM quantizes h per step over the rows one thread runs: on one thread
# that is every row, the semantics of FusedLSTM's int8 weights (docs/ops.md, "int8 weights").
STOCK_THREADS_INT8 = 1


def _quiet(threads: int | None = None) -> ort.SessionOptions:
    """Session options that log nothing; `threads`: intra-op threads (None: onnxruntime's default)."""
    options = ort.SessionOptions()
    options.log_severity_level = 4
    if threads:
        options.intra_op_num_threads = threads
    return options


def _source(model: Model):
    return model.SerializeToString() if isinstance(model, onnx.ModelProto) else os.fspath(model)


def _feeds_for(sess, feeds: dict) -> dict:
    names = {i.name for i in sess.get_inputs()}
    return {k: v for k, v in feeds.items() if k in names}


def _abs_diff(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """|a - b| in float64, 0 where both are the same infinity or both NaN, NaN where only one is."""
    a, b = np.asarray(a), np.asarray(b)
    if not np.issubdtype(a.dtype, np.number) or not np.issubdtype(b.dtype, np.number):
        return np.where(a == b, 0.0, np.nan).astype(np.float64)
    x, y = a.astype(np.float64), b.astype(np.float64)
    with np.errstate(invalid="ignore"):
        d = np.abs(x - y)
    same = (x == y) | (np.isnan(x) & np.isnan(y))
    return np.where(same, 0.0, d)


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
