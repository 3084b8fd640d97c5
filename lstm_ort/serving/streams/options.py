"""StreamBatcher's arguments, checked before anything runs: its options, and stream ids (an id is
an int; anything else names no open stream, as an id never opened does)."""

from __future__ import annotations

import math
import numbers

import numpy as np

from lstm_ort.serving.streams.errors import StreamError, closed


_INT64 = (-(2 ** 63), 2 ** 63 - 1)


def check_batcher_options(max_batch, max_wait_ms, workers) -> None:
    if isinstance(max_batch, bool) or not isinstance(max_batch, int) or max_batch < 1:
        raise ValueError(f"max_batch must be an int >= 1, got {max_batch!r}")
    if isinstance(max_wait_ms, bool) or not isinstance(max_wait_ms, numbers.Real) or not math.isfinite(max_wait_ms) \
            or max_wait_ms < 0:
        raise ValueError(f"max_wait_ms must be a finite number of milliseconds >= 0, got {max_wait_ms!r}")
    if workers is not None and (isinstance(workers, bool) or not isinstance(workers, int) or workers < 1):
        raise ValueError(f"workers must be an int >= 1 (or None: the device's default), got {workers!r}")


def stream_id(stream) -> int:
    """An int id; StreamClosed for anything else (a float, a string, a bool)."""
    if isinstance(stream, bool) or not isinstance(stream, numbers.Integral) or not _INT64[0] <= stream <= _INT64[1]:
        raise closed(stream)  # ids are int64: one past them was never opened
    return int(stream)


def stream_ids(streams) -> list[int]:
    """step_batch's ids: distinct ints, at least one. A tick passes thousands: the common case (a list
    of ints, or an integer array) is checked in bulk (10,000 ids one by one cost ~5 ms, most of the
    7 ms H100 call they feed); only a sequence holding something else is checked id by id, so the
    error names the first bad id."""
    try:
        ids = streams.tolist() if isinstance(streams, np.ndarray) and streams.ndim == 1 else list(streams)
    except TypeError:
        raise StreamError(f"step_batch: streams must be a sequence of stream ids, not {type(streams).__name__}") \
            from None
    if set(map(type, ids)) != {int} or min(ids) < _INT64[0] or max(ids) > _INT64[1]:
        ids = [stream_id(s) for s in ids]
    if not ids or len(set(ids)) != len(ids):
        raise StreamError("step_batch: streams must be distinct, at least one")
    return ids


def step_pair(pair) -> tuple:
    """step_many's (stream, feeds) pair; StreamError for anything else."""
    try:
        stream, feeds = pair
    except (TypeError, ValueError):
        raise StreamError(f"step_many: each step is a (stream, feeds) pair, not {pair!r}") from None
    return stream, feeds
