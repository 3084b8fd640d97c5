"""lstm-ort: fused LSTM kernels for ONNX Runtime."""

from lstm_ort._library import get_library_path
from lstm_ort.rewriter import Report, optimize
from lstm_ort.session import InferenceSession, register

__all__ = ["InferenceSession", "Report", "get_library_path", "optimize", "register"]
__version__ = "0.1.0"
