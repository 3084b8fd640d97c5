"""Per-shape strategy choice for FusedLSTM's CUDA kernel: measure the candidates on this GPU,
cache the winner, and hand the cached winners to the kernel through the node's ``tuned``
attribute when a session loads the model.

The cache is one JSON file, ``strategies.json`` in ``$LSTM_ORT_CACHE_DIR`` (default
``$XDG_CACHE_HOME/lstm-ort`` or ``~/.cache/lstm-ort``)::

    {"<GPU name>": {"L4 D1 I512 H512 float32": {"T100 B64": {"strategy": "wavefront", "ms": {...}}}}}
"""

from __future__ import annotations

import ctypes
import functools
import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import numpy as np
import onnx

from lstm_ort._library import get_library_path
from lstm_ort.builders import DOMAIN, OP_TYPE

CACHE_ENV = "LSTM_ORT_CACHE_DIR"
STRATEGIES = ("auto", "tiled", "splitk", "persistent", "wavefront")
CANDIDATES = STRATEGIES[1:]  # what tune measures


@dataclass(frozen=True)
class NodeShape:
    """What a FusedLSTM node fixes about its calls; T and B come with each call."""

    layers: int
    directions: int
    input_size: int
    hidden_size: int
    dtype: str  # "float32" or "float16"

    @property
    def key(self) -> str:
        return f"L{self.layers} D{self.directions} I{self.input_size} H{self.hidden_size} {self.dtype}"


def cache_file() -> Path:
    root = os.environ.get(CACHE_ENV)
    if not root:
        root = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "lstm-ort"
    return Path(root) / "strategies.json"


def load_cache() -> dict:
    """The cache, or {} when there is none; a cache that is not valid JSON is an error."""
    path = cache_file()
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise ValueError(f"lstm-ort tuning cache {path} is unreadable ({e}); delete it or run lstm-ort tune") from e
    if not isinstance(data, dict):
        raise ValueError(f"lstm-ort tuning cache {path} is not a JSON object; delete it or run lstm-ort tune")
    return data


def record(gpu: str, shape: NodeShape, T: int, B: int, strategy: str, timings: dict[str, float]) -> Path:
    """Store one winner; the file is replaced atomically so readers never see half of it."""
    data = load_cache()
    data.setdefault(gpu, {}).setdefault(shape.key, {})[f"T{T} B{B}"] = {"strategy": strategy, "ms": timings}
    path = cache_file()
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp", dir=path.parent)
    with os.fdopen(fd, "w") as f:
        json.dump(data, f, indent=1, sort_keys=True)
    os.replace(tmp, path)
    return path


class TunedEntry(NamedTuple):
    gpu: str
    T: int
    B: int
    strategy: str


def tuned_entries(cache: dict, shape: NodeShape) -> list[TunedEntry]:
    """The cached winners for a node of this shape, on every GPU in the cache."""
    entries = []
    for gpu, shapes in sorted(cache.items()):
        for tb, entry in sorted(shapes.get(shape.key, {}).items()):
            T, B = (int(part[1:]) for part in tb.split())
            entries.append(TunedEntry(gpu, T, B, entry["strategy"]))
    return entries


def tuned_attribute(cache: dict, shape: NodeShape) -> str:
    """The node's ``tuned`` attribute: 'gpu|T|B|strategy' entries separated by ';'."""
    return ";".join(f"{e.gpu}|{e.T}|{e.B}|{e.strategy}" for e in tuned_entries(cache, shape))


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


def fused_nodes(model: onnx.ModelProto) -> list[onnx.NodeProto]:
    return [n for g in _graphs(model) for n in g.node if n.domain == DOMAIN and n.op_type == OP_TYPE]


def node_shapes(model: onnx.ModelProto) -> list[tuple[onnx.NodeProto, NodeShape | None]]:
    """Every FusedLSTM node with its sizes, read from its attributes and its packed W initializer;
    None where W is not an initializer (its size is then unknown before a call)."""
    inits = {i.name: i for g in _graphs(model) for i in getattr(g, "initializer", [])}
    return [(node, _shape_of(node, inits)) for node in fused_nodes(model)]


def _shape_of(node: onnx.NodeProto, inits: dict[str, onnx.TensorProto]) -> NodeShape | None:
    attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
    H = int(attrs["hidden_size"])
    L = int(attrs.get("num_layers", 1))
    D = 2 if attrs.get("direction", b"forward") == b"bidirectional" else 1
    w = inits.get(node.input[1]) if len(node.input) > 1 else None
    if w is None:
        return None
    count = int(np.prod(w.dims))
    upper = (L - 1) * D * 4 * H * (D * H + H)  # layers above the first
    I = (count - upper) // (D * 4 * H) - H
    if I <= 0 or (count - upper) % (D * 4 * H):
        return None
    dtype = "float16" if w.data_type == onnx.TensorProto.FLOAT16 else "float32"
    return NodeShape(L, D, I, H, dtype)


def apply_tuned(model: onnx.ModelProto, cache: dict) -> bool:
    """Give every FusedLSTM node without a forced strategy its cached winners; True if any changed."""
    changed = False
    for node, shape in node_shapes(model):
        if shape is None or any(a.name == "strategy" for a in node.attribute):
            continue
        value = tuned_attribute(cache, shape)
        if not value:
            continue
        kept = [a for a in node.attribute if a.name != "tuned"]
        del node.attribute[:]
        node.attribute.extend([*kept, onnx.helper.make_attribute("tuned", value)])
        changed = True
    return changed


# The op library's C entry points for tools (see custom_ops/cuda/entry_points.cc).
@functools.lru_cache(maxsize=None)
def _native():
    lib = ctypes.CDLL(get_library_path())
    if not hasattr(lib, "LstmOrtCudaDeviceName"):
        raise RuntimeError("lstm_ort's op library was built without CUDA kernels")
    return lib


def device_name() -> str:
    """The current CUDA device's name, as the kernel matches tuned entries."""
    buf = ctypes.create_string_buffer(256)
    if _native().LstmOrtCudaDeviceName(buf, len(buf)) != 0:
        raise RuntimeError(f"no CUDA device: {buf.value.decode()}")
    return buf.value.decode()


def describe(shape: NodeShape, T: int, B: int, strategy: str = "auto") -> str:
    """What the CUDA kernel does for one call of these sizes under ``strategy``, in words."""
    lib = _native()
    fn = lib.LstmOrtDescribeStrategy
    fn.argtypes = [ctypes.c_int64] * 6 + [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_int]
    buf = ctypes.create_string_buffer(2048)
    rc = fn(shape.layers, shape.directions, T, shape.input_size, shape.hidden_size, B,
            shape.dtype.encode(), strategy.encode(), buf, len(buf))
    if rc != 0:
        raise RuntimeError(buf.value.decode())
    return buf.value.decode()


@dataclass
class TuneResult:
    shape: NodeShape
    T: int
    B: int
    ms: dict[str, float]
    winner: str
    plan: str


def tune_shape(shape: NodeShape, T: int, B: int, runs: int = 20, warmup: int = 3,
               candidates=CANDIDATES) -> TuneResult:
    """Time each candidate strategy on a node of this shape with random weights (CUDA EP)."""
    from lstm_ort.builders import LstmSpec, fused_model, random_layers
    from lstm_ort.timing import OrtRunner, median_ms

    rng = np.random.default_rng(0)
    spec = LstmSpec(input_size=shape.input_size, hidden_size=shape.hidden_size, num_layers=shape.layers,
                    direction="bidirectional" if shape.directions == 2 else "forward")
    dtype = np.float16 if shape.dtype == "float16" else np.float32
    model = fused_model(spec, random_layers(spec, rng), dtype)
    feeds = {"X": rng.standard_normal((T, B, shape.input_size)).astype(dtype)}
    ms = {name: median_ms(OrtRunner(model, feeds, "cuda", fused=True, strategy=name), runs, warmup)
          for name in candidates}
    winner = min(ms, key=ms.get)
    return TuneResult(shape, T, B, ms, winner, describe(shape, T, B, winner))
