"""Many concurrent streams of a stateful model, stepped in batches (docs/streams.md): StreamBatcher
(batcher.py: the native step path, _engine; reference.py: the same in Python, for the tests),
the checks of feeds (feeds.py, options.py), the kinds of steps (kinds.py), states on the host
(state.py) or device (device.py), counters (stats.py), `lstm-ort streams-bench` (cli.py), Ray
Serve (ray.py). Names load on first use."""

_NAMES = {"StreamBatcher": "batcher", "ReferenceStreamBatcher": "reference", "StreamError": "errors",
          "StreamClosed": "errors", "BatcherShutDown": "errors", "StreamStats": "stats"}
__all__ = sorted(_NAMES)


def __getattr__(name: str):
    if name in _NAMES:
        import importlib

        return getattr(importlib.import_module(f"lstm_ort.serving.streams.{_NAMES[name]}"), name)
    raise AttributeError(f"module 'lstm_ort.serving.streams' has no attribute {name!r}")
