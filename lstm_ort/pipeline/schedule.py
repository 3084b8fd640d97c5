"""Plans: how one call is cut into work items, and the modelled cost ``auto`` picks them by.

A call's batch is cut into micro-batches of ``micro_batch`` rows and its sequence into chunks of
``time_chunk`` steps; the items (micro-batch j, chunk c) go through the stages in the same order,
micro-batch-major, so stage k runs item i while stage k+1 runs item i-1. One chunk per
micro-batch is GPipe's schedule; one micro-batch of many chunks is the wavefront across GPUs
(stage k runs steps [t, t+tau) of its layers while stage k+1 runs [t-tau, t) of the next ones),
its state carried from chunk to chunk through the stage's initial/final states. With N items and
K stages the pipeline's bubble is (K-1)/(N+K-1) of each stage's time.
"""

from __future__ import annotations

import functools
import math
from dataclasses import asdict, dataclass

import numpy as np


@dataclass(frozen=True)
class Item:
    index: int
    micro_batch: int  # j
    chunk: int  # c
    rows: tuple[int, int]  # [b0, b1) of the call's batch
    steps: tuple[int, int]  # [t0, t1) of the call's sequence

    @property
    def first_chunk(self) -> bool:
        return self.steps[0] == 0


@dataclass(frozen=True)
class Plan:
    ranges: tuple  # ((start, end), ...) layers per stage
    batch: int
    steps: int
    micro_batch: int
    time_chunk: int
    reason: str = ""
    modelled_ms: float | None = None
    modelled_single_ms: float | None = None
    one_gpu: bool = False  # the call runs unsplit on the first device: no pipeline plan was modelled faster

    @property
    def num_micro_batches(self) -> int:
        return math.ceil(self.batch / self.micro_batch)

    @property
    def num_chunks(self) -> int:
        return math.ceil(self.steps / self.time_chunk)

    @property
    def num_items(self) -> int:
        return self.num_micro_batches * self.num_chunks

    @property
    def stages(self) -> int:
        return len(self.ranges)

    @property
    def gpipe_bubble(self) -> float:
        """GPipe's idle fraction of each stage: (K-1)/(N+K-1) for N items on K stages."""
        K, N = self.stages, self.num_items
        return (K - 1) / (N + K - 1)

    def micro_batch_rows(self, j: int) -> tuple[int, int]:
        """[b0, b1) of the call's batch that micro-batch j holds."""
        return j * self.micro_batch, min(self.batch, (j + 1) * self.micro_batch)

    def items(self) -> list[Item]:
        out = []
        for j in range(self.num_micro_batches):
            rows = self.micro_batch_rows(j)
            for c in range(self.num_chunks):
                steps = (c * self.time_chunk, min(self.steps, (c + 1) * self.time_chunk))
                out.append(Item(len(out), j, c, rows, steps))
        return out

    def as_dict(self) -> dict:
        d = asdict(self)
        d.update(num_micro_batches=self.num_micro_batches, num_chunks=self.num_chunks, num_items=self.num_items,
                 gpipe_bubble=self.gpipe_bubble)
        return d

    def describe(self) -> str:
        if self.one_gpu:
            return f"one GPU, B={self.batch}, T={self.steps} ({self.reason})"
        layers = " | ".join(f"{a}-{b - 1}" if b - a > 1 else f"{a}" for a, b in self.ranges)
        return (f"layers {layers}; B={self.batch} as {self.num_micro_batches} x {self.micro_batch}, "
                f"T={self.steps} as {self.num_chunks} x {self.time_chunk}: {self.num_items} items, "
                f"GPipe bubble {self.gpipe_bubble:.1%}" + (f" ({self.reason})" if self.reason else ""))


def host_order(num_items: int, num_stages: int) -> list[tuple[int, int]]:
    """(stage, item) in an order one host thread can enqueue them in: every event is recorded
    before it is waited on, and a slot is freed (with 2 or more slots) before it is rewritten."""
    return [(k, t - k) for t in range(num_items + num_stages - 1) for k in range(num_stages)
            if 0 <= t - k < num_items]


@dataclass(frozen=True)
class CostModel:
    """The modelled cost of a stage call on an H100/H200-class GPU (fp32), fitted to stage calls
    timed on an H200 (8 x H1024 stack: a layer-step takes 4.2 µs at B=1, 31 µs at B=64, 86 µs at
    B=256; a 4-layer call adds 0.16-0.40 ms). One host thread enqueued a 4 x H1024 stage's Run in
    0.73-0.93 ms at B=64, 1.5 ms at B=256 (v1's launches per step) and 0.45-0.68 ms at B=1, on an
    H100 host (``tools/bench_pipeline.py``'s Run probe on device buffers).
    Rough by design (within ~20% there): it ranks plans; ``tools/bench_pipeline.py`` measures them."""

    flops_per_s: float = 45e12  # what the projection and the recurrence reach per GPU
    step_floor_s: float = 4.2e-6  # a recurrent step of one layer at one row (grid barrier, latency)
    layer_call_s: float = 60e-6  # per layer and call: projection GEMM launch, recurrence launch, states
    stage_call_s: float = 40e-6  # per stage call: ORT's Run and the glue ops, GPU side
    host_run_s: float = 0.75e-3  # host time to enqueue one stage call (I/O binding + Run), one host thread
    link_bytes_per_s: float = 300e9  # peer copy (NVLink)
    link_latency_s: float = 20e-6

    def layer_step_s(self, flops_per_row_step: float, rows: int) -> float:
        return self.step_floor_s + flops_per_row_step * rows / self.flops_per_s

    def call_s(self, layer_flops: list[float], rows, steps, extra_flops: float = 0.0):
        """A stage call of these layers; ``rows`` and ``steps`` may be numpy arrays (every plan of
        a grid at once): sum over layers of steps * layer_step_s + layer_call_s, in closed form."""
        n, flops = len(layer_flops), float(sum(layer_flops))
        return (steps * (n * self.step_floor_s + (flops + extra_flops) * rows / self.flops_per_s)
                + n * self.layer_call_s + self.stage_call_s)

    def single_s(self, layer_flops: list[float], rows: int, steps: int, extra_flops: float = 0.0) -> float:
        """The whole model in one call on one GPU: its GPU time, or the host's Run where longer."""
        return max(float(self.call_s(layer_flops, rows, steps, extra_flops)), self.host_run_s)


def modelled_ms(cost: CostModel, layer_flops, ranges, rows, steps, batch: int, total_steps: int,
                boundary_bytes_per_row_step: float, extra: tuple[float, float] = (0.0, 0.0)):
    """Modelled wall time of a plan: (N + K - 1) slots of the slowest stage's item, plus the
    transfers on the critical path; or, where enqueueing is slower than the GPUs, the host's
    N x K stage calls plus the last item. ``rows`` and ``steps`` may be numpy arrays."""
    K = len(ranges)
    n = np.ceil(batch / rows) * np.ceil(total_steps / steps)
    per = functools.reduce(np.maximum, [
        cost.call_s(layer_flops[a:b], rows, steps, (extra[0] if k == 0 else 0) + (extra[1] if k == K - 1 else 0))
        for k, (a, b) in enumerate(ranges)])
    link = cost.link_latency_s + boundary_bytes_per_row_step * rows * steps / cost.link_bytes_per_s
    gpus = (n + K - 1) * per + (K - 1) * link
    host = n * K * cost.host_run_s + per
    return 1e3 * np.maximum(gpus, host)


def choose(layer_flops: list[float], ranges, batch: int, steps: int, *, chunkable: bool,
           micro_batch: int | None = None, time_chunk: int | None = None, cost: CostModel = CostModel(),
           boundary_bytes_per_row_step: float = 0.0, extra: tuple[float, float] = (0.0, 0.0),
           chunk_refusal: str | None = None, one_gpu_ok: bool = False) -> Plan:
    """The plan with the lowest modelled time; ``micro_batch``/``time_chunk`` fix either. With
    ``one_gpu_ok`` and neither fixed, a call no pipeline plan is modelled faster for runs unsplit
    on one GPU (``Plan.one_gpu``), so ``auto`` never picks a plan it models slower than that."""
    if micro_batch is not None and micro_batch < 1:
        raise ValueError(f"micro_batch must be >= 1, got {micro_batch}")
    if time_chunk is not None and time_chunk < 1:
        raise ValueError(f"time_chunk must be >= 1, got {time_chunk}")
    if time_chunk is not None and time_chunk < steps and not chunkable:
        raise ValueError(f"time_chunk={time_chunk}: {chunk_refusal or 'time chunks are not exact for this model'}")
    rows_options = [micro_batch] if micro_batch else sorted({math.ceil(batch / m) for m in range(1, min(batch, 64) + 1)})
    if time_chunk:
        step_options = [min(time_chunk, steps)]
    elif chunkable:
        step_options = sorted({math.ceil(steps / c) for c in range(1, min(steps, 128) + 1)})
    else:
        step_options = [steps]
    single = 1e3 * cost.single_s(layer_flops, batch, steps, sum(extra))
    # Every (rows, steps) plan at once; the best is the lowest modelled time, then the fewest
    # items, then the fewest rows and steps (numpy: milliseconds for the 64 x 128 grid in Python).
    rows_grid, tau_grid = np.meshgrid(np.minimum(np.array(rows_options, np.int64), batch),
                                      np.array(step_options, np.int64), indexing="ij")
    rows_grid, tau_grid = rows_grid.ravel(), tau_grid.ravel()
    ms_grid = modelled_ms(cost, layer_flops, ranges, rows_grid, tau_grid, batch, steps, boundary_bytes_per_row_step,
                          extra)
    items = np.ceil(batch / rows_grid) * np.ceil(steps / tau_grid)
    at = np.lexsort((tau_grid, rows_grid, items, np.round(ms_grid, 6)))[0]
    rows, tau, ms = int(rows_grid[at]), int(tau_grid[at]), float(ms_grid[at])
    if one_gpu_ok and not micro_batch and not time_chunk and ms >= single:
        return Plan(((0, ranges[-1][1]),), batch, steps, batch, steps,
                    f"one GPU modelled {single:.3g} ms, the best of {len(rows_options)} micro-batch x "
                    f"{len(step_options)} chunk sizes on {len(ranges)} stages {ms:.3g} ms", single, single, True)
    if micro_batch and time_chunk:
        reason = "as asked" + (f"; {chunk_refusal}" if chunk_refusal and not chunkable else "")
    else:
        reason = (f"modelled best of {len(rows_options)} micro-batch x {len(step_options)} chunk sizes: "
                  f"{ms:.3g} ms vs {single:.3g} ms on one GPU")
        if micro_batch or time_chunk:
            reason += f"; {'micro_batch' if micro_batch else 'time_chunk'} as asked"
        if not chunkable and chunk_refusal:
            reason += f"; no time chunks: {chunk_refusal}"
    return Plan(tuple(ranges), batch, steps, rows, tau, reason, ms, single)
