"""onnxruntime's error messages as a user reads them."""

from __future__ import annotations

import re


def clean_message(error: BaseException) -> str:
    """onnxruntime's message without its error-code prefix and source locations, on one line."""
    message = re.sub(r"^\[ONNXRuntimeError\] : \d+ : \w+ : ", "", str(error).strip())
    message = re.sub(r"\S+\.(cc|h|cpp):\d+ ", "", message)
    message = re.sub(r"(onnxruntime|onnx)::[\w:<>~]+\([^()]*\)\s*", "", message)
    return " ".join(message.split())[:500]
