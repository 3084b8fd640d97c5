"""ONNX LSTM weights <-> FusedLSTM's kernel-ready layout (docs/ops.md), and its sizes.

Per layer and direction: W is [I+H, 4H] row-major (input rows, then recurrent rows), column
4*j+g holding gate g (ONNX order i, o, f, c) of unit j; B is Wb+Rb in the same column order;
P stays in ONNX order (i, o, f blocks).

Factored weights (attributes rank_input / rank_recurrent, input ``factors``): a part with rank r of
a layer and direction leaves W, whose block then holds only its other rows, and stands in
``factors`` as A [rows, r] then B [r, 4H] (B's columns as W's), A @ B being the rows it replaces;
per (layer, direction), input factors first, then recurrent factors. This module is the one place
Python packs and unpacks them; custom_ops/include/lstm_ort/contract.h (WeightLayout) mirrors the
offsets, and tests/test_op_identity.py holds the two together.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass
class Factors:
    """One factored matrix in ONNX terms: M ~ U @ V, for M an ONNX W[d] [4H, I] or R[d] [4H, H]
    (rows in ONNX gate blocks i, o, f, c)."""

    U: np.ndarray  # [4H, r]
    V: np.ndarray  # [r, n]

    @property
    def rank(self) -> int:
        return self.U.shape[1]

    def product(self) -> np.ndarray:
        return self.U @ self.V


@dataclass
class LayerWeights:
    """One ONNX LSTM layer: W [D,4H,I], R [D,4H,H], optional B [D,8H] and P [D,3H]. W_factors /
    R_factors (one entry per direction, None = whole) replace W[d] / R[d] where set."""

    W: np.ndarray
    R: np.ndarray
    B: np.ndarray | None = None
    P: np.ndarray | None = None
    W_factors: list[Factors | None] | None = None
    R_factors: list[Factors | None] | None = None

    @property
    def num_directions(self) -> int:
        return self.W.shape[0]

    @property
    def hidden_size(self) -> int:
        return self.R.shape[-1]

    @property
    def input_size(self) -> int:
        return self.W.shape[-1]

    def factors(self, part: str, d: int) -> Factors | None:
        """Direction d's factors of W (part "input") or R ("recurrent"), or None."""
        found = self.W_factors if part == "input" else self.R_factors
        return found[d] if found else None


@dataclass(frozen=True)
class Ranks:
    """Ranks of the factored parts per (layer, direction) k = l*D + d, as the attributes
    rank_input and rank_recurrent hold them; 0 (or an empty tuple) keeps that part whole in W."""

    input: tuple[int, ...] = ()
    recurrent: tuple[int, ...] = ()

    def of(self, part: str, k: int) -> int:
        ranks = self.input if part == "input" else self.recurrent
        return int(ranks[k]) if ranks else 0

    @property
    def any(self) -> bool:
        return any(self.input) or any(self.recurrent)


NO_RANKS = Ranks()
PARTS = ("input", "recurrent")


def _block_gates(interleaved: np.ndarray, hidden: int) -> np.ndarray:
    """[..., 4H] with the 4 gates of each unit adjacent -> [..., 4H] with gate blocks."""
    lead = interleaved.shape[:-1]
    return interleaved.reshape(*lead, hidden, 4).swapaxes(-1, -2).reshape(*lead, 4 * hidden)


def layer_input_size(layer: int, D: int, I: int, H: int) -> int:
    return I if layer == 0 else D * H


def block_rows(D: int, I: int, H: int, layer: int, direction: int, ranks: Ranks = NO_RANKS) -> tuple[int, int]:
    """Rows of W block (layer, direction) from the input and from the recurrence: a factored
    part has none there."""
    k = layer * D + direction
    return (0 if ranks.of("input", k) else layer_input_size(layer, D, I, H)), (0 if ranks.of("recurrent", k) else H)


def factor_block_size(D: int, I: int, H: int, layer: int, direction: int, ranks: Ranks) -> int:
    """Elements of (layer, direction)'s factors: A [rows, r] and B [r, 4H] per factored part."""
    k = layer * D + direction
    return (ranks.of("input", k) * (layer_input_size(layer, D, I, H) + 4 * H)
            + ranks.of("recurrent", k) * (H + 4 * H))


def weight_offset(L: int, D: int, I: int, H: int, layer: int, direction: int, ranks: Ranks = NO_RANKS) -> int:
    """Offset (elements) of block (layer, direction) in the packed W; (L, 0) gives its size."""
    return sum(sum(block_rows(D, I, H, k // D, k % D, ranks)) * 4 * H for k in range(layer * D + direction))


def weight_count(L: int, D: int, I: int, H: int, ranks: Ranks = NO_RANKS) -> int:
    return weight_offset(L, D, I, H, L, 0, ranks)


def factor_offset(L: int, D: int, I: int, H: int, layer: int, direction: int, part: str, ranks: Ranks) -> int:
    """Offset in `factors` of (layer, direction)'s factors of `part` (A, then B); (L, 0) gives the
    element count of `factors` whatever the part."""
    offset = sum(factor_block_size(D, I, H, k // D, k % D, ranks) for k in range(layer * D + direction))
    if part == "recurrent" and layer < L:
        offset += ranks.of("input", layer * D + direction) * (layer_input_size(layer, D, I, H) + 4 * H)
    return offset


def factor_count(L: int, D: int, I: int, H: int, ranks: Ranks) -> int:
    return factor_offset(L, D, I, H, L, 0, "input", ranks)


def input_size_from_weight_count(count: int, L: int, D: int, H: int, ranks: Ranks = NO_RANKS,
                                 factors: int = 0) -> int | None:
    """I such that W holds `count` elements and `factors` holds `factors` elements, or None when
    there is none: both counts are affine in I (as InputSizeFromCounts in contract.h)."""
    w0, w1 = weight_count(L, D, 0, H, ranks), weight_count(L, D, 1, H, ranks)
    f0, f1 = factor_count(L, D, 0, H, ranks), factor_count(L, D, 1, H, ranks)
    slope, base, given = (w1 - w0, w0, count) if w1 > w0 else (f1 - f0, f0, factors)
    if slope <= 0 or given - base <= 0 or (given - base) % slope:
        return None
    I = (given - base) // slope
    ok = weight_count(L, D, I, H, ranks) == count and factor_count(L, D, I, H, ranks) == factors
    return I if ok else None


@dataclass
class PackedWeights:
    W: np.ndarray
    B: np.ndarray | None
    P: np.ndarray | None
    factors: np.ndarray | None = None  # with ranks that name factored parts
    ranks: Ranks = NO_RANKS
    scales: np.ndarray | None = None  # W_scale, with int8 W


def layer_ranks(layers: list[LayerWeights]) -> Ranks:
    """The attributes' ranks for layers that may carry factors."""
    D = layers[0].num_directions
    ranks = {part: tuple(f.rank if (f := layer.factors(part, d)) is not None else 0 for layer in layers
                         for d in range(D)) for part in PARTS}
    if not any(any(r) for r in ranks.values()):
        return NO_RANKS
    return Ranks(**ranks)


def weight_block_sizes(layers: list[LayerWeights]) -> list[int]:
    """Elements each layer takes in the packed W (factored parts take none)."""
    sizes = []
    for layer in layers:
        H = layer.hidden_size
        sizes.append(sum(((layer.factors("input", d) is None) * layer.input_size
                          + (layer.factors("recurrent", d) is None) * H) * 4 * H
                         for d in range(layer.num_directions)))
    return sizes


def write_weights(out: np.ndarray, W: np.ndarray, R: np.ndarray) -> None:
    """One layer's packed W (all its directions) into the 1-D `out`, with no intermediate copy."""
    I, H = W.shape[2], R.shape[2]
    write_weight_rows(out, W, 0, I, H)
    write_weight_rows(out, R, I, I, H)


def write_weight_rows(out: np.ndarray, source: np.ndarray, first: int, I: int, H: int,  # noqa: E741
                      K: int | None = None) -> None:
    """ONNX W (first = 0) or R (first = I) of one layer into its packed blocks in `out`: block d
    viewed as [K, H, 4] (K = I + H unless given) takes source[d] viewed as [4, H, n] transposed,
    at rows first.."""
    D, n = source.shape[0], source.shape[2]
    K = I + H if K is None else K
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


def write_factored_layer(out: np.ndarray, factors_out: np.ndarray, layer: LayerWeights) -> None:
    """A layer with factored parts: each direction's W block holds its whole parts' rows, and
    `factors_out` (the layer's stretch of `factors`) its factored parts' A and B."""
    I, H, D = layer.input_size, layer.hidden_size, layer.num_directions
    w_at = f_at = 0
    for d in range(D):
        whole = [(part, source) for part, source in (("input", layer.W), ("recurrent", layer.R))
                 if layer.factors(part, d) is None]
        K = sum(source.shape[2] for _, source in whole)
        row = 0
        for _, source in whole:
            write_weight_rows(out[w_at:w_at + K * 4 * H], source[d:d + 1], row, 0, H, K=K)
            row += source.shape[2]
        w_at += K * 4 * H
        for part in PARTS:
            f = layer.factors(part, d)
            if f is None:
                continue
            r, n = f.rank, f.V.shape[1]
            factors_out[f_at:f_at + n * r] = f.V.T.reshape(-1)  # A = V^T [n, r]
            f_at += n * r
            # B = U^T [r, 4H], its columns interleaved as W's: B[k, 4j + g] = U[g*H + j, k].
            factors_out[f_at:f_at + r * 4 * H] = f.U.T.reshape(r, 4, H).transpose(0, 2, 1).reshape(-1)
            f_at += r * 4 * H


def pack_layers(layers: list[LayerWeights], dtype=np.float32, weight_dtype=None) -> PackedWeights:
    """Pack a stack of layers; B and P are None when no layer has them, factors None (and ranks
    NO_RANKS) when no layer carries factors. W is of `weight_dtype` where given (int8 weights)."""
    if not layers:
        raise ValueError("pack_layers needs at least one layer")
    D, H = layers[0].num_directions, layers[0].hidden_size
    for k, layer in enumerate(layers):
        if layer.num_directions != D or layer.hidden_size != H:
            raise ValueError(f"layer {k}: directions/hidden size differ from layer 0")
        if k > 0 and layer.input_size != D * H:
            raise ValueError(f"layer {k}: input size {layer.input_size} is not D*H = {D * H}")
    L = len(layers)
    ranks = layer_ranks(layers)
    W = np.empty(sum(weight_block_sizes(layers)), weight_dtype or dtype)
    B = np.empty(L * D * 4 * H, dtype) if any(layer.B is not None for layer in layers) else None
    P = np.empty(L * D * 3 * H, dtype) if any(layer.P is not None for layer in layers) else None
    I = layers[0].input_size
    factors = np.empty(factor_count(L, D, I, H, ranks), dtype) if ranks.any else None
    offset = 0
    for k, (layer, size) in enumerate(zip(layers, weight_block_sizes(layers))):
        if ranks.any:
            f_at, f_end = factor_offset(L, D, I, H, k, 0, "input", ranks), factor_offset(L, D, I, H, k + 1, 0, "input", ranks)
            write_factored_layer(W[offset:offset + size], factors[f_at:f_end], layer)
        else:
            write_weights(W[offset:offset + size], layer.W, layer.R)
        offset += size
        if B is not None:
            write_bias(B[k * D * 4 * H:(k + 1) * D * 4 * H], layer.B, D, H)
        if P is not None:
            write_peepholes(P[k * D * 3 * H:(k + 1) * D * 3 * H], layer.P, D, H)
    return PackedWeights(W, B, P, factors, ranks)


def unpack_layers(packed: PackedWeights, L: int, D: int, I: int, H: int) -> list[LayerWeights]:
    """ONNX weights of the layers a packed W/B/P (and factors) holds. Packing keeps only Wb + Rb,
    so each layer's bias comes back as Wb = Wb + Rb and Rb = 0: the same network. A factored
    part comes back as its Factors, and W[d] / R[d] as their product."""
    ranks = packed.ranks
    if packed.W.size != weight_count(L, D, I, H, ranks):
        raise ValueError(f"W has {packed.W.size} elements, not {weight_count(L, D, I, H, ranks)} for "
                         f"L={L} D={D} I={I} H={H}")
    count = factor_count(L, D, I, H, ranks)
    if (0 if packed.factors is None else packed.factors.size) != count:
        raise ValueError(f"factors has {0 if packed.factors is None else packed.factors.size} elements, not {count} "
                         f"for L={L} D={D} I={I} H={H} and ranks {ranks}")
    layers = []
    for layer in range(L):
        In = layer_input_size(layer, D, I, H)
        Ws, Rs, Bs, Ps = [], [], [], []
        found = {part: [] for part in PARTS}
        for d in range(D):
            start = weight_offset(L, D, I, H, layer, d, ranks)
            rows_x, rows_h = block_rows(D, I, H, layer, d, ranks)
            block = _block_gates(packed.W[start:start + (rows_x + rows_h) * 4 * H].reshape(rows_x + rows_h, 4 * H), H)
            k = layer * D + d
            for part, n, rows in (("input", In, block[:rows_x]), ("recurrent", H, block[rows_x:])):
                r = ranks.of(part, k)
                if r:
                    at = factor_offset(L, D, I, H, layer, d, part, ranks)
                    V = packed.factors[at:at + n * r].reshape(n, r).T
                    U = _block_gates(packed.factors[at + n * r:at + n * r + r * 4 * H].reshape(r, 4 * H), H).T
                    f = Factors(U.astype(np.float32), V.astype(np.float32))
                    found[part].append(f)
                    rows = f.product().T
                else:
                    found[part].append(None)
                (Ws if part == "input" else Rs).append(rows.T)
            if packed.B is not None:
                Bs.append(np.concatenate([_block_gates(packed.B[k * 4 * H:(k + 1) * 4 * H], H), np.zeros(4 * H)]))
            if packed.P is not None:
                Ps.append(packed.P[k * 3 * H:(k + 1) * 3 * H])
        stack = lambda parts: np.stack(parts).astype(np.float32) if parts else None  # noqa: E731
        some = lambda fs: fs if any(f is not None for f in fs) else None  # noqa: E731
        layers.append(LayerWeights(W=stack(Ws), R=stack(Rs), B=stack(Bs), P=stack(Ps),
                                   W_factors=some(found["input"]), R_factors=some(found["recurrent"])))
    return layers


# ---- int8 weights (docs/ops.md, "int8 weights") ----
# W of type int8 in the layout above (its zero point 0), and W_scale float32: per (layer,
# direction), the input rows' 4H scales then the recurrent rows' 4H, in W's column order (4j + g).

@dataclass
class Int8Layer:
    """One layer's int8 weights in ONNX terms: W [D, 4H, I] and R [D, 4H, H] int8 (zero point 0),
    their scales [D, 4H] per output row (a per-tensor scale repeated), B and P float32."""

    W: np.ndarray
    R: np.ndarray
    W_scale: np.ndarray
    R_scale: np.ndarray
    B: np.ndarray | None = None
    P: np.ndarray | None = None

    def dequantized(self) -> LayerWeights:
        """The float layer these weights stand for (each row times its scale)."""
        return LayerWeights(W=self.W.astype(np.float32) * self.W_scale[:, :, None],
                            R=self.R.astype(np.float32) * self.R_scale[:, :, None], B=self.B, P=self.P)


def weight_scale_count(L: int, D: int, H: int) -> int:
    return L * D * 2 * 4 * H


def write_scales(out: np.ndarray, W_scale: np.ndarray, R_scale: np.ndarray, D: int, H: int) -> None:
    """One layer's W_scale (all its directions) into `out`: per direction, W's then R's, in W's column order."""
    for d in range(D):
        for part, scale in enumerate((W_scale, R_scale)):
            at = (2 * d + part) * 4 * H
            out[at:at + 4 * H] = np.asarray(scale[d], np.float32).reshape(4, H).T.reshape(-1)


def pack_int8_layers(layers: list[Int8Layer]) -> PackedWeights:
    """Pack a stack of int8 layers: W int8, B and P float32 (None where no layer has them), the
    scales in `scales`."""
    packed = pack_layers([LayerWeights(W=layer.W, R=layer.R, B=layer.B, P=layer.P) for layer in layers], np.float32,
                         weight_dtype=np.int8)
    D, H = layers[0].W.shape[0], layers[0].R.shape[2]
    packed.scales = np.empty(weight_scale_count(len(layers), D, H), np.float32)
    for k, layer in enumerate(layers):
        write_scales(packed.scales[k * D * 8 * H:(k + 1) * D * 8 * H], layer.W_scale, layer.R_scale, D, H)
    return packed


def unpack_int8_layers(packed: PackedWeights, L: int, D: int, I: int, H: int) -> list[Int8Layer]:
    """The int8 layers a packed int8 W (with its scales, B and P) holds."""
    if packed.scales is None or packed.scales.size != weight_scale_count(L, D, H):
        raise ValueError(f"W_scale has {0 if packed.scales is None else packed.scales.size} elements, not "
                         f"{weight_scale_count(L, D, H)} for L={L} D={D} H={H}")
    floats = unpack_layers(PackedWeights(packed.W.astype(np.float32), packed.B, packed.P), L, D, I, H)
    out = []
    for k, layer in enumerate(floats):
        block = packed.scales[k * D * 8 * H:(k + 1) * D * 8 * H].reshape(D, 2, 4 * H)
        scales = [_block_gates(block[:, part], H).astype(np.float32) for part in range(2)]
        out.append(Int8Layer(W=layer.W.astype(np.int8), R=layer.R.astype(np.int8), W_scale=scales[0],
                             R_scale=scales[1], B=layer.B, P=layer.P))
    return out
