"""How the bucketing batcher runs its batches on a session, chosen once per session (``runner_for``):

- ``HostRunner``: ``session.run`` on host arrays; a worker thread pads the next batch while the
  current one runs (onnxruntime releases the GIL in ``run``);
- ``BindingRunner``: on the CUDA EP, the worker also copies the next batch to the device and binds
  the outputs to device buffers (I/O binding); sequence_lens stays on the host, where FusedLSTM
  reads it;
- ``StreamRunner``: a session that pipelines several calls (``run_batches``, as
  lstm_ort.pipeline.PipelineSession does) takes consecutive batches of one bucket at once.

Each yields, in plan order, groups of (batch, its outputs) that arrived together.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Iterator, Protocol, runtime_checkable

import numpy as np
import onnxruntime as ort

from lstm_ort.serving.batch.plan import Batch

STREAM_BATCHES = 16  # batches handed to a pipelining session's run_batches at once
Feed = Callable[[Batch], dict]  # a batch's padded host feeds
Results = Iterator[list[tuple[Batch, list[np.ndarray]]]]


@runtime_checkable
class PipelinesCalls(Protocol):
    """A session that runs several calls as one pipelined stream (lstm_ort.pipeline.PipelineSession)."""

    def run_batches(self, output_names: list[str], feeds: list[dict]) -> list[list[np.ndarray]]: ...


class HostRunner:
    def __init__(self, session) -> None:
        self.session = session

    def run(self, plan: list[Batch], feed: Feed, outputs: list[str], host_inputs=()) -> Results:
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="lstm-ort-batch") as pool:
            pending = pool.submit(self.prepare, plan[0], feed, outputs, host_inputs)
            for k, batch in enumerate(plan):
                job = pending.result()
                if k + 1 < len(plan):
                    pending = pool.submit(self.prepare, plan[k + 1], feed, outputs, host_inputs)
                yield [(batch, self.call(job, outputs))]

    def prepare(self, batch: Batch, feed: Feed, outputs: list[str], host_inputs):
        return feed(batch)

    def call(self, job, outputs: list[str]) -> list[np.ndarray]:
        return self.session.run(outputs, job)


class BindingRunner(HostRunner):
    def __init__(self, session) -> None:
        super().__init__(session)
        options = session.get_provider_options().get("CUDAExecutionProvider", {})
        self.device = int(options.get("device_id", 0))

    def prepare(self, batch: Batch, feed: Feed, outputs: list[str], host_inputs):
        binding = self.session.io_binding()  # the host->device copy happens here, beside the previous batch's compute
        for name, value in feed(batch).items():
            on_host = name in host_inputs
            binding.bind_ortvalue_input(name, ort.OrtValue.ortvalue_from_numpy(
                np.ascontiguousarray(value), "cpu" if on_host else "cuda", 0 if on_host else self.device))
        for name in outputs:
            binding.bind_output(name, "cuda", self.device)
        return binding

    def call(self, binding, outputs: list[str]) -> list[np.ndarray]:
        self.session.run_with_iobinding(binding)
        return binding.copy_outputs_to_cpu()


class StreamRunner:
    def __init__(self, session: PipelinesCalls) -> None:
        self.session = session

    def run(self, plan: list[Batch], feed: Feed, outputs: list[str], host_inputs=()) -> Results:
        k = 0
        while k < len(plan):  # consecutive batches of one bucket (same steps), up to STREAM_BATCHES at a time
            end = k + 1
            while end < len(plan) and end - k < STREAM_BATCHES and plan[end].steps == plan[k].steps:
                end += 1
            group = plan[k:end]
            yield list(zip(group, self.session.run_batches(outputs, [feed(b) for b in group])))
            k = end


def runner_for(session) -> HostRunner | StreamRunner:
    if isinstance(session, PipelinesCalls):
        return StreamRunner(session)
    if "CUDAExecutionProvider" in session.get_providers():
        return BindingRunner(session)
    return HostRunner(session)
