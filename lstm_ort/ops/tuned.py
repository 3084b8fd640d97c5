"""The ``tuned`` attribute: `lstm-ort tune`'s winners as the kernels read them, ``gpu|T|B|strategy``
entries joined by ``;``; an entry whose device is ``cpu:`` and the CPU's name holds a ``cpu_kernel``
for a shape class of the CPU kernel. Written here only; read only by the C++ attribute parser
(tests/test_op_identity.py round-trips the two)."""

from __future__ import annotations

from typing import NamedTuple

from lstm_ort.ops.identity import CPU_KERNELS, STRATEGIES, TUNED_CPU_PREFIX


class TunedEntry(NamedTuple):
    gpu: str
    T: int
    B: int
    strategy: str


def format_tuned(entries: list[TunedEntry]) -> str:
    for e in entries:
        names = CPU_KERNELS if e.gpu.startswith(TUNED_CPU_PREFIX) else STRATEGIES
        if not e.gpu or any(c in e.gpu for c in "|;") or e.strategy not in names or min(e.T, e.B) < 0:
            raise ValueError(f"cannot write tuned entry {e}: a device name without '|' or ';', sizes >= 0 "
                             f"and a known strategy (a cpu_kernel for a 'cpu:' device)")
    return ";".join(f"{e.gpu}|{e.T}|{e.B}|{e.strategy}" for e in entries)
