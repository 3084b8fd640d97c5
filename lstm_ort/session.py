"""A drop-in for onnxruntime.InferenceSession that registers lstm_ort's op library itself."""

from __future__ import annotations

import os
from typing import Any

import onnx
import onnxruntime as ort

from lstm_ort._library import get_library_path

_REGISTERED_KEY = "lstm_ort.library_registered"


def register(sess_options: ort.SessionOptions) -> ort.SessionOptions:
    """Register the op library into ``sess_options`` once; returns it."""
    try:
        already = sess_options.get_session_config_entry(_REGISTERED_KEY) == "1"
    except Exception:  # onnxruntime raises when the key is absent
        already = False
    if not already:
        sess_options.register_custom_ops_library(get_library_path())
        sess_options.add_session_config_entry(_REGISTERED_KEY, "1")
    return sess_options


class InferenceSession(ort.InferenceSession):
    """Same constructor and ``run`` as ``onnxruntime.InferenceSession``.

    ``path_or_bytes`` may also be an ``onnx.ModelProto``.
    """

    def __init__(
        self,
        path_or_bytes: str | bytes | os.PathLike | onnx.ModelProto,
        sess_options: ort.SessionOptions | None = None,
        providers: Any = None,
        provider_options: Any = None,
        **kwargs: Any,
    ) -> None:
        if isinstance(path_or_bytes, onnx.ModelProto):
            path_or_bytes = path_or_bytes.SerializeToString()
        elif isinstance(path_or_bytes, os.PathLike):
            path_or_bytes = os.fspath(path_or_bytes)
        sess_options = register(sess_options if sess_options is not None else ort.SessionOptions())
        super().__init__(path_or_bytes, sess_options, providers, provider_options, **kwargs)
