"""ONNX LSTM weights <-> FusedLSTM's kernel-ready layout (docs/ops.md), and its sizes.

Per layer and direction: W is [I+H, 4H] row-major (input rows, then recurrent rows), column
4*j+g holding gate g (ONNX order i, o, f, c) of unit j; B is Wb+Rb in the same column order;
P stays in ONNX order (i, o, f blocks).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass
class LayerWeights:
    """One ONNX LSTM layer: W [D,4H,I], R [D,4H,H], optional B [D,8H] and P [D,3H]."""

    W: np.ndarray
    R: np.ndarray
    B: np.ndarray | None = None
    P: np.ndarray | None = None

    @property
    def num_directions(self) -> int:
        return self.W.shape[0]

    @property
    def hidden_size(self) -> int:
        return self.R.shape[-1]

    @property
    def input_size(self) -> int:
        return self.W.shape[-1]


def _block_gates(interleaved: np.ndarray, hidden: int) -> np.ndarray:
    """[..., 4H] with the 4 gates of each unit adjacent -> [..., 4H] with gate blocks."""
    lead = interleaved.shape[:-1]
    return interleaved.reshape(*lead, hidden, 4).swapaxes(-1, -2).reshape(*lead, 4 * hidden)


def layer_input_size(layer: int, D: int, I: int, H: int) -> int:
    return I if layer == 0 else D * H


def weight_offset(L: int, D: int, I: int, H: int, layer: int, direction: int) -> int:
    """Offset (elements) of block (layer, direction) in the packed W; (L, 0) gives its size."""
    blocks = sum(D * (layer_input_size(k, D, I, H) + H) * 4 * H for k in range(layer))
    return blocks + direction * (layer_input_size(layer, D, I, H) + H) * 4 * H


def weight_count(L: int, D: int, I: int, H: int) -> int:
    return weight_offset(L, D, I, H, L, 0)


def input_size_from_weight_count(count: int, L: int, D: int, H: int) -> int | None:
    """I such that weight_count(L, D, I, H) == count, or None when there is none."""
    upper = weight_count(L, D, 0, H) - D * H * 4 * H  # every layer but the first's input rows
    first = count - upper  # D * (I + H) * 4H
    if first <= 0 or first % (D * 4 * H):
        return None
    I = first // (D * 4 * H) - H
    return I if I > 0 else None


@dataclass
class PackedWeights:
    W: np.ndarray
    B: np.ndarray | None
    P: np.ndarray | None


def weight_block_sizes(layers: list[LayerWeights]) -> list[int]:
    """Elements each layer takes in the packed W."""
    return [layer.num_directions * (layer.input_size + layer.hidden_size) * 4 * layer.hidden_size for layer in layers]


def write_weights(out: np.ndarray, W: np.ndarray, R: np.ndarray) -> None:
    """One layer's packed W (all its directions) into the 1-D `out`, with no intermediate copy."""
    I, H = W.shape[2], R.shape[2]
    write_weight_rows(out, W, 0, I, H)
    write_weight_rows(out, R, I, I, H)


def write_weight_rows(out: np.ndarray, source: np.ndarray, first: int, I: int, H: int) -> None:  # noqa: E741
    """ONNX W (first = 0) or R (first = I) of one layer into its packed blocks in `out`: block d
    viewed as [K, H, 4] takes source[d] viewed as [4, H, n] transposed, at rows first.."""
    D, n = source.shape[0], source.shape[2]
    K = I + H
    rows = 64  # a few source rows at a time: twice as fast as one strided copy of the whole block
    for d in range(D):
        block = out[d * K * 4 * H:(d + 1) * K * 4 * H].reshape(K, H, 4)
        gates = source[d].reshape(4, H, n)
        for k in range(0, n, rows):
            block[first + k:first + min(k + rows, n)] = gates[:, :, k:k + rows].transpose(2, 1, 0)


def write_bias(out: np.ndarray, B: np.ndarray | None, D: int, H: int) -> None:
    """One layer's packed B (Wb + Rb per direction, in float32, gates interleaved) into `out`."""
    for d in range(D):
        view = out[d * 4 * H:(d + 1) * 4 * H].reshape(H, 4)
        if B is None:
            view[...] = 0
        else:
            b = B[d].astype(np.float32)
            view[...] = (b[:4 * H] + b[4 * H:]).reshape(4, H).T


def write_peepholes(out: np.ndarray, P: np.ndarray | None, D: int, H: int) -> None:
    out[:D * 3 * H] = 0 if P is None else P.reshape(D * 3 * H)


def pack_layers(layers: list[LayerWeights], dtype=np.float32) -> PackedWeights:
    """Pack a stack of layers; B and P are None when no layer has them."""
    if not layers:
        raise ValueError("pack_layers needs at least one layer")
    D, H = layers[0].num_directions, layers[0].hidden_size
    for k, layer in enumerate(layers):
        if layer.num_directions != D or layer.hidden_size != H:
            raise ValueError(f"layer {k}: directions/hidden size differ from layer 0")
        if k > 0 and layer.input_size != D * H:
            raise ValueError(f"layer {k}: input size {layer.input_size} is not D*H = {D * H}")
    L = len(layers)
    W = np.empty(sum(weight_block_sizes(layers)), dtype)
    B = np.empty(L * D * 4 * H, dtype) if any(layer.B is not None for layer in layers) else None
    P = np.empty(L * D * 3 * H, dtype) if any(layer.P is not None for layer in layers) else None
    offset = 0
    for k, (layer, size) in enumerate(zip(layers, weight_block_sizes(layers))):
        write_weights(W[offset:offset + size], layer.W, layer.R)
        offset += size
        if B is not None:
            write_bias(B[k * D * 4 * H:(k + 1) * D * 4 * H], layer.B, D, H)
        if P is not None:
            write_peepholes(P[k * D * 3 * H:(k + 1) * D * 3 * H], layer.P, D, H)
    return PackedWeights(W, B, P)


def unpack_layers(packed: PackedWeights, L: int, D: int, I: int, H: int) -> list[LayerWeights]:
    """ONNX weights of the layers a packed W/B/P holds. Packing keeps only Wb + Rb, so each
    layer's bias comes back as Wb = Wb + Rb and Rb = 0: the same network."""
    if packed.W.size != weight_count(L, D, I, H):
        raise ValueError(f"W has {packed.W.size} elements, not {weight_count(L, D, I, H)} for L={L} D={D} I={I} H={H}")
    layers = []
    for layer in range(L):
        In = layer_input_size(layer, D, I, H)
        Ws, Rs, Bs, Ps = [], [], [], []
        for d in range(D):
            start = weight_offset(L, D, I, H, layer, d)
            block = _block_gates(packed.W[start:start + (In + H) * 4 * H].reshape(In + H, 4 * H), H)
            Ws.append(block[:In].T)
            Rs.append(block[In:].T)
            k = layer * D + d
            if packed.B is not None:
                Bs.append(np.concatenate([_block_gates(packed.B[k * 4 * H:(k + 1) * 4 * H], H), np.zeros(4 * H)]))
            if packed.P is not None:
                Ps.append(packed.P[k * 3 * H:(k + 1) * 3 * H])
        stack = lambda parts: np.stack(parts).astype(np.float32) if parts else None  # noqa: E731
        layers.append(LayerWeights(W=stack(Ws), R=stack(Rs), B=stack(Bs), P=stack(Ps)))
    return layers
