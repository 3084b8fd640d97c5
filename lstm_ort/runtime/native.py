"""The op library's C entry points, through ctypes: what the kernels themselves say about names,
packing, the tuned format and, on a CUDA build, the device and the plan for a call."""

from __future__ import annotations

import ctypes
from dataclasses import dataclass

from lstm_ort.ops.identity import CPU_KERNELS, Precision
from lstm_ort.ops.packing import Ranks
from lstm_ort.runtime.library import call_for_text, cuda_native, native
from lstm_ort.runtime.nodes import NodeShape


def strategy_names() -> list[str]:
    """The strategy names the C++ attribute parser accepts, in the order of its enum."""
    return call_for_text(native().LstmOrtStrategyNames).split(",")


def precision_names() -> list[str]:
    """The precision names the C++ attribute parser accepts, in the order of its enum."""
    return call_for_text(native().LstmOrtPrecisionNames).split(",")


class PrecisionRefused(ValueError):
    """The device cannot run the precision mode asked for (e.g. bf16 on a CPU without bf16 units);
    the message says why."""


@dataclass(frozen=True)
class PrecisionDecision:
    """What a call computes in on one device for the mode its node asks for."""

    device: str  # "cpu" or "cuda"
    requested: Precision
    runs: Precision  # never AUTO
    words: str  # what runs, in words


def decide_precision(device: str, precision, hidden: int = 1, batch: int = 1, *, layers: int = 1,
                     directions: int = 1, steps: int = 1) -> PrecisionDecision:
    """The op library's one precision decision (custom_ops/precision.h, DecidePrecision) for a call
    of ``hidden`` units, ``batch`` rows, ``layers`` x ``directions`` and ``steps`` on ``device``
    ("cpu": this CPU, "cuda"), the rule the kernels themselves follow (on CUDA, auto also reads the
    stack: it runs tf32 on the stacks the tensor-core step takes). PrecisionRefused where the device
    cannot run the mode."""
    requested = Precision.parse(precision)
    fn = native().LstmOrtDecidePrecision
    i64 = ctypes.c_int64
    fn.argtypes = [ctypes.c_char_p, ctypes.c_char_p, i64, i64, i64, i64, i64, ctypes.c_char_p, ctypes.c_int]
    buf = ctypes.create_string_buffer(1024)
    code = fn(device.encode(), requested.value.encode(), hidden, batch, layers, directions, steps, buf, len(buf))
    text = buf.value.decode()
    if code == 2:
        raise PrecisionRefused(text)
    if code != 0:
        raise ValueError(f"decide_precision({device!r}, {precision!r}, {hidden}, {batch}, layers={layers}, "
                         f"directions={directions}, steps={steps}): {text}")
    runs, _, words = text.partition("\t")
    return PrecisionDecision(device, requested, Precision(runs), words)


def cpu_kernel_names() -> list[str]:
    """The cpu_kernel names the C++ attribute parser accepts, in the order of its enum."""
    return call_for_text(native().LstmOrtCpuKernelNames).split(",")


def int8_scales_names() -> list[str]:
    """The int8_scales names the C++ attribute parser accepts, in the order of its enum."""
    return call_for_text(native().LstmOrtInt8ScalesNames).split(",")


def debug_keys() -> list[str]:
    """The `debug` attribute's keys the C++ override parser accepts, in the order of its table."""
    return call_for_text(native().LstmOrtDebugKeys).split(",")


def session_keys() -> list[str]:
    """The session config keys (after "lstm_ort.") that registering the library accepts; any other
    key under "lstm_ort." is refused, naming it (custom_ops/session_keys.h; onnxruntime >= 1.23)."""
    return call_for_text(native().LstmOrtSessionKeys).split(",")


def cpu_name() -> str:
    """This CPU's name as the kernels key their `tuned` entries ("cpu:" + it)."""
    return call_for_text(native().LstmOrtCpuName)


@dataclass(frozen=True)
class CpuChoice:
    """One shape class of one live CPU kernel: the kernel its calls run and what was measured."""

    node: str
    T: int  # the class's bucket: calls of T in (T/2, T]
    B: int
    chosen: str  # a CPU_KERNELS name; "auto" while still measuring
    preset: bool  # from the tuned attribute, not measured in this process
    median_ms: dict[str, float]
    held: tuple[str, ...]  # whose weights the kernel holds now: "fused" (packed), "stock", "stock_threads" (sessions)


def cpu_kernel_report() -> list[CpuChoice]:
    """What every live CPU kernel of this process has chosen, per node and shape class."""
    out = []
    text = call_for_text(native().LstmOrtCpuKernelReport, size=1 << 20)
    for line in text.splitlines():
        node, T, B, chosen, preset, *ms, held = line.split("\t")
        medians = {k: float(v) for k, v in zip(CPU_KERNELS[1:], ms) if v}
        out.append(CpuChoice(node, int(T), int(B), chosen, preset == "1", medians, tuple(filter(None, held.split(",")))))
    return out


def weight_offset(L: int, D: int, I: int, H: int, layer: int, direction: int) -> int:
    """Offset of block (layer, direction) of the packed W as the kernels compute it."""
    fn = native().LstmOrtWeightOffset
    fn.restype = ctypes.c_int64
    fn.argtypes = [ctypes.c_int64] * 6
    return int(fn(L, D, I, H, layer, direction))


def factored_offset(L: int, D: int, I: int, H: int, ranks: Ranks, layer: int, direction: int, what: str) -> int:
    """With factored parts, as the kernels compute it: the offset of W block (layer, direction)
    (`what` "W"), or of its input / recurrent factors in `factors` ("input", "recurrent");
    (L, 0) gives W's or `factors`' element count. -1 for sizes or ranks the kernels refuse."""
    fn = native().LstmOrtFactoredOffset
    fn.restype = ctypes.c_int64
    ranks_type = ctypes.c_int64 * (L * D)
    fn.argtypes = [ctypes.c_int64] * 4 + [ctypes.POINTER(ctypes.c_int64)] * 2 + [ctypes.c_int64] * 3
    given = lambda r: ranks_type(*r) if r else None  # noqa: E731
    return int(fn(L, D, I, H, given(ranks.input), given(ranks.recurrent), layer, direction,
                  ("W", "input", "recurrent").index(what)))


def normalize_tuned(text: str) -> str:
    """A `tuned` attribute value as the C++ parser reads it, written back canonically."""
    fn = native().LstmOrtNormalizeTuned
    fn.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_int]
    return call_for_text(fn, text.encode())


def describe_cpu(shape: NodeShape, T: int, B: int, *, weights: str | None = None, precision: str = "",
                 cpu_kernel: str = "", int8_scales: str = "", tuned: str = "", threads: int = 1) -> str:
    """What the CPU kernel does for one call of these sizes (its call plan, custom_ops/cpu/call_plan.h)
    on this machine, for a node with these attribute values ("" where absent), in a session of
    ``threads`` intra-op threads. ``weights``: "float32", "float16" or "int8" (default: the shape's type)."""
    fn = native().LstmOrtDescribeCpuCall
    fn.argtypes = [ctypes.c_int64] * 6 + [ctypes.c_char_p] * 5 + [ctypes.c_int, ctypes.c_char_p, ctypes.c_int]
    return call_for_text(fn, shape.layers, shape.directions, T, shape.input_size, shape.hidden_size, B,
                         (weights or shape.dtype).encode(), str(precision).encode(), cpu_kernel.encode(),
                         int8_scales.encode(), tuned.encode(), threads)


def _cuda():
    return cuda_native()


def device_name() -> str:
    """The current CUDA device's name, as the kernel matches tuned entries."""
    fn = _cuda().LstmOrtCudaDeviceName
    fn.argtypes = [ctypes.c_char_p, ctypes.c_int]
    try:
        return call_for_text(fn, size=256)
    except RuntimeError as e:
        raise RuntimeError(f"no CUDA device: {e}") from None


def cuda_graph_counts() -> tuple[int, int]:
    """(captures, replays): the CUDA graphs FusedLSTM's kernels made and replayed in this process
    (whole short calls and v1's step loops)."""
    captures, replays = ctypes.c_uint64(), ctypes.c_uint64()
    fn = _cuda().LstmOrtCudaGraphCounts
    fn.argtypes = [ctypes.POINTER(ctypes.c_uint64)] * 2
    fn.restype = None
    fn(ctypes.byref(captures), ctypes.byref(replays))
    return captures.value, replays.value


def own_cublas_handles() -> int:
    """The cuBLAS handles FusedLSTM made of its own in this process: none while onnxruntime lends
    each call its stream's handle (each handle holds a workspace pool: 64 MiB on an H200)."""
    fn = _cuda().LstmOrtOwnCublasHandles
    fn.argtypes = []
    fn.restype = ctypes.c_uint64
    return fn()


def describe(shape: NodeShape, T: int, B: int, strategy: str = "auto", precision: str = "fp32") -> str:
    """What the CUDA kernel does for one call of these sizes under ``strategy`` and ``precision``, in words."""
    fn = _cuda().LstmOrtDescribeStrategy
    fn.argtypes = [ctypes.c_int64] * 6 + [ctypes.c_char_p] * 4 + [ctypes.c_int]
    return call_for_text(fn, shape.layers, shape.directions, T, shape.input_size, shape.hidden_size, B,
                         shape.dtype.encode(), strategy.encode(), precision.encode())
