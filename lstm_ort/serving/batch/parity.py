"""`lstm-ort optimize --check --sequence-lens-input`: lstm_ort.verify's parity run (stock
onnxruntime on the original, layout-1 LSTMs as their layout-0 twins, feeds valid for their role,
refusals as CheckUnavailable / CheckFailed), with the added ``sequence_lens`` input fed.

Two comparisons. The whole batch at full length (every entry of length T): every output, as the
plain --check. Then, where the model is ragged-exact, each batch entry with its own length (T
down to 1) against the original run alone on its prefix, its initial states and lengths (inputs
with a batch axis) sliced to that entry. A model that is not ragged-exact is compared at full
length only, and the result says so; a model without a sequence input gained no sequence_lens
and is compared as the plain --check does."""

from __future__ import annotations

import numpy as np
import onnx

from lstm_ort.graph.ragged import NoSequenceInput, RaggedLayout, analyze
from lstm_ort.verify import (
    FLOAT32_TOLERANCE,
    Comparison,
    ParityResult,
    Tolerance,
    input_batch_axes,
    optimized_session,
    output_names,
    parity,
    random_feeds,
    require_values,
    run_optimized,
    run_stock,
    stock_session,
)


def ragged_parity(original: onnx.ModelProto, optimized: onnx.ModelProto, feeds: dict[str, np.ndarray] | None = None,
                  tolerance: Tolerance | None = None) -> ParityResult:
    """The comparisons above on `feeds` (random_feeds of the original if not given). Raises
    CheckUnavailable (stock cannot run the original, nothing to compare) or CheckFailed."""
    feeds = dict(feeds) if feeds is not None else random_feeds(original, np.random.default_rng(0))
    layout = _ragged_layout(optimized)
    if layout is None:
        result = parity(original, optimized, feeds, tolerance)
        result.compared_with += ": no sequence input, so no sequence_lens added; compared as the plain --check"
        return result
    require_values(feeds)
    x = feeds[layout.input]
    T, B = x.shape[layout.time_axis], x.shape[layout.batch_axis]
    lens_name = layout.sequence_lens
    own_lengths = lens_name in _graph_inputs(original)
    full = dict(feeds) if own_lengths else {**feeds, lens_name: np.full(B, T, np.int32)}
    comparison = Comparison(tolerance or FLOAT32_TOLERANCE)
    stock, compared_with = stock_session(original)
    ours = optimized_session(optimized)
    names = output_names(stock, ours)
    for name, a, b in zip(names, run_stock(stock, full), run_optimized(ours, full)):
        comparison.add(name, a, b)
    fixed_time, fixed_batch = _fixed(original, layout)
    axes = {**input_batch_axes(original, optimized), layout.input: layout.batch_axis}
    why_not = _why_not_alone(original, layout, axes, fixed_time, own_lengths)
    if why_not:
        return comparison.result(f"{compared_with}: the batch at full length only (entries alone not compared: "
                                 f"{why_not})")
    lens = np.linspace(T, 1, num=B).round().astype(full[lens_name].dtype if own_lengths else np.int32)
    batch = {**full, lens_name: lens}
    got = run_optimized(ours, batch, " with sequence_lens")
    for b in range(B):
        where = f" of entry {b} (length {lens[b]})"
        # A fixed batch dimension: the entry fills every row (each row's outputs are the same).
        alone = _entry(batch, axes, [b] * (fixed_batch or 1), layout, None if fixed_time else int(lens[b]))
        ref = run_stock(stock, alone, f" on entry {b} alone")
        for name, r, g in zip(names, ref, got):
            out = layout.outputs.get(name)
            if out is None:  # not computed from the sequences: whole, where the shapes agree
                if np.shape(r) == np.shape(g):
                    comparison.add(name, r, g, where)
                continue
            r, g = np.take(r, [0], axis=out.batch), np.take(g, [b], axis=out.batch)
            if out.time is not None:
                r, g = (np.take(v, np.arange(lens[b]), axis=out.time) for v in (r, g))
            comparison.add(name, r, g, where)
    return comparison.result(f"{compared_with}: the batch at full length, and each of its {B} entries run alone at "
                             f"its own length ({', '.join(str(n) for n in lens)} steps)")


def _why_not_alone(original: onnx.ModelProto, layout: RaggedLayout, axes: dict, fixed_time: int | None,
                   own_lengths: bool) -> str:
    """Why the entries cannot run alone against the original ("" where they can)."""
    if not layout.exact:
        return f"not ragged-exact, {'; '.join(layout.reasons)}"
    if fixed_time and not own_lengths:
        return f"the original's time dimension is fixed at {fixed_time}, so no entry runs alone on a shorter prefix"
    unknown = [name for name in _graph_inputs(original) if name not in axes]
    return f"where input {unknown[0]} holds the batch entries is unknown" if unknown else ""


def _ragged_layout(optimized: onnx.ModelProto) -> RaggedLayout | None:
    """The analysis of the optimized model, where it has a sequence_lens input; else None."""
    try:
        layout = analyze(optimized)
    except NoSequenceInput:
        return None
    if layout.sequence_lens is None or layout.sequence_lens not in {i.name for i in optimized.graph.input}:
        return None
    return layout


def _graph_inputs(model: onnx.ModelProto) -> list[str]:
    inits = {t.name for t in model.graph.initializer}
    return [i.name for i in model.graph.input if i.name not in inits]


def _fixed(original: onnx.ModelProto, layout: RaggedLayout) -> tuple[int | None, int | None]:
    """The original's sequence input's time and batch dimensions where they are fixed numbers."""
    vi = next((i for i in original.graph.input if i.name == layout.input), None)
    dims = list(vi.type.tensor_type.shape.dim) if vi is not None else []
    fixed = [d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else None for d in dims]
    return tuple(fixed[a] if a < len(fixed) else None for a in (layout.time_axis, layout.batch_axis))


def _entry(feeds: dict, axes: dict[str, int], rows: list[int], layout: RaggedLayout, length: int | None) -> dict:
    """The batch made of entries `rows` of `feeds` (inputs with a batch axis sliced to them), the
    sequences cut to `length` steps (the original knows no lengths unless it has its own; None:
    the whole time axis, which the entry's own lengths then limit)."""
    one = {}
    for name, value in feeds.items():
        if axes.get(name) is not None:
            value = np.take(value, rows, axis=axes[name])
        if name == layout.input and length is not None:
            value = np.take(value, np.arange(length), axis=layout.time_axis)
        one[name] = value
    return one
