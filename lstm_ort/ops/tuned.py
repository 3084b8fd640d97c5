"""The ``tuned`` attribute: `lstm-ort tune`'s winners as the CUDA kernel reads them,
``gpu|T|B|strategy`` entries joined by ``;``. Written here only; read only by the C++ attribute
parser (tests/test_op_identity.py round-trips the two)."""

from __future__ import annotations

from typing import NamedTuple

from lstm_ort.ops.identity import STRATEGIES


class TunedEntry(NamedTuple):
    gpu: str
    T: int
    B: int
    strategy: str


def format_tuned(entries: list[TunedEntry]) -> str:
    for e in entries:
        if not e.gpu or any(c in e.gpu for c in "|;") or e.strategy not in STRATEGIES or min(e.T, e.B) < 0:
            raise ValueError(f"cannot write tuned entry {e}: a GPU name without '|' or ';', sizes >= 0 "
                             f"and a known strategy")
    return ";".join(f"{e.gpu}|{e.T}|{e.B}|{e.strategy}" for e in entries)
