"""StreamBatchers under Ray Serve (lstm_ort/serving/streams/ray.py) on a local cluster: each
stream's steps reach the shard that holds its state, and every stream gets what running it alone
gives it."""

import asyncio
from pathlib import Path

import numpy as np
import pytest

from lstm_ort.builders import LstmSpec, fused_model, random_layers
from lstm_ort.runtime.session import InferenceSession

CARRY = {"Y_h": "initial_h", "Y_c": "initial_c"}


def test_streams_on_two_shards(tmp_path, rng):
    ray = pytest.importorskip("ray", reason="Ray is not installed (pip install 'lstm-ort[serving]')")
    try:
        from ray import serve
    except ImportError as e:
        pytest.skip(f"Ray Serve is not installed (pip install 'lstm-ort[serving]'): {e}")
    from lstm_ort.serving.streams.ray import SHARD_BITS, streams_app

    spec = LstmSpec(6, 8)
    model = fused_model(spec, random_layers(spec, rng), initial_states=True)
    path = tmp_path / "model.onnx"
    path.write_bytes(model.SerializeToString())
    chunks = [[rng.standard_normal((2, 1, 6)).astype(np.float32) for _ in range(4)] for _ in range(6)]
    sess = InferenceSession(model.SerializeToString())
    want = []
    for stream in chunks:
        state = {"initial_h": np.zeros((1, 1, 8), np.float32), "initial_c": np.zeros((1, 1, 8), np.float32)}
        outs = []
        for x in stream:
            out = sess.run(None, {"X": x, **state})
            state = {"initial_h": out[1], "initial_c": out[2]}
            outs.append(out)
        want.append(outs)

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, ignore_reinit_error=True)
    try:
        handle = serve.run(streams_app(str(path), CARRY, shards=2, ray_actor_options={"num_cpus": 0.5}),
                           name="streams_test", route_prefix=None)

        async def client():
            ids = [await handle.open.remote() for _ in chunks]
            got = [[] for _ in chunks]
            for r in range(4):  # every stream's r-th step, all at once
                outs = await asyncio.gather(*(handle.step.remote(i, {"X": c[r]}) for i, c in zip(ids, chunks)))
                for k, out in enumerate(outs):
                    got[k].append(out)
            stats = await handle.stats.remote()
            for i in ids:
                await handle.close.remote(i)
            return ids, got, stats
        ids, got, stats = asyncio.run(client())
    finally:
        serve.shutdown()
        ray.shutdown()
    assert sorted({i >> SHARD_BITS for i in ids}) == [0, 1]  # streams spread over both shards
    assert [s["steps"] for s in stats] == [12, 12]  # each shard ran its own streams' steps
    for g_stream, w_stream in zip(got, want):
        for g, w in zip(g_stream, w_stream):
            for a, b in zip(g, w):
                np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_a_replica_without_the_extension_finds_the_drivers(tmp_path, monkeypatch):
    """A replica may import lstm_ort from a source tree in the driver's directory (CI runs the tests
    in the clone, against an install elsewhere): its streams package has no built _engine, and the
    shard looks in the driver's folder for it; a package that has its own keeps it."""
    pytest.importorskip("ray", reason="Ray is not installed (pip install 'lstm-ort[serving]')")
    pytest.importorskip("ray.serve", reason="Ray Serve is not installed (pip install 'lstm-ort[serving]')")
    import importlib.util

    import lstm_ort.serving.streams as streams
    from lstm_ort.serving.streams import ray as streams_ray

    monkeypatch.setattr(streams, "__path__", list(streams.__path__))
    streams_ray._find_engine_in(str(tmp_path))  # this install has its extension: nothing added
    assert str(tmp_path) not in streams.__path__
    streams_ray._find_engine_in(str(tmp_path / "absent"))
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name.endswith("._engine") else real_find_spec(name, *a))
    streams_ray._find_engine_in(str(tmp_path / "absent"))  # not on this node: nothing added
    assert str(tmp_path / "absent") not in streams.__path__
    streams_ray._find_engine_in(str(tmp_path))
    assert streams.__path__[-1] == str(tmp_path)
    assert Path(streams_ray._engine_dir()).is_dir()
