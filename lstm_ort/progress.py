"""Progress on long steps, for the command line: a step that takes longer than a moment says so
on stderr (when it started, and when it ends); short steps, and library use, stay silent.

    with progress.step("packing weights"):
        ...
"""

from __future__ import annotations

import contextlib
import sys
import threading
import time

_enabled = False
_after_s = 2.0


def enable(after_s: float = 2.0) -> None:
    """Report steps that take longer than `after_s` seconds (0: every step), on stderr."""
    global _enabled, _after_s
    _enabled, _after_s = True, after_s


def disable() -> None:
    global _enabled
    _enabled = False


@contextlib.contextmanager
def step(what: str):
    if not _enabled:
        yield
        return
    start = time.monotonic()
    said = threading.Event()

    def announce():
        said.set()
        print(f"lstm-ort: {what}...", file=sys.stderr, flush=True)

    timer = threading.Timer(_after_s, announce)
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        timer.cancel()
        if said.is_set():
            print(f"lstm-ort: {what}: done in {time.monotonic() - start:.1f} s", file=sys.stderr, flush=True)
