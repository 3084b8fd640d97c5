"""`lstm-ort tune`'s cache of measured winners, and how sessions attach them to FusedLSTM nodes.

The cache is one JSON file, ``strategies.json`` in ``$LSTM_ORT_CACHE_DIR`` (default
``$XDG_CACHE_HOME/lstm-ort`` or ``~/.cache/lstm-ort``)::

    {"<GPU name>": {"L4 D1 I512 H512 float32": {"T100 B64": {"strategy": "wavefront", "ms": {...}}},
                    "L4 D1 I512 H512 float32 tf32": {...}}}

Winners are kept per precision mode, which changes what each strategy costs: the key of a node
is its shape and, unless it runs fp32, its precision (cache_key). fp32's key is the shape alone,
so caches written before precision modes keep serving fp32 nodes.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import onnx

from lstm_ort.ops.identity import DEFAULT_PRECISION, PRECISIONS, require_choice
from lstm_ort.ops.tuned import TunedEntry, format_tuned
from lstm_ort.runtime.nodes import NodeShape, node_precision, node_shapes, set_attribute
from lstm_ort.runtime.output_files import write_file

CACHE_ENV = "LSTM_ORT_CACHE_DIR"


def cache_file() -> Path:
    root = os.environ.get(CACHE_ENV)
    if not root:
        root = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "lstm-ort"
    return Path(root) / "strategies.json"


def cache_key(shape: NodeShape, precision: str = DEFAULT_PRECISION) -> str:
    """Where a node's winners are kept: "L4 D1 I512 H512 float32", then " tf32" etc. unless fp32."""
    require_choice("precision", precision, PRECISIONS)
    return shape.key if precision == DEFAULT_PRECISION else f"{shape.key} {precision}"


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


def record(gpu: str, shape: NodeShape, T: int, B: int, strategy: str, timings: dict[str, float], *,
           precision: str = DEFAULT_PRECISION) -> Path:
    """Store one winner, measured in ``precision``; the file is replaced whole
    (lstm_ort.runtime.output_files), so readers never see half of it."""
    data = load_cache()
    data.setdefault(gpu, {}).setdefault(cache_key(shape, precision), {})[f"T{T} B{B}"] = {"strategy": strategy,
                                                                                        "ms": timings}
    return write_file(cache_file(), lambda path: path.write_text(json.dumps(data, indent=1, sort_keys=True)))


def tuned_entries(cache: dict, shape: NodeShape, precision: str = DEFAULT_PRECISION) -> list[TunedEntry]:
    """The cached winners for a node of this shape running in ``precision``, on every GPU in the cache."""
    key = cache_key(shape, precision)
    entries = []
    for gpu, shapes in sorted(cache.items()):
        for tb, entry in sorted(shapes.get(key, {}).items()):
            T, B = (int(part[1:]) for part in tb.split())
            entries.append(TunedEntry(gpu, T, B, entry["strategy"]))
    return entries


def apply_tuned(model: onnx.ModelProto, cache: dict) -> bool:
    """Give every FusedLSTM node without a forced strategy its cached winners for its shape and
    precision; True if any changed."""
    changed = False
    for node, shape in node_shapes(model):
        precision = node_precision(node)
        if shape is None or any(a.name == "strategy" for a in node.attribute) or precision not in PRECISIONS:
            continue  # an unknown precision: the kernel refuses the node, naming the allowed values
        entries = tuned_entries(cache, shape, precision)
        if entries:
            set_attribute(node, "tuned", format_tuned(entries))
            changed = True
    return changed
