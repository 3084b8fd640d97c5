"""Arrow list columns <-> per-sequence arrays (pyarrow imported by the caller's data, not by us).

A sequence of T steps is a list of T entries: scalars (token ids, [T]) or fixed-size lists / lists
of F values ([T, F]). Outputs go back the same way: a per-sequence array [T, ...] becomes a list
of T entries, each its trailing dimensions flattened into a fixed-size list (scalars stay
scalars); arrays without a time axis become one fixed-size list.
"""

from __future__ import annotations

import numpy as np


def sequences_from_arrow(column) -> list[np.ndarray]:
    import pyarrow as pa

    if isinstance(column, pa.ChunkedArray):
        return [s for chunk in column.chunks for s in sequences_from_arrow(chunk)]
    if not (pa.types.is_list(column.type) or pa.types.is_large_list(column.type)
            or pa.types.is_fixed_size_list(column.type)):
        raise TypeError(f"an Arrow list column holds the sequences, not {column.type}")
    if column.null_count:
        raise ValueError(f"sequence {_first_null(column)} is null")
    offsets = _offsets(column)
    values = column.flatten()
    step = _null_entry(values)
    if step is not None:  # a null would read as NaN (or 0): refused like a null sequence
        k = int(np.searchsorted(offsets, step, side="right")) - 1
        raise ValueError(f"sequence {k} holds a null at step {step - offsets[k]}")
    try:
        steps = _steps(values)
    except _StepWidth as e:
        k = int(np.searchsorted(offsets, e.step, side="right")) - 1
        raise ValueError(f"sequence {k}: step {e.step - offsets[k]} has {e.width} values, the first sequence's "
                         f"steps {e.first}") from None
    return [steps[offsets[k]: offsets[k + 1]] for k in range(len(column))]


class _StepWidth(ValueError):
    def __init__(self, step: int, width: int, first: int):
        super().__init__(f"step {step} has {width} values, the first {first}")
        self.step, self.width, self.first = step, width, first


def _offsets(column) -> np.ndarray:
    """Where each entry of a list array starts in its flatten(), and where the last ends."""
    import pyarrow as pa

    if pa.types.is_fixed_size_list(column.type):
        return np.arange(len(column) + 1) * column.type.list_size
    offsets = np.asarray(column.offsets)
    return offsets - offsets[0]  # flatten() starts at this slice's first value


def _first_null(array) -> int:
    return int(np.flatnonzero(np.asarray(array.is_null().to_numpy(zero_copy_only=False)))[0])


def _null_entry(values) -> int | None:
    """The index of the first entry of `values` that is null or holds a null at any depth, or None."""
    import pyarrow as pa

    if values.null_count:
        return _first_null(values)
    t = values.type
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        inner = _null_entry(values.flatten())
        if inner is not None:
            return int(np.searchsorted(_offsets(values), inner, side="right")) - 1
    return None


def _steps(values) -> np.ndarray:
    """[N] or [N, F] from the flattened step entries."""
    import pyarrow as pa

    t = values.type
    if pa.types.is_fixed_size_list(t):
        inner = values.flatten()
        return np.asarray(inner.to_numpy(zero_copy_only=False)).reshape(len(values), t.list_size)
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        widths = np.diff(np.asarray(values.offsets))
        if widths.size and (widths != widths[0]).any():
            step = int(np.flatnonzero(widths != widths[0])[0])
            raise _StepWidth(step, int(widths[step]), int(widths[0]))
        flat = np.asarray(values.flatten().to_numpy(zero_copy_only=False))
        return flat.reshape(len(values), int(widths[0]) if widths.size else 0)
    return np.asarray(values.to_numpy(zero_copy_only=False))


def add_output_columns(table, results: list[dict[str, np.ndarray]], names: list[str], layout, prefix: str = ""):
    """`table` with one column per output in `names` (arrow_from_arrays of the per-sequence
    results), named prefix + name, or that with "_out" added while a column has the name already
    (the table's own columns are never replaced or doubled)."""
    for name in names:
        axes = layout.outputs.get(name)
        column = arrow_from_arrays([r[name] for r in results], has_time=axes is not None and axes.time is not None)
        label = prefix + name
        while label in table.column_names:
            label += "_out"
        table = table.append_column(label, column)
    return table


def arrow_from_arrays(arrays: list[np.ndarray], has_time: bool = True):
    """One list column from per-sequence arrays (see the module's docstring)."""
    import pyarrow as pa

    if not has_time:
        flat = [np.asarray(a).reshape(-1) for a in arrays]
        width = flat[0].size if flat else 0
        values = pa.array(np.concatenate(flat) if flat else np.zeros(0, np.float32))
        return pa.FixedSizeListArray.from_arrays(values, width) if width else pa.array([[] for _ in flat])
    lengths = np.array([a.shape[0] for a in arrays], np.int64)
    offsets = pa.array(np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32))
    trailing = arrays[0].shape[1:] if arrays else ()
    width = int(np.prod(trailing)) if trailing else 0
    flat = np.concatenate([np.asarray(a).reshape(-1) for a in arrays]) if arrays else np.zeros(0, np.float32)
    if trailing:
        steps = pa.FixedSizeListArray.from_arrays(pa.array(flat), width)
    else:
        steps = pa.array(flat)
    return pa.ListArray.from_arrays(offsets, steps)
