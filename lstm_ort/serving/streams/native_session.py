"""What the native step path's onnxruntime session is made of: the model as lstm_ort's session runs
it, Python's SessionOptions and providers as plain values (the engine makes its own session
through onnxruntime's C API: a Python session cannot be handed to C++), and the C API itself."""

from __future__ import annotations

import ctypes
import os

import onnxruntime as ort

from lstm_ort.runtime.library import get_library_path, native
from lstm_ort.runtime.session import session_model

# Session config entries onnxruntime reads (onnxruntime_session_options_config_keys.h) that the
# engine's session takes over from the caller's options; lstm_ort's own (lstm_ort.*) are written
# onto the model's nodes by session_model. Python cannot list what a SessionOptions holds.
CONFIG_KEYS = (
    "session.intra_op.allow_spinning", "session.inter_op.allow_spinning", "session.force_spinning_stop",
    "session.set_denormal_as_zero", "session.disable_prepacking", "session.use_env_allocators",
    "session.intra_op_thread_affinities", "session.dynamic_block_base", "session.disable_cpu_ep_fallback",
    "session.use_device_allocator_for_initializers", "session.disable_quant_qdq", "session.qdqisint8allowed",
    "session.x64quantprecision", "session.enable_quant_qdq_cleanup", "session.disable_aot_function_inlining",
    "session.disable_double_qdq_remover", "session.use_ort_model_bytes_directly",
    "optimization.disable_specified_optimizers", "optimization.minimal_build_optimizations",
    "mlas.enable_gemm_fastmath_arm64_bfloat16", "session.inter_op_thread_affinities",
)
_PROVIDERS = ("CPUExecutionProvider", "CUDAExecutionProvider")


def api_base() -> int:
    """onnxruntime's OrtApiBase as lstm_ort's op library received it (registering the library
    into a throwaway SessionOptions if no session has yet)."""
    fn = native().LstmOrtApiBase
    fn.restype = ctypes.c_void_p
    fn.argtypes = []
    if not fn():
        ort.SessionOptions().register_custom_ops_library(get_library_path())
    base = fn()
    if not base:
        raise RuntimeError("lstm_ort: the op library was registered but did not receive onnxruntime's API")
    return int(base)


def engine_options(options: ort.SessionOptions | None) -> dict:
    if options is None:
        return {}
    out = {
        "intra_op_num_threads": int(options.intra_op_num_threads),
        "inter_op_num_threads": int(options.inter_op_num_threads),
        "graph_optimization_level": int(options.graph_optimization_level),
        "execution_mode": int(options.execution_mode),
        "enable_cpu_mem_arena": bool(options.enable_cpu_mem_arena),
        "enable_mem_pattern": bool(options.enable_mem_pattern),
        "log_severity_level": int(options.log_severity_level),
    }
    if options.enable_profiling:
        out["profile_file_prefix"] = f"{options.profile_file_prefix or 'onnxruntime_profile'}_streams"
    config = []
    for key in CONFIG_KEYS:
        try:
            value = options.get_session_config_entry(key)
        except Exception:  # onnxruntime raises when the key is absent
            continue
        config.append((key, value))
    out["config"] = config
    return out


def engine_providers(session: ort.InferenceSession) -> list[tuple[str, list[tuple[str, str]]]]:
    """The providers ``session`` runs on, with the options it resolved (so the engine's session is
    configured as it is); ValueError for one the engine cannot configure."""
    options = session.get_provider_options()
    out = []
    for name in session.get_providers():
        if name not in _PROVIDERS:
            raise ValueError(f"StreamBatcher runs on {' and '.join(_PROVIDERS)}; the session also uses {name}")
        out.append((name, sorted((str(k), str(v)) for k, v in options.get(name, {}).items())))
    return out


def engine_model(model_bytes: bytes, options: ort.SessionOptions | None) -> bytes:
    prepared = session_model(model_bytes, options)
    if isinstance(prepared, (str, os.PathLike)):
        with open(prepared, "rb") as f:
            return f.read()
    return prepared
