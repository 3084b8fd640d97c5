"""Where the compiled op library lives."""

from __future__ import annotations

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
    packaged = Path(__file__).parent / "lib" / _NAME
    if packaged.is_file():
        return str(packaged)
    raise FileNotFoundError(
        f"lstm_ort's op library was not built into this install (looked for {packaged}); "
        f"reinstall with `pip install .` or point {LIBRARY_ENV} at a built {_NAME}"
    )
