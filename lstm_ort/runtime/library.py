"""Where the compiled op library lives, and its C entry points for Python tools."""

from __future__ import annotations

import ctypes
import functools
import os
from pathlib import Path

LIBRARY_ENV = "LSTM_ORT_LIBRARY"
_NAME = "liblstm_ort_ops.so"


def get_library_path() -> str:
    """Path of the custom-op shared library (``$LSTM_ORT_LIBRARY`` overrides the packaged one)."""
    override = os.environ.get(LIBRARY_ENV)
    if override:
        if not Path(override).is_file():
            raise FileNotFoundError(f"{LIBRARY_ENV}={override} does not name a file")
        return override
    packaged = Path(__file__).parent.parent / "lib" / _NAME
    if packaged.is_file():
        return str(packaged)
    raise FileNotFoundError(
        f"lstm_ort's op library was not built into this install (looked for {packaged}); "
        f"reinstall with `pip install .` or point {LIBRARY_ENV} at a built {_NAME}"
    )


@functools.lru_cache(maxsize=None)
def native() -> ctypes.CDLL:
    """The op library, loaded once for its C entry points (custom_ops/entry_points.cc and
    custom_ops/cuda/entry_points.cc)."""
    return ctypes.CDLL(get_library_path())


def call_for_text(fn, *args, size: int = 2048) -> str:
    """Calls an entry point that writes text into (out, size) and returns 0, or an error message."""
    buf = ctypes.create_string_buffer(size)
    if fn(*args, buf, len(buf)) != 0:
        raise RuntimeError(buf.value.decode())
    return buf.value.decode()
