"""Running optimized models: the op library, the session, the node options and the tuning cache
it hands to the kernel. Imports neither the rewriter nor onnxscript, so inference stays light."""

from lstm_ort.runtime.onnxruntime_check import check_onnxruntime

check_onnxruntime()

from lstm_ort.runtime.library import cuda_status, get_library_path  # noqa: E402
from lstm_ort.runtime.session import InferenceSession, register  # noqa: E402

__all__ = ["InferenceSession", "cuda_status", "get_library_path", "register"]
