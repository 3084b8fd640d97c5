"""lstm-ort: fused LSTM kernels for ONNX Runtime."""

from lstm_ort._library import get_library_path
from lstm_ort.session import InferenceSession, register

__all__ = ["InferenceSession", "get_library_path", "register"]
__version__ = "0.1.0"
