"""`lstm-ort tune`'s cache of measured winners, and how sessions attach them to FusedLSTM nodes.

The cache is one JSON file, ``strategies.json`` in ``$LSTM_ORT_CACHE_DIR`` (default
``$XDG_CACHE_HOME/lstm-ort`` or ``~/.cache/lstm-ort``)::

    {"<GPU name>": {"L4 D1 I512 H512 float32": {"T100 B64": {"strategy": "wavefront", "ms": {...}}},
                    "L4 D1 I512 H512 float32 tf32": {...}}}

Winners are kept per precision mode, which changes what each strategy costs: the key of a node
is its shape and, unless it runs fp32, its precision (cache_key). fp32's key is the shape alone,
so caches written before precision modes keep serving fp32 nodes.

`lstm-ort tune --cpu` keeps the CPU kernel's winners under ``"cpu:<CPU name>"``, per thread count and
by what the CPU computes for the node's mode (cpu_cache_key: fp32 for every mode but bf16, whose key
is the shape alone; bf16 where the CPU runs it)::

    {"cpu:AMD EPYC": {"L1 D1 I28 H256 float32": {"T32 B8 threads2": {"strategy": "stock_split", "ms": {...}}}}}

T is the shape class's bucket (the power of two at or above the T measured), as the kernel looks it up.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import onnx

from lstm_ort.ops.identity import DEFAULT_PRECISION, PRECISIONS, TUNED_CPU_PREFIX, Precision
from lstm_ort.ops.spec import attribute
from lstm_ort.ops.tuned import TunedEntry, format_tuned
from lstm_ort.runtime.nodes import NodeShape, node_precision, node_shapes, set_attribute
from lstm_ort.runtime.output_files import write_file

CACHE_ENV = "LSTM_ORT_CACHE_DIR"
_TB = re.compile(r"T(\d+) B(\d+)(?: threads(\d+))?")  # an entry's key: "T100 B64", "T32 B8 threads2"


def cache_file() -> Path:
    root = os.environ.get(CACHE_ENV)
    if not root:
        root = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "lstm-ort"
    return Path(root) / "strategies.json"


def cache_key(shape: NodeShape, precision: str = DEFAULT_PRECISION) -> str:
    """Where a node's winners are kept: "L4 D1 I512 H512 float32", then " tf32" etc. unless fp32."""
    precision = Precision.parse(precision)
    return shape.key if precision == DEFAULT_PRECISION else f"{shape.key} {precision}"


def cpu_cache_key(shape: NodeShape, precision: str = DEFAULT_PRECISION) -> str | None:
    """Where a node's CPU winners are kept: by what the CPU computes for its mode (the op library's
    decision: fp32 for every mode but bf16, so fp32's key is the shape alone, as before); None where
    this CPU refuses the mode."""
    from lstm_ort.runtime.native import PrecisionRefused, decide_precision

    try:
        return cache_key(shape, decide_precision("cpu", precision).runs)
    except PrecisionRefused:
        return None


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
           precision: str = DEFAULT_PRECISION, threads: int | None = None) -> Path:
    """Store one winner, measured in ``precision`` (on a CPU: with ``threads`` intra-op threads);
    the file is replaced whole (lstm_ort.runtime.output_files), so readers never see half of it."""
    data = load_cache()
    key = f"T{T} B{B}" + (f" threads{threads}" if threads else "")
    data.setdefault(gpu, {}).setdefault(cache_key(shape, precision), {})[key] = {"strategy": strategy, "ms": timings}
    return write_file(cache_file(), lambda path: path.write_text(json.dumps(data, indent=1, sort_keys=True)))


def tuned_entries(cache: dict, shape: NodeShape, precision: str = DEFAULT_PRECISION, *,
                  cpu_threads: int | None = None, gpu: bool = True) -> list[TunedEntry]:
    """The cached winners for a node of this shape running in ``precision``: on every GPU in the
    cache (unless ``gpu`` is False) and, with ``cpu_threads``, the CPU kernel's for that thread count."""
    entries = []
    for device, shapes in sorted(cache.items()):
        cpu = device.startswith(TUNED_CPU_PREFIX)
        if (cpu and cpu_threads is None) or (not cpu and not gpu):
            continue
        key = cpu_cache_key(shape, precision) if cpu else cache_key(shape, precision)
        for tb, entry in sorted(shapes.get(key, {}).items()):
            T, B, threads = _TB.fullmatch(tb).groups()
            if cpu and threads != str(cpu_threads):
                continue
            entries.append(TunedEntry(device, int(T), int(B), entry["strategy"]))
    return entries


def apply_tuned(model: onnx.ModelProto, cache: dict, cpu_threads: int | None = None) -> bool:
    """Give every FusedLSTM node its cached winners for its shape and precision: the GPU ones where
    it forces no strategy, the CPU kernel's for ``cpu_threads`` where its cpu_kernel is auto;
    True if any changed."""
    changed = False
    for node, shape in node_shapes(model):
        precision = node_precision(node)
        if shape is None or precision not in PRECISIONS:
            continue  # an unknown precision: the kernel refuses the node, naming the allowed values
        forced = {a.name for a in node.attribute}
        cpu_auto = attribute(node, "cpu_kernel", "auto") == "auto"
        entries = tuned_entries(cache, shape, precision, gpu="strategy" not in forced,
                                cpu_threads=cpu_threads if cpu_auto else None)
        if entries:
            set_attribute(node, "tuned", format_tuned(entries))
            changed = True
    return changed
