"""Packed FusedLSTM weights as lazy tensors: packed only when the model is written, one tensor
at a time, each straight into its final array.

Rewriting thus never holds a second copy of every weight (a `check` packs nothing at all), and
writing holds at most one packed tensor beside the model being serialized.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx_ir as ir

from lstm_ort.ops.identity import onnx_type
from lstm_ort.ops.packing import write_bias, write_peepholes, write_scales, write_weight_rows


@dataclass
class LayerSource:
    """One ONNX LSTM layer's weights as they are in the model (read when packed). int8 weights
    (W and R int8 in ONNX order, zero point 0) carry their scales [D, 4H] in ONNX gate order."""

    W: ir.TensorProtocol
    R: ir.TensorProtocol
    B: ir.TensorProtocol | None
    P: ir.TensorProtocol | None
    W_scale: np.ndarray | None = None
    R_scale: np.ndarray | None = None

    @property
    def D(self) -> int:
        return int(self.W.shape[0])

    @property
    def H(self) -> int:
        return int(self.R.shape[2])

    @property
    def I(self) -> int:  # noqa: E743
        return int(self.W.shape[2])

    def size(self, part: str) -> int:
        if part == "W":
            return self.D * (self.I + self.H) * 4 * self.H
        return self.D * {"B": 4, "P": 3, "S": 8}[part] * self.H


class _WritesInto(ir.LazyTensor):
    """A 1-D lazy tensor that evaluates by writing itself into a fresh array (write_into)."""

    def __init__(self, size: int, dtype, name: str | None) -> None:
        self.np_dtype = np.dtype(dtype)
        super().__init__(self._tensor, dtype=ir.DataType(onnx_type(self.np_dtype)), shape=ir.Shape([size]), name=name)

    def _tensor(self) -> ir.Tensor:
        out = np.empty(self.shape[0], self.np_dtype)
        self.write_into(out)
        return ir.Tensor(out)

    def write_into(self, out: np.ndarray) -> None:
        raise NotImplementedError

    def tofile(self, file) -> None:
        """Its bytes into ``file`` a layer at a time (onnx-ir writes external data this way)."""
        for chunk in tensor_chunks(self):
            file.write(chunk)


class LazyPacked(_WritesInto):
    """One packed input (`part` W, B, P, or S for W_scale) of a FusedLSTM node holding `layers`."""

    def __init__(self, part: str, layers: list[LayerSource], dtype, name: str | None = None) -> None:
        self.part, self.layers = part, layers
        super().__init__(sum(layer.size(part) for layer in layers), dtype, name)

    def write_into(self, out: np.ndarray) -> None:
        offset = 0
        for layer in self.layers:
            size = layer.size(self.part)
            self._pack(layer, out[offset:offset + size])
            offset += size

    def chunks(self):
        """The packed tensor in pieces (one layer each), for writing without holding all of it."""
        for layer in self.layers:
            out = np.empty(layer.size(self.part), self.np_dtype)
            self._pack(layer, out)
            yield out
            del out  # before the next layer's is made

    def _pack(self, layer: LayerSource, view: np.ndarray) -> None:
        if self.part == "W":  # W's rows, then R's: one source read at a time
            write_weight_rows(view, layer.W.numpy(), 0, layer.I, layer.H)
            write_weight_rows(view, layer.R.numpy(), layer.I, layer.I, layer.H)
        elif self.part == "B":
            write_bias(view, None if layer.B is None else layer.B.numpy(), layer.D, layer.H)
        elif self.part == "S":
            write_scales(view, layer.W_scale, layer.R_scale, layer.D, layer.H)
        else:
            write_peepholes(view, None if layer.P is None else layer.P.numpy(), layer.D, layer.H)


class LazyConcat(_WritesInto):
    """1-D tensors one after another; an int part is that many zeros. Parts that can write
    themselves into the result (LazyPacked, LazyConcat) do, so nothing is packed twice."""

    def __init__(self, parts: list[ir.TensorProtocol | int], dtype, name: str | None = None) -> None:
        self.parts = parts
        super().__init__(sum(p if isinstance(p, int) else int(np.prod(p.shape.numpy())) for p in parts), dtype, name)

    def write_into(self, out: np.ndarray) -> None:
        offset = 0
        for part in self.parts:
            size = part if isinstance(part, int) else int(np.prod(part.shape.numpy()))
            view = out[offset:offset + size]
            if isinstance(part, int):
                view[...] = 0
            elif isinstance(part, (LazyPacked, LazyConcat)) and part.np_dtype == self.np_dtype:
                part.write_into(view)
            else:
                view[...] = part.numpy().reshape(-1)
            offset += size

    def chunks(self):
        for part in self.parts:
            if isinstance(part, int):
                yield np.zeros(part, self.np_dtype)
            elif isinstance(part, (LazyPacked, LazyConcat)):
                for chunk in part.chunks():
                    chunk = chunk.astype(self.np_dtype, copy=False)
                    yield chunk
                    del chunk  # a chunk is gone before the next is made
            else:
                yield part.numpy().reshape(-1).astype(self.np_dtype, copy=False)


def is_lazy(tensor) -> bool:
    return isinstance(tensor, (LazyPacked, LazyConcat))


def tensor_chunks(tensor: ir.TensorProtocol):
    """A tensor's (little-endian) bytes in pieces: lazily packed tensors a layer at a time."""
    if isinstance(tensor, (LazyPacked, LazyConcat)):
        for chunk in tensor.chunks():
            view = memoryview(np.ascontiguousarray(chunk.astype(chunk.dtype.newbyteorder("<"), copy=False))).cast("B")
            del chunk
            yield view
            del view  # a chunk is gone before the next is made
    else:
        yield tensor.tobytes()


def merged(parts: list[ir.TensorProtocol | int], dtype) -> ir.TensorProtocol:
    """The parts as one tensor: LazyPacked parts of one kind merge into one LazyPacked over all
    their layers; anything else becomes a LazyConcat."""
    if parts and all(isinstance(p, LazyPacked) for p in parts):
        kinds = {(p.part, p.np_dtype) for p in parts}
        if len(kinds) == 1:
            return LazyPacked(parts[0].part, [layer for p in parts for layer in p.layers], dtype)
    return LazyConcat(parts, dtype)
