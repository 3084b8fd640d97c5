"""A drop-in for onnxruntime.InferenceSession that registers lstm_ort's op library itself."""

from __future__ import annotations

import os
import warnings
from typing import Any

import onnx
import onnxruntime as ort

from lstm_ort.ops.identity import CPU_KERNELS, DEBUG_KEYS, INT8_SCALES, PRECISIONS, STRATEGIES, Precision, require_choice
from lstm_ort.runtime.library import cuda_status, get_library_path, preload_cuda_libraries
from lstm_ort.runtime.model_io import load_model
from lstm_ort.runtime.nodes import fused_nodes, set_attribute
from lstm_ort.runtime.tuned_cache import apply_tuned, load_cache

_REGISTERED_KEY = "lstm_ort.library_registered"
# Session option: force one CUDA strategy on every FusedLSTM node (one of STRATEGIES),
# e.g. so.add_session_config_entry("lstm_ort.strategy", "wavefront").
STRATEGY_KEY = "lstm_ort.strategy"
# Session option: run every FusedLSTM node in one precision mode (one of PRECISIONS; docs/ops.md,
# "Precision modes"), e.g. so.add_session_config_entry("lstm_ort.precision", "tf32"), or
# InferenceSession(..., precision="tf32").
PRECISION_KEY = "lstm_ort.precision"
# Session option: which kernel runs FusedLSTM on the CPU (one of CPU_KERNELS; default auto, the
# faster per shape class of the fused kernel and onnxruntime's own, docs/cpu.md), e.g.
# so.add_session_config_entry("lstm_ort.cpu_kernel", "fused").
CPU_KERNEL_KEY = "lstm_ort.cpu_kernel"
# Session option: how nodes with int8 weights quantize their activations (one of INT8_SCALES;
# docs/ops.md, "int8 weights"): "row" gives each batch row its own scale, so rows batched together
# never change each other's results (what a stream batcher needs), e.g.
# so.add_session_config_entry("lstm_ort.int8_scales", "row").
INT8_SCALES_KEY = "lstm_ort.int8_scales"

# Session options lstm_ort.debug.<key> (key one of DEBUG_KEYS): developer overrides of the CUDA
# kernel's own choices, passed to every FusedLSTM node as its `debug` attribute ("key=value;...")
# and checked by the kernel's parser (docs/architecture.md, "Overrides"), e.g.
# so.add_session_config_entry("lstm_ort.debug.strict", "1"): every fallback is an error naming it.
DEBUG_PREFIX = "lstm_ort.debug."

# The session options that set one attribute on every FusedLSTM node, subgraphs included:
# attribute -> (its session config key, the values it takes).
NODE_OPTIONS = {"strategy": (STRATEGY_KEY, STRATEGIES), "precision": (PRECISION_KEY, PRECISIONS),
                "cpu_kernel": (CPU_KERNEL_KEY, CPU_KERNELS), "int8_scales": (INT8_SCALES_KEY, INT8_SCALES)}


def config_entry(sess_options: ort.SessionOptions, key: str) -> str | None:
    try:
        return sess_options.get_session_config_entry(key)
    except Exception:  # onnxruntime raises when the key is absent
        return None


def register(sess_options: ort.SessionOptions) -> ort.SessionOptions:
    """Register the op library into ``sess_options`` once; returns it."""
    if config_entry(sess_options, _REGISTERED_KEY) != "1":
        sess_options.register_custom_ops_library(get_library_path())
        sess_options.add_session_config_entry(_REGISTERED_KEY, "1")
    return sess_options


class InferenceSession(ort.InferenceSession):
    """Same constructor and ``run`` as ``onnxruntime.InferenceSession``.

    ``path_or_bytes`` may also be an ``onnx.ModelProto``. ``precision`` (one of PRECISIONS) runs
    every FusedLSTM node in that mode: it sets the session config entry ``lstm_ort.precision``
    (PRECISION_KEY) in ``sess_options``, which a session also reads when set there directly.
    ``debug`` ({key: value}, keys from DEBUG_KEYS) sets the entries ``lstm_ort.debug.<key>`` likewise,
    e.g. ``debug={"strict": "1"}``.
    """

    def __init__(
        self,
        path_or_bytes: str | bytes | os.PathLike | onnx.ModelProto,
        sess_options: ort.SessionOptions | None = None,
        providers: Any = None,
        provider_options: Any = None,
        *,
        precision: str | None = None,
        debug: dict[str, str] | None = None,
        **kwargs: Any,
    ) -> None:
        if isinstance(path_or_bytes, onnx.ModelProto):
            path_or_bytes = path_or_bytes.SerializeToString()
        elif isinstance(path_or_bytes, os.PathLike):
            path_or_bytes = os.fspath(path_or_bytes)
        own_options = sess_options is None
        if precision is not None:
            precision = Precision.parse(precision).value
            sess_options = sess_options if sess_options is not None else ort.SessionOptions()
            if config_entry(sess_options, PRECISION_KEY) != precision:  # onnxruntime warns on each overwrite
                sess_options.add_session_config_entry(PRECISION_KEY, precision)
        if debug:
            sess_options = sess_options if sess_options is not None else ort.SessionOptions()
            for key, value in debug.items():
                require_choice("debug key", key, DEBUG_KEYS)
                if config_entry(sess_options, DEBUG_PREFIX + key) != str(value):
                    sess_options.add_session_config_entry(DEBUG_PREFIX + key, str(value))
        wants_cuda = _asks_for_cuda(providers)
        if wants_cuda:
            preload_cuda_libraries()  # before registering: the CUDA plugin needs them to load
        path_or_bytes = session_model(path_or_bytes, sess_options)
        if not own_options and config_entry(sess_options, _REGISTERED_KEY) != "1":
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


def session_model(path_or_bytes: str | bytes, sess_options: ort.SessionOptions | None) -> str | bytes:
    """The model a session with these options runs: the options' node attributes (strategy,
    precision, cpu_kernel, debug) and `lstm-ort tune`'s cached winners set on its FusedLSTM nodes."""
    forced = node_options(sess_options) if sess_options is not None else {}
    # A forced strategy and cpu_kernel leave nothing for tuned winners to decide.
    cache = load_cache() if not {"strategy", "cpu_kernel"} <= forced.keys() else {}
    return with_attributes(path_or_bytes, forced, cache, cpu_threads=session_threads(sess_options))


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


def node_options(sess_options: ort.SessionOptions) -> dict[str, str]:
    """attribute -> value for each NODE_OPTIONS entry set in ``sess_options``; ValueError, naming
    the config key and the allowed values, for a value the kernels do not take."""
    forced = {}
    for attribute, (key, choices) in NODE_OPTIONS.items():
        value = config_entry(sess_options, key)
        if value is not None:
            forced[attribute] = require_choice(key, value, choices)
    debug = debug_attribute(sess_options)
    if debug:
        forced["debug"] = debug
    return forced


def debug_attribute(sess_options: ort.SessionOptions) -> str:
    """The `debug` attribute for the lstm_ort.debug.<key> entries set in ``sess_options``:
    "key=value;..." in DEBUG_KEYS order, empty when none is set. The kernel's parser checks the
    values (a bad one fails the session, naming the key); a value may not hold ';' or '='."""
    entries = []
    for key in DEBUG_KEYS:
        value = config_entry(sess_options, DEBUG_PREFIX + key)
        if value is None:
            continue
        if ";" in value or "=" in value:
            raise ValueError(f"{DEBUG_PREFIX}{key} may not contain ';' or '=', got {value!r}")
        entries.append(f"{key}={value}")
    return ";".join(entries)


def session_threads(sess_options: ort.SessionOptions | None) -> int:
    """The intra-op threads a session with these options runs on (onnxruntime's 0: the cores)."""
    threads = sess_options.intra_op_num_threads if sess_options is not None else 0
    return threads if threads > 0 else (os.cpu_count() or 1)


def with_attributes(path_or_bytes: str | bytes, attributes: dict[str, str], cache: dict | None = None,
                    cpu_threads: int | None = None) -> str | bytes:
    """The model with ``attributes`` (NODE_OPTIONS names) set on every FusedLSTM node, subgraphs
    included, replacing what the nodes had; with a ``cache``, also `lstm-ort tune`'s winners
    attached to the nodes without a forced strategy (read after the precision is set: winners are
    cached per precision), and the CPU kernel's for ``cpu_threads`` to those without a forced
    cpu_kernel. ``path_or_bytes`` itself when nothing changes. One parse of the model serves both."""
    for attribute, value in attributes.items():
        if attribute in NODE_OPTIONS:  # `debug` is checked by debug_attribute and the kernel
            key, choices = NODE_OPTIONS[attribute]
            require_choice(key, value, choices)
    if not attributes and not cache:
        return path_or_bytes
    model = load_model(path_or_bytes)
    nodes = fused_nodes(model)
    for node in nodes:
        for attribute, value in attributes.items():
            set_attribute(node, attribute, value)
    tuned = bool(cache) and apply_tuned(model, cache, cpu_threads)
    if not (nodes and attributes) and not tuned:
        return path_or_bytes
    try:
        return model.SerializeToString()
    except ValueError:  # over protobuf's 2 GB
        if attributes:  # a forced option silently dropped would run the model otherwise than asked
            raise ValueError(f"lstm_ort: the model is too large (over 2 GB) to set {', '.join(attributes)} on its "
                             f"FusedLSTM nodes in memory; write the attributes into the model file instead") from None
        warnings.warn("lstm_ort: model too large to attach tuned strategies in memory; using the heuristic")
        return path_or_bytes


def with_strategy(path_or_bytes: str | bytes, strategy: str) -> str | bytes:
    """The model with every FusedLSTM node's ``strategy`` attribute set (subgraphs included)."""
    return with_attributes(path_or_bytes, {"strategy": strategy})


def with_precision(path_or_bytes: str | bytes, precision: str) -> str | bytes:
    """The model with every FusedLSTM node's ``precision`` attribute set (subgraphs included)."""
    return with_attributes(path_or_bytes, {"precision": precision})


def with_tuned(path_or_bytes: str | bytes, cache: dict) -> str | bytes:
    """The model with `lstm-ort tune`'s cached winners attached to its FusedLSTM nodes."""
    return with_attributes(path_or_bytes, {}, cache)
