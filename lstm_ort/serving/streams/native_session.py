"""What the native step path's onnxruntime session is made of: the model as lstm_ort's session runs
it, Python's SessionOptions and providers as plain values (the engine makes its own session
through onnxruntime's C API: a Python session cannot be handed to C++), and the C API itself."""

from __future__ import annotations

import ctypes
import os

import onnxruntime as ort

from lstm_ort.cli_args import finite
from lstm_ort.runtime.library import get_library_path, native
from lstm_ort.ops.identity import require_choice
from lstm_ort.runtime.session import config_entry, session_model

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
# On CUDA, a kind's calls of one stream replay a CUDA graph where onnxruntime captures its model
# (custom_ops/streams/graphed_call.h); "0" turns that off.
CUDA_GRAPHS_KEY = "lstm_ort.streams.cuda_graphs"
# On the CPU, where the caller left the thread count open, a call whose size class last took this
# many microseconds on the engine's one-thread session takes its wide session (batcher.host_threads).
WIDE_FROM_KEY = "lstm_ort.streams.wide_from_us"


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


def wide_from_us(options: ort.SessionOptions | None, default: float) -> float:
    """WIDE_FROM_KEY's value in ``options`` (a finite number of microseconds >= 0), or ``default``."""
    value = config_entry(options, WIDE_FROM_KEY) if options is not None else None
    if value is None:
        return default
    try:
        us = finite(value)
    except ValueError:
        us = -1.0
    if us < 0:
        raise ValueError(f"{WIDE_FROM_KEY} must be a finite number of microseconds >= 0, got {value!r}")
    return us


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
    graphs = config_entry(options, CUDA_GRAPHS_KEY)
    if graphs is not None:
        out["cuda_graphs"] = require_choice(CUDA_GRAPHS_KEY, graphs, ("0", "1")) == "1"
    config = []
    for key in CONFIG_KEYS:
        value = config_entry(options, key)
        if value is not None:
            config.append((key, value))
    out["config"] = config
    return out


def refuse_session_graphs(providers) -> None:
    """ValueError where the CUDA provider's options ask for onnxruntime's session-wide CUDA graph
    (enable_cuda_graph): the batcher's calls change shape and bind new buffers, which a graph
    captured once would replay stale. Its own graphs (CUDA_GRAPHS_KEY) bind buffers that stay."""
    for p in providers or []:
        if isinstance(p, str) or p[0] != "CUDAExecutionProvider":
            continue
        if str(dict(p[1]).get("enable_cuda_graph", "0")).strip().lower() in ("1", "true"):
            raise ValueError("StreamBatcher: the CUDA provider's enable_cuda_graph would replay each call on the "
                             "first call's buffers; leave it off: calls of one stream replay a CUDA graph of their "
                             f"own where they can (session config entry {CUDA_GRAPHS_KEY})")


def engine_providers(session: ort.InferenceSession, asked=None) -> list[tuple[str, list[tuple[str, str]]]]:
    """The providers ``session`` runs on, with the options it resolved (so the engine's session is
    configured as it is); ValueError for one the engine cannot configure. ``asked``: the providers
    as the caller gave them. Where the caller did not choose cuDNN's convolution search, the engine
    takes the heuristic one: a batcher's calls come in many batch sizes, and onnxruntime's default
    (exhaustive) searches again for each new input shape, ~100 ms a shape for silero-vad on an H100,
    where a stream's step is ~0.6 ms."""
    options = session.get_provider_options()
    chosen = {p[0]: dict(p[1]) for p in (asked or []) if not isinstance(p, str)}
    out = []
    for name in session.get_providers():
        if name not in _PROVIDERS:
            raise ValueError(f"StreamBatcher runs on {' and '.join(_PROVIDERS)}; the session also uses {name}")
        values = {str(k): str(v) for k, v in options.get(name, {}).items()}
        if name == "CUDAExecutionProvider" and "cudnn_conv_algo_search" not in chosen.get(name, {}):
            values["cudnn_conv_algo_search"] = "HEURISTIC"
        if name == "CUDAExecutionProvider":
            # a captured graph replays the addresses it was captured with, where the engine's calls
            # bind new ones each time: graphs only where graphed_call.h binds fixed buffers
            values["enable_cuda_graph"] = "0"
        out.append((name, sorted(values.items())))
    return out


def engine_model(model_bytes: bytes, options: ort.SessionOptions | None) -> bytes:
    prepared = session_model(model_bytes, options)
    if isinstance(prepared, (str, os.PathLike)):
        with open(prepared, "rb") as f:
            return f.read()
    return prepared
