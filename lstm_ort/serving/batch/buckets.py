"""Bucket boundaries from a length distribution, and batches within buckets.

A bucket is an upper bound on length: a sequence goes to the first boundary >= its length and is
padded to that boundary, so each bucket runs one time length (one shape; on CUDA one plan, one
tuned entry). Two ways to choose boundaries from the data:

- ``greedy_boundaries``: walk the distinct lengths upwards; close a bucket when taking the next
  length would let its padding exceed ``tolerance`` of its real tokens, but only once the bucket
  holds ``min_count`` sequences (a full batch), so the sparse long tail is not cut into batches
  of one, unless the padding would pass ``hard_limit``. The number of buckets follows from the data.
- ``optimal_boundaries``: the k boundaries that minimise the padded tokens, by dynamic
  programming over the distinct lengths (O(k U^2) for U distinct lengths, vectorised per k).
"""

from __future__ import annotations

import numpy as np


def greedy_boundaries(lengths, tolerance: float = 0.05, min_count: int = 1, hard_limit: float = 0.10) -> list[int]:
    values, counts = np.unique(np.asarray(lengths, np.int64), return_counts=True)
    if values.size == 0:
        return []
    bounds, n, real = [], 0, 0
    for length, count in zip(values.tolist(), counts.tolist()):
        waste = (n + count) * length / (real + count * length) - 1 if n else 0.0
        if n and ((waste > tolerance and n >= min_count) or waste > hard_limit):
            bounds.append(prev)  # noqa: F821 - set on the previous iteration
            n, real = 0, 0
        n, real, prev = n + count, real + count * length, length
    bounds.append(prev)
    return bounds


def optimal_boundaries(lengths, k: int) -> list[int]:
    """The <= k boundaries minimising sum over sequences of (their bucket's boundary)."""
    if k < 1:
        raise ValueError(f"the number of buckets must be >= 1, got {k}")
    values, counts = np.unique(np.asarray(lengths, np.int64), return_counts=True)
    u = values.size
    if u == 0:
        return []
    if k >= u:
        return values.tolist()
    cum = np.concatenate([[0], np.cumsum(counts)])  # cum[j]: sequences shorter than values[j]
    # cost[i, j]: bucket holding distinct lengths i..j, padded to values[j] (inf where i > j).
    i, j = np.meshgrid(np.arange(u), np.arange(u), indexing="ij")
    cost = np.where(i <= j, (cum[j + 1] - cum[i]) * values[j], np.inf).astype(np.float64)
    best = cost[0].copy()  # best[j]: lengths 0..j in one bucket
    choice = [np.zeros(u, np.int64)]
    for _ in range(1, k):
        # Last bucket starts at i (previous ends at i-1): best_prev[i-1] + cost[i, j].
        total = np.full((u, u), np.inf)
        total[1:] = best[:-1, None] + cost[1:]
        start = np.argmin(total, axis=0)
        new = total[start, np.arange(u)]
        keep = best <= new
        start = np.where(keep, 0, start)
        choice.append(np.where(keep, -1, start))
        best = np.minimum(best, new)
    bounds, j, level = [], u - 1, k - 1
    while j >= 0:
        bounds.append(int(values[j]))
        while level > 0 and choice[level][j] == -1:
            level -= 1
        if level == 0:
            break
        j, level = int(choice[level][j]) - 1, level - 1
    return sorted(bounds)


def padded_tokens(lengths, boundaries) -> int:
    lengths = np.asarray(lengths, np.int64)
    idx = np.searchsorted(np.asarray(boundaries), lengths, side="left")
    return int(np.asarray(boundaries)[idx].sum())


def assign(lengths: np.ndarray, boundaries: list[int]) -> np.ndarray:
    """Bucket index of each length (boundaries sorted; every length <= the last boundary)."""
    return np.searchsorted(np.asarray(boundaries, np.int64), lengths, side="left")


def batch_size_for(length: int, max_batch_tokens: int | None, max_batch_size: int | None) -> int:
    size = max_batch_size if max_batch_size is not None else (None if max_batch_tokens else 64)
    if max_batch_tokens:
        by_tokens = max(1, max_batch_tokens // max(1, length))
        size = by_tokens if size is None else min(size, by_tokens)
    return max(1, size)
