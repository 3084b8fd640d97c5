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

A tuning cache never breaks a session: sessions (and `lstm-ort check`) read it through load_cache,
which skips a file that cannot be read and every entry a kernel could not take (a device name
with '|' or ';', a key other than "T.. B.. [threads..]", a winner that is no strategy or
cpu_kernel, a level that is not an object), with a warning naming the file. `lstm-ort tune`
reads it through read_cache, where an unreadable file is an error naming it (CacheError).
"""

from __future__ import annotations

import json
import os
import re
import warnings
from pathlib import Path

import onnx

from lstm_ort.ops.identity import (CPU_KERNELS, DEFAULT_PRECISION, PRECISIONS, STRATEGIES, TUNED_CPU_PREFIX,
                                   Precision)
from lstm_ort.ops.spec import attribute
from lstm_ort.ops.tuned import TunedEntry, format_tuned
from lstm_ort.runtime.nodes import NodeShape, node_precision, node_shapes, set_attribute
from lstm_ort.runtime.output_files import write_file

CACHE_ENV = "LSTM_ORT_CACHE_DIR"
_TB = re.compile(r"T(\d+) B(\d+)(?: threads(\d+))?")  # an entry's key: "T100 B64", "T32 B8 threads2"
_SIZE_LIMIT = 1 << 31  # T and B as the kernel's attribute parser reads them


class CacheError(ValueError):
    """The cache cannot be read or written; the message names the file (or the folder)."""


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


def read_cache() -> dict:
    """The cache as stored, or {} when there is none; CacheError, naming the file, when it cannot
    be read or is not a JSON object, or when ``$LSTM_ORT_CACHE_DIR`` is not a folder."""
    path = cache_file()
    if path.parent.exists() and not path.parent.is_dir():
        raise CacheError(f"tuning cache folder {path.parent} ({CACHE_ENV} or the default) is not a folder")
    if not path.exists():
        return {}
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise CacheError(f"tuning cache {path} is unreadable ({e}); delete it (lstm-ort tune then writes a new "
                         f"one)") from e
    if not isinstance(data, dict):
        raise CacheError(f"tuning cache {path} is not a JSON object; delete it (lstm-ort tune then writes a new one)")
    return data


def check_writable() -> None:
    """Before `lstm-ort tune` measures: CacheError, naming the file or folder, where the cache
    cannot be read or its folder cannot be made."""
    read_cache()
    try:
        cache_file().parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise CacheError(f"cannot make the tuning cache folder {cache_file().parent}: {e.strerror or e}") from e


_WARNED: set[str] = set()  # what the default warning said already in this process (every session reads the cache)


def _warn_once(message: str) -> None:
    if message not in _WARNED:
        _WARNED.add(message)
        warnings.warn(f"lstm_ort: {message}", RuntimeWarning, stacklevel=4)


def load_cache(warn=None) -> dict:
    """The cache's usable winners, as sessions and `lstm-ort check` read it: {} when there is none
    or it cannot be read, without each entry no kernel could take; what is skipped is said through
    ``warn`` (default: a RuntimeWarning, once per process and message), naming the file. Never
    raises for the cache."""
    warn = warn or _warn_once
    try:
        data = read_cache()
    except CacheError as e:
        warn(f"{e}; running without tuned winners")
        return {}
    usable, skipped = _usable(data)
    if skipped:
        shown = "; ".join(skipped[:3]) + (f"; and {len(skipped) - 3} more" if len(skipped) > 3 else "")
        warn(f"tuning cache {cache_file()}: {len(skipped)} entr{'y' if len(skipped) == 1 else 'ies'} "
             f"ignored, no kernel could take {'it' if len(skipped) == 1 else 'them'} ({shown}); rerun lstm-ort tune "
             f"or delete the file")
    return usable


def _usable(data: dict) -> tuple[dict, list[str]]:
    """``data`` without the entries a kernel could not take, and where each of those was."""
    usable, skipped = {}, []
    for device, shapes in data.items():
        why = "an empty name" if not device else "a name with '|' or ';'" if any(c in device for c in "|;") else \
            None if isinstance(shapes, dict) else "not an object"
        if why:
            skipped.append(f"device {device!r}: {why}")
            continue
        names = CPU_KERNELS if device.startswith(TUNED_CPU_PREFIX) else STRATEGIES
        for shape, entries in shapes.items():
            if not isinstance(entries, dict):
                skipped.append(f"{device} / {shape}: not an object")
                continue
            for tb, entry in entries.items():
                m = _TB.fullmatch(tb)
                strategy = entry.get("strategy") if isinstance(entry, dict) else None
                if not m or max(int(v) for v in m.groups() if v is not None) >= _SIZE_LIMIT:
                    skipped.append(f"{device} / {shape} / {tb!r}: not 'T<n> B<n>' or 'T<n> B<n> threads<n>'")
                elif strategy not in names:
                    skipped.append(f"{device} / {shape} / {tb}: winner {strategy!r} is none of {', '.join(names)}")
                else:
                    usable.setdefault(device, {}).setdefault(shape, {})[tb] = entry
    return usable, skipped


def record(gpu: str, shape: NodeShape, T: int, B: int, strategy: str, timings: dict[str, float], *,
           precision: str = DEFAULT_PRECISION, threads: int | None = None) -> Path:
    """Store one winner, measured in ``precision`` (on a CPU: with ``threads`` intra-op threads);
    the file is replaced whole (lstm_ort.runtime.output_files), so readers never see half of it.
    CacheError, naming the file, when the cache cannot be read or written; a level on the way to
    this entry that is not an object is replaced."""
    if min(T, B) < 0 or (threads is not None and threads < 1):
        raise ValueError(f"cannot cache T={T} B={B} threads={threads}: sizes >= 0, threads >= 1")
    data = read_cache()
    key = f"T{T} B{B}" + (f" threads{threads}" if threads else "")
    level = data
    for name in (gpu, cache_key(shape, precision)):
        if not isinstance(level.get(name), dict):
            level[name] = {}
        level = level[name]
    level[key] = {"strategy": strategy, "ms": timings}
    try:
        return write_file(cache_file(), lambda path: path.write_text(json.dumps(data, indent=1, sort_keys=True)))
    except OSError as e:
        raise CacheError(f"cannot write the tuning cache {cache_file()}: {e.strerror or e}") from e


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
