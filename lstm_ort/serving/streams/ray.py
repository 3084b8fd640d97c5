"""Ray Serve: StreamBatchers on a cluster, each stream served by one of them (docs/streams.md).

A stream's state lives in the StreamBatcher that opened it, so every step of a stream must reach
that batcher. Serve routes a deployment's requests to any of its replicas, so each batcher is a
deployment of its own with one replica (a *shard*: ``StreamShard``), and an ingress deployment
(``StreamRouter``) opens each new stream on a shard (round robin) and sends its steps there: the
stream id carries its shard (``shard << SHARD_BITS | the shard's own id``). Shards are placed by
Serve like any replica (``ray_actor_options``: ``num_gpus=1`` puts one on each GPU).

    app = streams_app("model.onnx", {"stateN": "state"}, shards=4, providers=["cuda", "cpu"],
                      ray_actor_options={"num_gpus": 1})
    handle = serve.run(app)
    sid = await handle.open.remote()
    outputs = await handle.step.remote(sid, {"input": chunk, "sr": np.array(16000)})

With lstm_ort.serving.batch.ray (Ray Data), the only modules of lstm_ort that import Ray.
"""

from __future__ import annotations

import itertools
import os
from pathlib import Path
from typing import Any

from ray import serve  # noqa: F401  (an error here says: pip install 'lstm-ort[serving]')

from lstm_ort.runtime.library import LIBRARY_ENV, get_library_path

SHARD_BITS = 32


class StreamShard:
    """One StreamBatcher in one replica; ids it hands out carry its shard number."""

    def __init__(self, model, carry: dict[str, str], shard: int, library: str | None = None,
                 engine_dir: str | None = None, **batcher_kwargs: Any):
        # As serving/batch/ray.py: a replica may import lstm_ort from a source tree in the driver's
        # directory, without the built op library or step-path extension; use the driver's.
        if library and Path(library).is_file() and not os.environ.get(LIBRARY_ENV):
            os.environ[LIBRARY_ENV] = library
        _find_engine_in(engine_dir)
        from lstm_ort.serving.streams import StreamBatcher

        self.shard = shard
        self.batcher = StreamBatcher(model, carry, **batcher_kwargs)

    def open(self, initial=None) -> int:
        return (self.shard << SHARD_BITS) | self.batcher.open(initial)

    async def step(self, stream: int, feeds: dict) -> list:
        return await self.batcher.astep(stream & ((1 << SHARD_BITS) - 1), feeds)

    def close(self, stream: int) -> None:
        self.batcher.close(stream & ((1 << SHARD_BITS) - 1))

    def stats(self) -> dict:
        return self.batcher.stats().as_dict()

    def __del__(self):
        batcher = getattr(self, "batcher", None)
        if batcher is not None:
            batcher.shutdown(wait=False)


def _engine_dir() -> str:
    """The folder of this process's step-path extension (lstm_ort.serving.streams._engine)."""
    from lstm_ort.serving.streams import _engine

    return str(Path(_engine.__file__).parent)


def _find_engine_in(engine_dir: str | None) -> None:
    """Where this process's lstm_ort.serving.streams has no _engine, look for it in engine_dir too
    (the driver's, where this node has that folder); else the import names what is missing."""
    if not engine_dir or not Path(engine_dir).is_dir():
        return
    import importlib.util

    import lstm_ort.serving.streams as streams

    if importlib.util.find_spec("lstm_ort.serving.streams._engine") is None and engine_dir not in streams.__path__:
        streams.__path__.append(engine_dir)


class StreamRouter:
    """The ingress: opens streams on the shards in turn and routes each step to its stream's shard."""

    def __init__(self, *shards):
        self.shards = list(shards)
        self._next = itertools.count()

    async def open(self, initial=None) -> int:
        return await self.shards[next(self._next) % len(self.shards)].open.remote(initial)

    async def step(self, stream: int, feeds: dict) -> list:
        return await self._shard(stream).step.remote(stream, feeds)

    async def close(self, stream: int) -> None:
        await self._shard(stream).close.remote(stream)

    async def stats(self) -> list[dict]:
        return [await s.stats.remote() for s in self.shards]

    def _shard(self, stream: int):
        shard = int(stream) >> SHARD_BITS
        if not 0 <= shard < len(self.shards):
            from lstm_ort.serving.streams import StreamClosed

            raise StreamClosed(f"stream {stream!r} was not opened by this application")
        return self.shards[shard]


def streams_app(model, carry: dict[str, str], *, shards: int = 1, ray_actor_options: dict | None = None,
                name: str = "lstm_ort_streams", **batcher_kwargs: Any):
    """A Serve application: ``shards`` StreamShard deployments (one replica each) behind a
    StreamRouter. ``model``: a path every node can read (or a ModelProto, shipped to each shard).
    Other keywords go to StreamBatcher."""
    if shards < 1:
        raise ValueError(f"shards must be >= 1, got {shards}")
    shard_deployment = serve.deployment(StreamShard, num_replicas=1, ray_actor_options=ray_actor_options or {})
    bound = [shard_deployment.options(name=f"{name}_shard{k}").bind(model, carry, k, library=get_library_path(),
                                                                     engine_dir=_engine_dir(), **batcher_kwargs) for k in range(shards)]
    return serve.deployment(StreamRouter, name=f"{name}_router").bind(*bound)
