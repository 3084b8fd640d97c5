"""The bucketing batcher's plan: which batches a set of ragged sequences runs as.

Boundaries come from the lengths (buckets.py: greedy, optimal, or given; a model with a fixed time
length has that one bucket); each bucket is cut into batches of at most ``max_batch_size``
sequences and ``max_batch_tokens`` padded steps (a model with a fixed batch runs batches of that
size, padded with empty rows). Plain numpy: no session, no model.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

import numpy as np

from lstm_ort.serving.batch import buckets as bk

AUTO_TOLERANCE = 0.05  # greedy buckets: at most this padding per bucket, once a bucket fills a batch


@dataclass(frozen=True)
class Batch:
    steps: int  # the bucket's time length: every sequence of the batch is padded to it
    members: np.ndarray  # the sequences' indices in the caller's order
    rows: int  # the batch dimension it runs at (members.size, or a model's fixed batch)


@dataclass
class BucketStats:
    boundary: int
    sequences: int = 0
    batches: int = 0
    real_tokens: int = 0
    padded_tokens: int = 0


@dataclass
class BatchStats:
    """One ``run``. Tokens are time steps; ``padded_tokens`` counts what the batches computed
    (batch rows x padded length), padding included."""

    sequences: int = 0
    batches: int = 0
    real_tokens: int = 0
    padded_tokens: int = 0
    seconds: float = 0.0
    buckets: list[BucketStats] = field(default_factory=list)

    @property
    def padding_fraction(self) -> float:
        return 1.0 - self.real_tokens / self.padded_tokens if self.padded_tokens else 0.0

    @property
    def computed_per_real(self) -> float:
        return self.padded_tokens / self.real_tokens if self.real_tokens else 0.0

    @property
    def sequences_per_s(self) -> float:
        return self.sequences / self.seconds if self.seconds else 0.0

    @property
    def tokens_per_s(self) -> float:
        return self.real_tokens / self.seconds if self.seconds else 0.0

    def as_dict(self) -> dict:
        d = asdict(self)
        d.update(padding_fraction=self.padding_fraction, computed_per_real=self.computed_per_real,
                 sequences_per_s=self.sequences_per_s, tokens_per_s=self.tokens_per_s)
        return d

    def table(self) -> str:
        lines = [f"sequences {self.sequences}, batches {self.batches}, real tokens {self.real_tokens}, "
                 f"padded tokens {self.padded_tokens} (padding {100 * self.padding_fraction:.1f}%, "
                 f"{self.computed_per_real:.3f}x real)",
                 f"{self.seconds:.3f} s: {self.sequences_per_s:.1f} sequences/s, {self.tokens_per_s:.0f} tokens/s",
                 f"{'bucket <=':>10} {'sequences':>10} {'batches':>8} {'padding':>8}"]
        for b in self.buckets:
            pad = 1 - b.real_tokens / b.padded_tokens if b.padded_tokens else 0.0
            lines.append(f"{b.boundary:>10} {b.sequences:>10} {b.batches:>8} {100 * pad:>7.1f}%")
        return "\n".join(lines)


def boundaries(lengths, buckets, max_batch_tokens: int | None, max_batch_size: int | None) -> list[int]:
    """The bucket boundaries for these lengths: ``buckets`` "auto" (greedy), a number of buckets
    (optimal), or a list of boundaries (longer sequences get one more bucket, up to the longest)."""
    lengths = np.asarray(lengths, np.int64)
    if lengths.size == 0:
        return []
    longest = int(lengths.max())
    if buckets == "auto":
        typical = int(np.median(lengths))
        return bk.greedy_boundaries(lengths, AUTO_TOLERANCE,
                                    bk.batch_size_for(typical, max_batch_tokens, max_batch_size))
    if isinstance(buckets, (int, np.integer)):
        return bk.optimal_boundaries(lengths, int(buckets))
    bounds = sorted({int(b) for b in buckets})
    return bounds if bounds[-1] >= longest else bounds + [longest]


def plan_batches(lengths: np.ndarray, bounds: list[int], max_batch_tokens: int | None, max_batch_size: int | None,
                 fixed_batch: int | None = None) -> tuple[list[Batch], BatchStats]:
    """The batches of each bucket, in bucket order, and the stats they will have."""
    stats = BatchStats(sequences=int(lengths.size), real_tokens=int(lengths.sum()))
    which = bk.assign(lengths, bounds)
    plan = []
    for k, bound in enumerate(bounds):
        members = np.flatnonzero(which == k)
        b_stats = BucketStats(boundary=int(bound))
        stats.buckets.append(b_stats)
        if members.size == 0:
            continue
        steps = max(1, int(bound))  # a bucket of empty sequences still runs one (skipped) step
        size = fixed_batch or bk.batch_size_for(steps, max_batch_tokens, max_batch_size)
        for lo in range(0, members.size, size):
            idx = members[lo: lo + size]
            plan.append(Batch(steps, idx, fixed_batch or idx.size))
            b_stats.batches += 1
            b_stats.padded_tokens += steps * (fixed_batch or idx.size)
        b_stats.sequences = int(members.size)
        b_stats.real_tokens = int(lengths[members].sum())
    stats.buckets = [b for b in stats.buckets if b.sequences]
    stats.batches = len(plan)
    stats.padded_tokens = sum(b.padded_tokens for b in stats.buckets)
    return plan, stats
