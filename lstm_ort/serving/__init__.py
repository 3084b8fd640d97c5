"""Serving: ragged datasets through an optimized model in length buckets (docs/serving.md), and
many concurrent streams of a stateful model, batched step by step (StreamBatcher, docs/streams.md).

``lstm_ort.serving`` sits on the runtime and never imports the rewriter; Ray is imported only by
``lstm_ort.serving.ray``. Names load on first use, so ``lstm_ort.serving.ragged`` (shared with the
rewriter) does not pull in onnxruntime.
"""

_NAMES = {
    "BucketingBatcher": "batcher", "BatchStats": "batcher", "BucketStats": "batcher", "NotRaggedExact": "batcher",
    "SequenceError": "batcher",
    "RaggedLayout": "ragged", "NoSequenceInput": "ragged", "analyze": "ragged",
    "greedy_boundaries": "buckets", "optimal_boundaries": "buckets",
    "StreamBatcher": "streams", "StreamError": "streams", "StreamClosed": "streams", "BatcherShutDown": "streams",
    "StreamStats": "streams_stats", "BatchLayout": "streams_axes", "batch_layout": "streams_axes",
}
__all__ = sorted(_NAMES)


def __getattr__(name: str):
    if name in _NAMES:
        import importlib

        return getattr(importlib.import_module(f"lstm_ort.serving.{_NAMES[name]}"), name)
    raise AttributeError(f"module 'lstm_ort.serving' has no attribute {name!r}")
