"""The carried states of every open stream, on the host: one array per carried input, one row
(a slot) per stream, each row one stream's state as its own ``run`` takes it (batch axis 1).

A call gathers its streams' rows into the batch layout (the batch axis where the model has it) and
scatters the new states back. Callers hold StreamBatcher's lock around every method.
"""

from __future__ import annotations

import numpy as np

_FIRST_CAPACITY = 64


class HostSlots:
    def __init__(self, shapes: dict[str, tuple[int, ...]], dtypes: dict[str, np.dtype]):
        self.shapes, self.dtypes = dict(shapes), dict(dtypes)
        self.arrays = {n: np.zeros((_FIRST_CAPACITY, *s), dtypes[n]) for n, s in shapes.items()}
        self._free = list(range(_FIRST_CAPACITY - 1, -1, -1))

    @property
    def capacity(self) -> int:
        return len(next(iter(self.arrays.values()))) if self.arrays else 0

    def allocate(self) -> int:
        if not self._free:
            old = self.capacity
            for n, a in self.arrays.items():
                grown = np.zeros((2 * old, *a.shape[1:]), a.dtype)
                grown[:old] = a
                self.arrays[n] = grown
            self._free = list(range(2 * old - 1, old - 1, -1))
        return self._free.pop()

    def free(self, slot: int) -> None:
        self._free.append(slot)

    def write(self, slot: int, values: dict[str, np.ndarray]) -> None:
        for n, v in values.items():
            self.arrays[n][slot] = v

    def read(self, slot: int) -> dict[str, np.ndarray]:
        return {n: a[slot].copy() for n, a in self.arrays.items()}

    def gather(self, slots: list[int], axes: dict[str, int | None]) -> dict[str, np.ndarray]:
        """The states of these streams, stacked on each input's batch axis (one stream: its own row)."""
        if len(slots) == 1:
            return {n: a[slots[0]] for n, a in self.arrays.items()}  # a view: rows are contiguous
        idx = np.asarray(slots)
        out = {}
        for n, a in self.arrays.items():
            axis = axes[n]
            rows = a[idx]  # [n, *shape] with 1 on `axis + 1`
            out[n] = np.ascontiguousarray(np.moveaxis(rows.reshape(rows.shape[0], *_without(self.shapes[n], axis)),
                                                      0, axis))
        return out

    def scatter(self, slots: list[int], values: dict[str, np.ndarray], axes: dict[str, int | None]) -> None:
        """New states in the batch layout (one stream: its own shape) back into these streams' rows."""
        if len(slots) == 1:
            self.write(slots[0], values)
            return
        idx = np.asarray(slots)
        for n, v in values.items():
            self.arrays[n][idx] = np.moveaxis(v, axes[n], 0).reshape(len(slots), *self.shapes[n])


def _without(shape: tuple[int, ...], axis: int) -> tuple[int, ...]:
    return shape[:axis] + shape[axis + 1:]
