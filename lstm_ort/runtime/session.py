"""A drop-in for onnxruntime.InferenceSession that registers lstm_ort's op library itself."""

from __future__ import annotations

import os
import warnings
from typing import Any

import onnx
import onnxruntime as ort

from lstm_ort.ops.identity import STRATEGIES
from lstm_ort.runtime.library import cuda_status, get_library_path, preload_cuda_libraries
from lstm_ort.runtime.model_io import load_model
from lstm_ort.runtime.nodes import fused_nodes, set_attribute
from lstm_ort.runtime.tuned_cache import apply_tuned, load_cache

_REGISTERED_KEY = "lstm_ort.library_registered"
# Session option: force one CUDA strategy on every FusedLSTM node (one of STRATEGIES),
# e.g. so.add_session_config_entry("lstm_ort.strategy", "wavefront").
STRATEGY_KEY = "lstm_ort.strategy"


def _config_entry(sess_options: ort.SessionOptions, key: str) -> str | None:
    try:
        return sess_options.get_session_config_entry(key)
    except Exception:  # onnxruntime raises when the key is absent
        return None


def register(sess_options: ort.SessionOptions) -> ort.SessionOptions:
    """Register the op library into ``sess_options`` once; returns it."""
    if _config_entry(sess_options, _REGISTERED_KEY) != "1":
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
        wants_cuda = _asks_for_cuda(providers)
        if wants_cuda:
            preload_cuda_libraries()  # before registering: the CUDA plugin needs them to load
        strategy = _config_entry(sess_options, STRATEGY_KEY) if sess_options is not None else None
        if strategy is not None:
            path_or_bytes = with_strategy(path_or_bytes, strategy)
        else:
            cache = load_cache()
            if cache:
                path_or_bytes = with_tuned(path_or_bytes, cache)
        if sess_options is not None and _config_entry(sess_options, _REGISTERED_KEY) != "1":
            # The caller's options may hold the library already (registered by hand with
            # register_custom_ops_library): a second registration makes onnxruntime refuse the
            # session ("Domain already set in registry"), and options cannot say what they hold.
            # So try them as given first, and register only if that fails.
            try:
                super().__init__(path_or_bytes, sess_options, providers, provider_options, **kwargs)
            except Exception:
                pass
            else:
                if wants_cuda:
                    warn_without_cuda_kernels()
                return
        sess_options = register(sess_options if sess_options is not None else ort.SessionOptions())
        if wants_cuda:
            warn_without_cuda_kernels()
        super().__init__(path_or_bytes, sess_options, providers, provider_options, **kwargs)


def _asks_for_cuda(providers: Any) -> bool:
    names = [p[0] if isinstance(p, (tuple, list)) else p for p in (providers or [])]
    return "CUDAExecutionProvider" in names


def warn_without_cuda_kernels() -> None:
    """Says, with a RuntimeWarning, why FusedLSTM will not run on the GPU although a session
    asked for the CUDA execution provider: onnxruntime has none here, or lstm_ort's CUDA kernels
    could not be loaded. The session still runs: FusedLSTM on the CPU kernel."""
    if "CUDAExecutionProvider" not in ort.get_available_providers():
        from lstm_ort.runtime.onnxruntime_check import INSTALL_HINT, installed_onnxruntimes

        warnings.warn(
            "lstm_ort: CUDAExecutionProvider was asked for, but this onnxruntime has none "
            f"(installed: {', '.join(installed_onnxruntimes()) or 'no onnxruntime distribution'}); "
            f"everything runs on the CPU. For the GPU: {INSTALL_HINT}",
            RuntimeWarning,
            stacklevel=3,
        )
        return
    loaded, why = cuda_status()
    if not loaded:
        warnings.warn(
            f"lstm_ort: CUDAExecutionProvider was asked for, but lstm_ort's CUDA kernels are not loaded, "
            f"so FusedLSTM nodes run on the CPU kernel: {why}",
            RuntimeWarning,
            stacklevel=3,
        )


def with_strategy(path_or_bytes: str | bytes, strategy: str) -> str | bytes:
    """The model with every FusedLSTM node's ``strategy`` attribute set (subgraphs included)."""
    if strategy not in STRATEGIES:
        raise ValueError(f"{STRATEGY_KEY} must be one of {', '.join(STRATEGIES)}, got {strategy!r}")
    model = load_model(path_or_bytes)
    nodes = fused_nodes(model)
    for node in nodes:
        set_attribute(node, "strategy", strategy)
    return model.SerializeToString() if nodes else path_or_bytes


def with_tuned(path_or_bytes: str | bytes, cache: dict) -> str | bytes:
    """The model with `lstm-ort tune`'s cached winners attached to its FusedLSTM nodes."""
    model = load_model(path_or_bytes)
    if not apply_tuned(model, cache):
        return path_or_bytes
    try:
        return model.SerializeToString()
    except ValueError:  # over protobuf's 2 GB: run untuned rather than fail
        warnings.warn("lstm_ort: model too large to attach tuned strategies in memory; using the heuristic")
        return path_or_bytes
