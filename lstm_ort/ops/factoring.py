"""Low-rank factors of LSTM weight matrices (numpy): the truncated SVD, the rank an energy
fraction asks for, and whether a rank saves work. Shared by the rewriter's low-rank pass, the
tests and tools/bench_low_rank.py, so every factor the project makes is made one way."""

from __future__ import annotations

import numpy as np

from lstm_ort.ops.packing import Factors


def singular_values(matrix: np.ndarray) -> np.ndarray:
    """Singular values of `matrix`, largest first (computed in float64)."""
    return np.linalg.svd(np.asarray(matrix, np.float64), compute_uv=False)


def truncated_svd(matrix: np.ndarray, rank: int) -> Factors:
    """The best rank-`rank` approximation of `matrix` [4H, n] (Eckart-Young) as Factors U [4H, r],
    V [r, n]. The singular values are split evenly (U sqrt(S), sqrt(S) V^T), so neither factor
    carries the whole dynamic range into float16 storage."""
    if not 1 <= rank <= min(matrix.shape):
        raise ValueError(f"rank {rank} is outside [1, {min(matrix.shape)}] for a {list(matrix.shape)} matrix")
    u, s, vt = np.linalg.svd(np.asarray(matrix, np.float64), full_matrices=False)
    root = np.sqrt(s[:rank])
    return Factors(u[:, :rank] * root, root[:, None] * vt[:rank])


def energy_rank(s: np.ndarray, energy: float) -> int:
    """The smallest rank keeping fraction `energy` of the squared singular values `s` (at least 1)."""
    power = np.asarray(s, np.float64) ** 2
    total = power.sum()
    if total == 0:
        return 1
    kept = np.cumsum(power) / total
    # A hair of slack so that energy 1.0 is met by the full rank despite rounding in the sum.
    return int(min(len(s), np.searchsorted(kept, energy - 1e-12) + 1))


def kept_energy(s: np.ndarray, rank: int) -> float:
    power = np.asarray(s, np.float64) ** 2
    total = power.sum()
    return 1.0 if total == 0 else float(power[:rank].sum() / total)


def factored_cost(rank: int, rows: int, cols: int) -> int:
    """Multiply-adds per input row through the factors A [rows, r], B [r, cols]; rows * cols whole."""
    return rank * (rows + cols)


def saves_work(rank: int, rows: int, cols: int) -> bool:
    return factored_cost(rank, rows, cols) < rows * cols
