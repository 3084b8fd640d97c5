"""lstm-ort: fused LSTM kernels for ONNX Runtime.

``import lstm_ort`` loads only the runtime; ``optimize`` and ``Report`` load the rewriter (and
onnxscript) when first used.
"""

from lstm_ort.runtime import InferenceSession, get_library_path, register

__all__ = ["InferenceSession", "Report", "get_library_path", "optimize", "register"]
__version__ = "0.1.0"

_REWRITER_NAMES = ("Report", "optimize")


def __getattr__(name: str):
    if name in _REWRITER_NAMES:
        from lstm_ort import rewriter

        return getattr(rewriter, name)
    raise AttributeError(f"module 'lstm_ort' has no attribute {name!r}")
