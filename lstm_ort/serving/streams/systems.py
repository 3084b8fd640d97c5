"""The systems `lstm-ort streams-bench` drives (load.py): the StreamBatcher, and what it replaces,
one ``run`` per stream per step with each stream's state carried by the client thread that owns it
(the same client threads, so the comparison is of the systems, not of the load). Each gives the
load generator the same verbs: open/close streams, one blocking step, one step whose answer comes
back through a callback, one awaited in an event loop, a round of its streams."""

from __future__ import annotations

import numpy as np


class BatcherSystem:
    """A StreamBatcher; ``counters`` are its own stats over the measured window."""

    def __init__(self, batcher, name: str = "batcher"):
        self.batcher, self.name = batcher, name
        self._blocks: dict = {}
        self._layout = None

    def open(self, n: int) -> list:
        return [self.batcher.open() for _ in range(n)]

    def close(self, ids) -> None:
        for s in ids:
            try:
                self.batcher.close(s)
            except Exception:  # noqa: BLE001 - a stopped batcher (load.Stalled) has nothing left to close
                pass

    def step(self, stream, feeds) -> None:
        self.batcher.step(stream, feeds)

    def submit(self, stream, feeds, answered) -> None:
        """``answered(error or None)`` once the step is done, on the thread that finished it."""
        self.batcher.submit(stream, feeds).add_done_callback(lambda f: answered(f.exception()))

    async def astep(self, stream, feeds) -> None:
        await self.batcher.astep(stream, feeds)

    def round(self, ids, chunks) -> None:
        self.batcher.step_many(list(zip(ids, chunks)))

    def stacked_round(self, ids, chunks, key) -> None:
        """One step_batch of these streams' chunks stacked on each input's batch axis (stacked once
        per ``key`` and set of streams: a server's tick gathers them; not what is measured here)."""
        block = self._blocks.get((ids[0], len(ids), key))
        if block is None:
            if self._layout is None:
                self._layout = self.batcher.layout(chunks[0])
            axes = self._layout.inputs
            block = {n: v if axes.get(n) is None else np.concatenate([c[n] for c in chunks], axis=axes[n])
                     for n, v in chunks[0].items()}
            self._blocks[(ids[0], len(ids), key)] = block
        self.batcher.step_batch(ids, block)

    def start_measuring(self) -> None:
        self.batcher.reset_stats()

    def counters(self) -> dict:
        return self.batcher.stats().as_dict()

    def stop(self) -> None:
        """A stalled phase: shut down, so that waiting callers are answered or refused."""
        self.batcher.shutdown(wait=False)


class RunSystem:
    """One ``session.run`` per stream per step on the client's thread, the stream's carried inputs
    kept by hand: ``initial`` is one stream's first state (carried input -> array)."""

    def __init__(self, name: str, session, carry: dict[str, str], initial: dict[str, np.ndarray]):
        self.name, self.session = name, session
        outputs = [o.name for o in session.get_outputs()]
        self._carried = [(inp, outputs.index(out)) for out, inp in carry.items()]
        self._initial = dict(initial)
        self._states: list[dict] = []

    def open(self, n: int) -> list:
        self._states = [dict(self._initial) for _ in range(n)]
        return list(range(n))

    def close(self, ids) -> None:
        self._states = []

    def step(self, stream, feeds) -> None:
        outs = self.session.run(None, {**feeds, **self._states[stream]})
        self._states[stream] = {inp: outs[k] for inp, k in self._carried}

    def submit(self, stream, feeds, answered) -> None:
        """Runs at once on the caller's thread (a thread of the pool runs each call it takes)."""
        try:
            self.step(stream, feeds)
        except Exception as e:  # noqa: BLE001 - the load generator reports it
            answered(e)
            return
        answered(None)

    async def astep(self, stream, feeds) -> None:
        """On a thread of the event loop's default executor (the async pattern gives it K)."""
        import asyncio

        await asyncio.get_running_loop().run_in_executor(None, self.step, stream, feeds)

    def round(self, ids, chunks) -> None:
        for s, c in zip(ids, chunks):
            self.step(s, c)

    def stacked_round(self, ids, chunks, key) -> None:
        self.round(ids, chunks)

    def start_measuring(self) -> None:
        pass

    def counters(self) -> None:
        return None

    def stop(self) -> None:
        pass
