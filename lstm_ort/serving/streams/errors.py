"""StreamBatcher's errors: what a caller gets for a bad call of one stream (no other stream is
affected), and how the native step path's failures become them."""

from __future__ import annotations

from lstm_ort.runtime.messages import clean_message


class StreamError(ValueError):
    """A bad call of one stream: the message says what; no other stream is affected."""


class StreamClosed(StreamError):
    """The stream is closed, or was never opened."""


class BatcherShutDown(RuntimeError):
    """The batcher was shut down."""


# The native engine's failure kinds (custom_ops/streams/engine.h, Failure), in its order.
STEP_FAILED, CLOSED, SHUT_DOWN = 1, 2, 3


def engine_error(kind: int, message: str) -> Exception:
    """The exception for a failure the native engine reports."""
    if kind == CLOSED:
        return StreamClosed(message)
    if kind == SHUT_DOWN:
        return BatcherShutDown(message)
    return StreamError(f"the step failed: {clean_message(RuntimeError(message))}")


def step_error(error: Exception) -> Exception:
    """An error of a step's call, as its caller gets it."""
    if isinstance(error, (StreamError, BatcherShutDown)):
        return error
    return StreamError(f"the step failed: {clean_message(error)}")


def closed(stream) -> StreamClosed:
    return StreamClosed(f"stream {stream!r} is not open")
