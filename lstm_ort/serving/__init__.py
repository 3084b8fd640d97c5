"""Serving: ragged datasets through an optimized model in length buckets (docs/serving.md), and
many concurrent streams of a stateful model, batched step by step (StreamBatcher, docs/streams.md).

``lstm_ort.serving`` sits on the runtime and never imports the rewriter; Ray is imported only by
``lstm_ort.serving.batch.ray``. Names load on first use, so importing the package pulls in neither
onnxruntime nor Ray. The analyses the batchers read (ragged exactness, batch axes) are
lstm_ort.graph's, shared with the rewriter and the pipeline; their names are here too.
"""

_NAMES = {  # name -> its module (relative: under lstm_ort.serving)
    "BucketingBatcher": "batch.batcher", "BatchStats": "batch.plan", "BucketStats": "batch.plan",
    "NotRaggedExact": "batch.batcher", "SequenceError": "batch.batcher",
    "RaggedLayout": "lstm_ort.graph.ragged", "NoSequenceInput": "lstm_ort.graph.ragged", "analyze": "lstm_ort.graph.ragged",
    "greedy_boundaries": "batch.buckets", "optimal_boundaries": "batch.buckets",
    "StreamBatcher": "streams.batcher", "StreamError": "streams.errors", "StreamClosed": "streams.errors",
    "BatcherShutDown": "streams.errors",
    "StreamStats": "streams.stats", "BatchLayout": "lstm_ort.graph.batch_axes",
    "batch_layout": "lstm_ort.graph.batch_axes",
}
__all__ = sorted(_NAMES)


def __getattr__(name: str):
    if name in _NAMES:
        import importlib

        module = _NAMES[name]
        return getattr(importlib.import_module(module if module.startswith("lstm_ort.") else f"lstm_ort.serving.{module}"), name)
    raise AttributeError(f"module 'lstm_ort.serving' has no attribute {name!r}")
