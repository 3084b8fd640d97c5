"""A drop-in for onnxruntime.InferenceSession that registers lstm_ort's op library itself."""

from __future__ import annotations

import os
from typing import Any

import onnx
import onnxruntime as ort

from lstm_ort._library import get_library_path

_REGISTERED_KEY = "lstm_ort.library_registered"
# Session option: force one CUDA strategy on every FusedLSTM node ("auto", "tiled", "splitk",
# "persistent", "wavefront"), e.g. so.add_session_config_entry("lstm_ort.strategy", "wavefront").
STRATEGY_KEY = "lstm_ort.strategy"
STRATEGIES = ("auto", "tiled", "splitk", "persistent", "wavefront")


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
        sess_options = register(sess_options if sess_options is not None else ort.SessionOptions())
        strategy = _config_entry(sess_options, STRATEGY_KEY)
        if strategy is not None:
            path_or_bytes = with_strategy(path_or_bytes, strategy)
        super().__init__(path_or_bytes, sess_options, providers, provider_options, **kwargs)


def with_strategy(path_or_bytes: str | bytes, strategy: str) -> str | bytes:
    """The model with every FusedLSTM node's ``strategy`` attribute set (subgraphs included)."""
    if strategy not in STRATEGIES:
        raise ValueError(f"{STRATEGY_KEY} must be one of {', '.join(STRATEGIES)}, got {strategy!r}")
    if isinstance(path_or_bytes, bytes):
        model = onnx.load_from_string(path_or_bytes)
    else:
        model = onnx.load(path_or_bytes)  # external data is loaded next to the path
    found = False
    for graph in _graphs(model):
        for node in graph.node:
            if node.domain == "lstm_ort" and node.op_type == "FusedLSTM":
                kept = [a for a in node.attribute if a.name != "strategy"]
                del node.attribute[:]
                node.attribute.extend([*kept, onnx.helper.make_attribute("strategy", strategy)])
                found = True
    return model.SerializeToString() if found else path_or_bytes


def _graphs(model: onnx.ModelProto):
    """The main graph, every function, and every subgraph inside them (If/Loop/Scan bodies)."""
    pending = [model.graph, *model.functions]
    while pending:
        graph = pending.pop()
        yield graph
        for node in graph.node:
            for attr in node.attribute:
                if attr.type == onnx.AttributeProto.GRAPH:
                    pending.append(attr.g)
                elif attr.type == onnx.AttributeProto.GRAPHS:
                    pending.extend(attr.graphs)
