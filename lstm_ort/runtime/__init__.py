"""Running optimized models: the op library, the session, the node options and the tuning cache
it hands to the kernel. Imports neither the rewriter nor onnxscript, so inference stays light."""

from lstm_ort.runtime.library import get_library_path
from lstm_ort.runtime.session import InferenceSession, register

__all__ = ["InferenceSession", "get_library_path", "register"]
