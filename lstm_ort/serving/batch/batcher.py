"""BucketingBatcher: ragged sequences through a model in length buckets, results per sequence.

Sequences are grouped by length into buckets and each bucket cut into batches (the plan,
plan.py), each batch padded to its bucket's boundary and run with the model's
``sequence_lens`` input (so padded steps are skipped: every output equals running that sequence
alone) by the runner of its session (runners.py: host arrays, I/O binding on the CUDA EP,
or a pipelining session's stream), and every output split back per sequence, sliced to its length
on the time axis, in the caller's order.
"""

from __future__ import annotations

import os
import time
from typing import Callable, Sequence

import numpy as np
import onnx
import onnxruntime as ort

from lstm_ort.graph.ragged import RaggedLayout, analyze
from lstm_ort.ops.identity import np_dtype_of_ort
from lstm_ort.runtime.model_io import load_model
from lstm_ort.runtime.session import InferenceSession
from lstm_ort.serving.batch import plan as batch_plan
from lstm_ort.serving.batch.plan import Batch, BatchStats
from lstm_ort.serving.batch.runners import runner_for
from lstm_ort.verify import cast_exactly

_PROVIDERS = {"cuda": "CUDAExecutionProvider", "cpu": "CPUExecutionProvider"}


class NotRaggedExact(ValueError):
    """The model's results would change with padding, and allow_padding was not given."""


class SequenceError(ValueError):
    """One sequence cannot be fed: ``index`` in the order given, ``detail`` why."""

    def __init__(self, index: int, detail: str):
        super().__init__(f"sequence {index}: {detail}")
        self.index, self.detail = index, detail


def normalize_providers(providers) -> list | None:
    """onnxruntime's names for "cuda", "cpu" (or its own names; a "a,b" string; (name, options)
    pairs), checked against what it offers: a ValueError for a name it does not know, or when none
    of them is available in this onnxruntime. Those that are not available are left for
    onnxruntime to skip, as it does (``unavailable_providers`` names them)."""
    if providers is None:
        return None
    if isinstance(providers, str):
        providers = [p.strip() for p in providers.split(",") if p.strip()]
    providers = [_PROVIDERS.get(p.lower(), p) if isinstance(p, str) else p for p in providers]
    names = [p if isinstance(p, str) else p[0] for p in providers]
    available = ort.get_available_providers()
    unknown = [n for n in names if n not in ort.get_all_providers()]
    if unknown:
        raise ValueError(f"unknown execution provider {unknown[0]!r} (cuda, cpu, or onnxruntime's names; available "
                         f"here: {', '.join(available)})")
    if names and not any(n in available for n in names):
        raise ValueError(f"{', '.join(names)} not available in this onnxruntime (available here: "
                         f"{', '.join(available)})")
    return providers


def unavailable_providers(providers: list | None) -> list[str]:
    """The providers of a normalize_providers list that this onnxruntime will skip."""
    available = ort.get_available_providers()
    return [n for n in (p if isinstance(p, str) else p[0] for p in providers or []) if n not in available]


class BucketingBatcher:
    """Runs ragged sequences through a FusedLSTM model in length buckets (docs/serving.md).

    model: a path, an onnx.ModelProto, an lstm_ort.InferenceSession or another session object
    with ``run`` and ``get_providers`` (lstm_ort.pipeline.PipelineSession: its ``run_batches``
    then runs the batches of a bucket as one pipelined stream). buckets: "auto" (greedy,
    from the data), an int (that many buckets, optimal by dynamic programming), or a list of
    boundaries (longer sequences get one more bucket, up to the longest). Batches hold at most
    ``max_batch_size`` sequences and ``max_batch_tokens`` padded time steps (64 sequences if
    neither is given). ``allow_padding``: run a model that is not ragged-exact anyway (its
    results then depend on the padding). ``input_name``: the sequence input, where the model has
    more than one candidate.
    """

    def __init__(self, model, *, providers=None, buckets="auto", max_batch_tokens: int | None = None,
                 max_batch_size: int | None = None, session_options: ort.SessionOptions | None = None,
                 allow_padding: bool = False, input_name: str | None = None):
        if isinstance(model, ort.InferenceSession) or (hasattr(model, "run") and hasattr(model, "get_providers")):
            self.session = model
            proto = _session_model(model)
        else:
            proto = load_model(os.fspath(model) if isinstance(model, os.PathLike) else model)
            self.session = InferenceSession(proto, session_options, providers=normalize_providers(providers))
        if max_batch_tokens is not None and max_batch_tokens < 1:
            raise ValueError(f"max_batch_tokens must be >= 1, got {max_batch_tokens}")
        if max_batch_size is not None and max_batch_size < 1:
            raise ValueError(f"max_batch_size must be >= 1, got {max_batch_size}")
        _check_buckets(buckets)
        self.buckets, self.max_batch_tokens, self.max_batch_size = buckets, max_batch_tokens, max_batch_size
        self.allow_padding = allow_padding
        self._proto = proto
        self._layouts: dict[str | None, RaggedLayout] = {}
        self._default_input = input_name
        self.stats = BatchStats()
        self.runner = runner_for(self.session)  # how batches run: host arrays, I/O binding, or pipelined

    # -- the model -----------------------------------------------------------------------------
    def layout(self, input_name: str | None = None) -> RaggedLayout:
        """The model's sequence input, its axes, its outputs' axes and whether it is ragged-exact."""
        key = input_name or self._default_input
        if key not in self._layouts:
            self._layouts[key] = analyze(self._proto, key)
        return self._layouts[key]

    # -- running -------------------------------------------------------------------------------
    def run(self, sequences, *, input_name: str | None = None, extra_inputs: dict | None = None,
            output_names: Sequence[str] | None = None,
            progress: Callable[[int, int], None] | None = None) -> list[dict[str, np.ndarray]]:
        """Per-sequence outputs, in the order given: {output name: array}, outputs with a time axis
        sliced to the sequence's length. ``sequences``: a list of [T_i, ...] arrays, or an Arrow /
        Parquet list column (pyarrow Array, ChunkedArray). ``extra_inputs``: values fed to every
        batch as they are (inputs without a batch axis). ``progress(done, total)`` after each batch."""
        layout = self.layout(input_name)
        if not layout.exact and not self.allow_padding:
            raise NotRaggedExact(f"model is not ragged-exact, padding would change its results: "
                                 f"{'; '.join(layout.reasons)}. Pass allow_padding=True to run it padded anyway")
        seqs = _as_sequences(sequences)
        start = time.perf_counter()
        meta = {i.name: i for i in self.session.get_inputs()}
        x_meta = meta[layout.input]
        dtype = np_dtype_of_ort(x_meta.type)
        if dtype is None:
            raise ValueError(f"input {layout.input!r} has type {x_meta.type}, which the batcher does not feed")
        seqs = [_exactly(k, s, dtype) for k, s in enumerate(seqs)]
        lengths = self._check(seqs, x_meta, layout)
        extra = dict(extra_inputs or {})
        missing = [n for n in meta if n not in extra and n not in (layout.input, layout.sequence_lens)]
        if missing:
            raise ValueError(f"model inputs {missing} need values: pass them in extra_inputs")
        unknown = [n for n in extra if n not in meta]
        if unknown:
            raise ValueError(f"extra_inputs names {unknown} are not model inputs ({', '.join(meta)})")
        outputs = self._outputs(layout, output_names)
        plan, stats = self._plan(lengths, x_meta, layout)
        results: list[dict[str, np.ndarray] | None] = [None] * len(seqs)
        if plan:
            self._execute(plan, seqs, lengths, layout, outputs, extra, dtype, results, progress)
        stats.seconds = time.perf_counter() - start
        self.stats = stats
        return results  # type: ignore[return-value]

    def _check(self, seqs, x_meta, layout: RaggedLayout) -> np.ndarray:
        dims = list(x_meta.shape)
        feature = [d for k, d in enumerate(dims) if k not in (layout.time_axis, layout.batch_axis)]
        for k, s in enumerate(seqs):
            if s.ndim != len(dims) - 1:
                raise SequenceError(k, f"{s.ndim} dimensions, input {layout.input!r} takes "
                                       f"[time{''.join(', ' + str(d) for d in feature)}] per sequence")
            for got, want in zip(s.shape[1:], feature):
                if isinstance(want, int) and got != want:
                    raise SequenceError(k, f"shape {s.shape}, input {layout.input!r} takes "
                                           f"[time, {', '.join(map(str, feature))}] per sequence")
        lengths = np.array([s.shape[0] for s in seqs], np.int64)
        if seqs and len({s.shape[1:] for s in seqs}) > 1:
            raise ValueError("sequences differ in their feature shapes: "
                             f"{sorted({s.shape[1:] for s in seqs})[:3]}")
        t_dim = dims[layout.time_axis] if layout.time_axis < len(dims) else None
        if isinstance(t_dim, int) and lengths.size and lengths.max() > t_dim:
            k = int(np.argmax(lengths))
            raise SequenceError(k, f"length {int(lengths[k])}, above the model's time length {t_dim} "
                                   f"(input {layout.input!r}, axis {layout.time_axis})")
        if lengths.size and lengths.max() > np.iinfo(np.int32).max:
            raise ValueError("sequence lengths must fit in int32")
        return lengths

    def _outputs(self, layout: RaggedLayout, names) -> list[str]:
        available = [o.name for o in self.session.get_outputs()]
        names = list(names) if names is not None else available
        if not names:
            raise ValueError("output_names is empty: name at least one model output, or pass None for all "
                             f"({', '.join(available)})")
        bad = [n for n in names if n not in available]
        if bad:
            raise ValueError(f"no model outputs {bad} (outputs: {', '.join(available)})")
        for n in names:
            axes = layout.outputs.get(n)
            if axes is not None and axes.batch is None:
                raise ValueError(f"output {n!r}: its batch axis is unknown, so it cannot be split per sequence")
        return names

    def boundaries(self, lengths) -> list[int]:
        """The bucket boundaries this batcher uses for these lengths."""
        return batch_plan.boundaries(lengths, self.buckets, self.max_batch_tokens, self.max_batch_size)

    def _plan(self, lengths: np.ndarray, x_meta, layout: RaggedLayout):
        """Batches (batch_plan.Batch) and stats with their counts; a model's fixed time length is
        its one bucket, its fixed batch every batch's rows."""
        dims = list(x_meta.shape)
        t_fixed = dims[layout.time_axis] if isinstance(dims[layout.time_axis], int) else None
        b_fixed = dims[layout.batch_axis] if isinstance(dims[layout.batch_axis], int) else None
        bounds = [t_fixed] if t_fixed is not None and lengths.size else self.boundaries(lengths)
        return batch_plan.plan_batches(lengths, bounds, self.max_batch_tokens, self.max_batch_size, b_fixed)

    def _execute(self, plan, seqs, lengths, layout, outputs, extra, dtype, results, progress):
        feature = seqs[0].shape[1:]

        def host_feed(batch: Batch) -> dict:
            shape = [0, 0, *feature]
            shape[layout.time_axis], shape[layout.batch_axis] = batch.steps, batch.rows
            x = np.zeros(shape, dtype)
            lens = np.zeros(batch.rows, np.int32)
            for row, k in enumerate(batch.members):
                n = int(lengths[k])
                lens[row] = n
                where = [slice(None)] * x.ndim
                where[layout.batch_axis], where[layout.time_axis] = row, slice(0, n)
                x[tuple(where)] = seqs[k]
            feed = {layout.input: x, **extra}
            if layout.sequence_lens:
                feed[layout.sequence_lens] = lens
            return feed

        done = 0
        for group in self.runner.run(plan, host_feed, outputs, host_inputs={layout.sequence_lens}):
            for batch, outs in group:
                self._scatter(batch.members, outs, outputs, lengths, layout, results)
                done += batch.members.size
            if progress is not None:
                progress(done, len(seqs))

    @staticmethod
    def _scatter(idx, outs, outputs, lengths, layout: RaggedLayout, results) -> None:
        for name, value in zip(outputs, outs):
            axes = layout.outputs.get(name)
            for row, k in enumerate(idx):
                if results[k] is None:
                    results[k] = {}
                if axes is None:  # does not depend on the sequences: the same for each
                    results[k][name] = value
                    continue
                one = np.take(value, row, axis=axes.batch)
                if axes.time is not None:
                    t = axes.time - (1 if axes.batch < axes.time else 0)
                    one = np.take(one, np.arange(int(lengths[k])), axis=t)
                results[k][name] = np.ascontiguousarray(one)


def _exactly(index: int, sequence, dtype) -> np.ndarray:
    try:
        return cast_exactly(sequence, dtype)
    except ValueError as e:
        raise SequenceError(index, str(e)) from None


def _check_buckets(buckets) -> None:
    if buckets == "auto":
        return
    if isinstance(buckets, (int, np.integer)) and not isinstance(buckets, bool):
        if buckets < 1:
            raise ValueError(f"buckets must be >= 1, got {buckets}")
        return
    if isinstance(buckets, (list, tuple)) and buckets and all(
            isinstance(b, (int, np.integer)) and not isinstance(b, bool) and b >= 1 for b in buckets):
        return
    raise ValueError(f"buckets must be 'auto', a number of buckets, or a list of lengths >= 1; got {buckets!r}")


def _session_model(session: ort.InferenceSession) -> onnx.ModelProto:
    source = getattr(session, "_model_bytes", None) or getattr(session, "_model_path", None)
    if source is None:
        raise ValueError("cannot read the model back from this session: pass the model path or ModelProto")
    return load_model(source)


def _as_sequences(sequences) -> list:
    if isinstance(sequences, (list, tuple)):
        return list(sequences)
    module = type(sequences).__module__
    if module.startswith("pyarrow"):
        from lstm_ort.serving.batch.arrow import sequences_from_arrow

        return sequences_from_arrow(sequences)
    if isinstance(sequences, np.ndarray) and sequences.dtype == object:
        return list(sequences)
    raise TypeError(f"sequences: a list of arrays or an Arrow list column, not {type(sequences).__name__}")

