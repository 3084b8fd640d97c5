"""Many concurrent streams of a stateful model, stepped in batches (docs/streams.md)."""

from lstm_ort.serving.streams.batcher import BatcherShutDown, StreamBatcher, StreamClosed, StreamError

__all__ = ["BatcherShutDown", "StreamBatcher", "StreamClosed", "StreamError"]
