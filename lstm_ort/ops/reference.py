"""A readable reference of FusedLSTM (docs/ops.md) for ``onnx.reference.ReferenceEvaluator``.

    from onnx.reference import ReferenceEvaluator
    from lstm_ort.ops.reference import FusedLSTM
    ReferenceEvaluator(optimized_model, new_ops=[FusedLSTM]).run(None, feeds)

Written for clarity, not speed: one layer, direction, batch entry and step at a time, in float64,
with the semantics stock onnxruntime gives where the ONNX spec leaves room (clip, activation
defaults, sequences of length 0). The C++ kernels are tested against stock onnxruntime; this
lets tests check the contract, and optimized models run, without the op library.

The ``precision`` attribute is checked (an unknown mode is an error, as in the kernels) and
otherwise ignored: float64 arithmetic is within every mode's bound (docs/ops.md, "Precision modes").

A node with int8 ``W`` (docs/ops.md, "int8 weights") runs its quantized semantics instead, in
float32 as the kernel and onnxruntime's DynamicQuantizeLSTM compute it: the activations' levels
and the integer products are exact, so only the float arithmetic around them differs.
"""

from __future__ import annotations

import numpy as np
from onnx.reference.op_run import OpRun

from lstm_ort.ops.identity import DOMAIN, Precision, num_directions
from lstm_ort.ops.packing import (NO_RANKS, PackedWeights, Ranks, input_size_from_weight_count, unpack_int8_layers,
                                  unpack_layers)

# name -> (function of x, alpha, beta; takes alpha; takes beta; default alpha; default beta)
_ACTIVATIONS = {
    "sigmoid": (lambda x, a, b: 1 / (1 + np.exp(-x)), False, False, 0.0, 0.0),
    "tanh": (lambda x, a, b: np.tanh(x), False, False, 0.0, 0.0),
    "relu": (lambda x, a, b: np.maximum(x, 0), False, False, 0.0, 0.0),
    "affine": (lambda x, a, b: a * x + b, True, True, 0.0, 0.0),
    "leakyrelu": (lambda x, a, b: np.where(x >= 0, x, a * x), True, False, 0.01, 0.0),
    "thresholdedrelu": (lambda x, a, b: np.where(x > a, x, 0.0), True, False, 0.0, 0.0),
    "scaledtanh": (lambda x, a, b: a * np.tanh(b * x), True, True, 0.0, 0.0),
    "hardsigmoid": (lambda x, a, b: np.clip(a * x + b, 0, 1), True, True, 0.2, 0.5),
    "elu": (lambda x, a, b: np.where(x >= 0, x, a * (np.exp(x) - 1)), True, False, 1.0, 0.0),
    "softsign": (lambda x, a, b: x / (1 + np.abs(x)), False, False, 0.0, 0.0),
    "softplus": (lambda x, a, b: np.log1p(np.exp(x)), False, False, 0.0, 0.0),
}


def resolve_activations(names: list[str], alphas: list[float], betas: list[float]):
    """Functions of x for each name; alphas and betas are consumed in order by the activations
    that take them, as stock onnxruntime does, missing ones taking its defaults."""
    alphas, betas, out = list(alphas), list(betas), []
    for name in names:
        fn, takes_alpha, takes_beta, alpha, beta = _ACTIVATIONS[name.strip().lower()]
        if takes_alpha and alphas:
            alpha = alphas.pop(0)
        if takes_beta and betas:
            beta = betas.pop(0)
        out.append(lambda x, fn=fn, a=alpha, b=beta: fn(x, a, b))
    return out


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class FusedLSTM(OpRun):
    op_domain = DOMAIN

    def _run(self, X, W, B=None, sequence_lens=None, initial_h=None, initial_c=None, P=None, factors=None,
             W_scale=None, *, hidden_size=None, num_layers=1, direction="forward", layout=0, clip=None,
             input_forget=0, activations=None, activation_alpha=None, activation_beta=None, strategy=None,
             tuned=None, rank_input=None, rank_recurrent=None, precision=None, int8_scales=None):
        if precision is not None:
            Precision.parse(_text(precision), "attribute precision")
        H, L = int(hidden_size), int(num_layers)
        direction = _text(direction)
        D = num_directions(direction)
        x = X if layout == 0 else X.swapaxes(0, 1)  # [T, B, I]
        T, batch, I = x.shape
        if (W.dtype == np.int8) != (W_scale is not None):
            raise ValueError("W_scale goes with int8 W, and int8 W needs W_scale")
        ranks = Ranks(tuple(rank_input or ()), tuple(rank_recurrent or ())) if rank_input or rank_recurrent \
            else NO_RANKS
        n_factors = 0 if factors is None else factors.size
        if input_size_from_weight_count(W.size, L, D, H, ranks, n_factors) != I:
            raise ValueError(f"W has {W.size} elements (factors {n_factors}), which does not fit L={L} D={D} I={I} "
                             f"H={H}" + (f" and ranks {ranks}" if ranks.any else ""))
        names = _text(activations).split(",") if activations else ["Sigmoid", "Tanh", "Tanh"] * D
        acts = resolve_activations(names, activation_alpha or [], activation_beta or [])
        lens = np.full(batch, T) if sequence_lens is None else np.asarray(sequence_lens)
        states = lambda s: None if s is None else (s if layout == 0 else s.swapaxes(0, 1))  # noqa: E731
        h0, c0 = states(initial_h), states(initial_c)
        if W.dtype == np.int8:
            if ranks.any:
                raise ValueError("int8 weights cannot be factored")
            layers = unpack_int8_layers(PackedWeights(W, B, P, scales=W_scale), L, D, I, H)
            per_row = _text(int8_scales) == "row" if int8_scales is not None else False
            y, y_h, y_c = _int8_stack(x, layers, lens, h0, c0, acts, direction, clip, input_forget, per_row)
            if layout == 1:
                y, y_h, y_c = y.transpose(2, 0, 1, 3), y_h.swapaxes(0, 1), y_c.swapaxes(0, 1)
            return y, y_h, y_c
        layers = unpack_layers(PackedWeights(W, B, P, factors if ranks.any else None, ranks), L, D, I, H)

        layer_in = x.astype(np.float64)
        y = y_h = y_c = None
        Y_h, Y_c = np.zeros((L * D, batch, H)), np.zeros((L * D, batch, H))
        for l, weights in enumerate(layers):
            y = np.zeros((T, D, batch, H))
            for d in range(D):
                k = l * D + d
                f, g, h = acts[3 * d:3 * d + 3]
                reverse = direction == "reverse" or d == 1
                for b in range(batch):
                    n = int(lens[b])
                    hs = np.zeros(H) if h0 is None else h0[k, b].astype(np.float64)
                    cs = np.zeros(H) if c0 is None else c0[k, b].astype(np.float64)
                    for s in range(n):
                        t = n - 1 - s if reverse else s
                        hs, cs = self._cell(weights, d, layer_in[t, b], hs, cs, f, g, h, clip, input_forget)
                        y[t, d, b] = hs
                    if n > 0:  # a sequence of length 0 ends in zero states, as stock onnxruntime gives
                        Y_h[k, b], Y_c[k, b] = hs, cs
            layer_in = y.transpose(0, 2, 1, 3).reshape(T, batch, D * H)
        y_h, y_c = Y_h, Y_c
        if layout == 1:
            y, y_h, y_c = y.transpose(2, 0, 1, 3), y_h.swapaxes(0, 1), y_c.swapaxes(0, 1)
        return tuple(a.astype(X.dtype) for a in (y, y_h, y_c))

    @staticmethod
    def _cell(weights, d, x, h_prev, c_prev, f, g, h, clip, input_forget):
        """One step of ONNX LSTM's equations for one batch entry (gates in ONNX order i, o, f, c). A
        factored part multiplies through its rank-r bottleneck: U @ (V @ x)."""
        H = h_prev.shape[0]

        def product(part, whole, v):
            f = weights.factors(part, d)
            return whole[d] @ v if f is None else f.U.astype(np.float64) @ (f.V.astype(np.float64) @ v)

        gates = product("input", weights.W, x) + product("recurrent", weights.R, h_prev)
        if weights.B is not None:
            gates = gates + weights.B[d][:4 * H] + weights.B[d][4 * H:]
        gi, go, gf, gc = np.split(gates, 4)
        pi, po, pf = np.split(weights.P[d], 3) if weights.P is not None else (0, 0, 0)
        clipped = (lambda v: np.clip(v, -clip, clip)) if clip is not None else (lambda v: v)
        i = f(clipped(gi + pi * c_prev))
        forget = 1 - i if input_forget else f(clipped(gf + pf * c_prev))
        c = forget * c_prev + i * g(clipped(gc))
        o = f(clipped(go + po * c))
        return o * h(c), c


# ---- int8 weights ----

def activation_quantization(x: np.ndarray) -> tuple[np.float32, np.float32]:
    """Scale and zero point of uint8 levels for all of x, its range widened to hold 0, as
    onnxruntime quantizes DynamicQuantizeLSTM's activations."""
    x = np.asarray(x, np.float32)
    lo = np.float32(min(float(np.nanmin(x, initial=0.0)), 0.0))
    hi = np.float32(max(float(np.nanmax(x, initial=0.0)), 0.0))
    scale = np.float32(1) if hi == lo else np.float32((hi - lo) / np.float32(255))
    return scale, np.round(np.clip(np.float32(0) - lo / scale, 0, 255))


def activation_levels(x: np.ndarray, scale: np.float32, zero_point: np.float32) -> np.ndarray:
    """x's uint8 levels minus the zero point (int64): round half to even of x / scale (divided, not
    multiplied by the reciprocal), clamped to the levels; a NaN takes the lowest."""
    levels = np.nan_to_num(np.round(np.asarray(x, np.float32) / scale), nan=-np.inf)
    return np.clip(levels, -zero_point, 255 - zero_point).astype(np.int64)


def _int8_product(x: np.ndarray, range_of: np.ndarray, weights: np.ndarray, scales: np.ndarray) -> np.ndarray:
    """x [n, K] quantized with one scale for the values of `range_of`, times int8 weights [4H, K]
    with per-row scales: float32."""
    scale, zero_point = activation_quantization(range_of)
    levels = activation_levels(x, scale, zero_point)
    return (levels @ weights.T.astype(np.int64)).astype(np.float32) * (scale * scales.astype(np.float32))


def _int8_rows(x: np.ndarray, weights: np.ndarray, scales: np.ndarray) -> np.ndarray:
    """x [n, K], each row quantized with its own scale (int8_scales "row"), times int8 weights."""
    return np.concatenate([_int8_product(r[None], r, weights, scales) for r in x]) if len(x) \
        else np.zeros((0, weights.shape[0]), np.float32)


def _int8_stack(x, layers, lens, h0, c0, acts, direction, clip, input_forget, per_row=False):
    """Y [T, D, B, H], Y_h and Y_c [L*D, B, H] (layout 0) of int8 layers, every batch entry of a step
    together: h is quantized per step over the rows that ran the step before (every row at the
    first step), as onnxruntime gives it; ``per_row`` (int8_scales "row"): each row of the input at
    each step, and each row's h, with its own scale."""
    T, batch, _ = x.shape
    D, H = layers[0].W.shape[0], layers[0].R.shape[2]
    steps = int(lens.max(initial=0))
    running = lambda s: np.flatnonzero(lens > s)  # noqa: E731
    layer_in = x.astype(np.float32)
    Y_h, Y_c = np.zeros((len(layers) * D, batch, H), np.float32), np.zeros((len(layers) * D, batch, H), np.float32)
    y = None
    for l, layer in enumerate(layers):
        y = np.zeros((T, D, batch, H), np.float32)
        flat = layer_in[:steps].reshape(steps * batch, layer_in.shape[2])
        for d in range(D):
            k = l * D + d
            f, g, h_act = acts[3 * d:3 * d + 3]
            bias = np.zeros(4 * H, np.float32) if layer.B is None else (layer.B[d][:4 * H] + layer.B[d][4 * H:])
            product = _int8_rows(flat, layer.W[d], layer.W_scale[d]) if per_row else \
                _int8_product(flat, flat, layer.W[d], layer.W_scale[d])
            gx = product.reshape(steps, batch, 4 * H) + bias
            h = np.zeros((batch, H), np.float32) if h0 is None else h0[k].astype(np.float32)
            c = np.zeros((batch, H), np.float32) if c0 is None else c0[k].astype(np.float32)
            pi, po, pf = np.split(layer.P[d], 3) if layer.P is not None else (0, 0, 0)
            clipped = (lambda v: np.clip(v, -clip, clip)) if clip is not None else (lambda v: v)
            reverse = direction == "reverse" or d == 1
            for s in range(steps):
                rows = running(s)
                t = lens[rows] - 1 - s if reverse else np.full(rows.size, s)
                gates = gx[t, rows]
                if s > 0 or h0 is not None:  # rows that ended before step s - 1 count as zeros
                    gates = gates + (_int8_rows(h[rows], layer.R[d], layer.R_scale[d]) if per_row else
                                     _int8_product(h[rows], h[lens >= s], layer.R[d], layer.R_scale[d]))
                gi, go, gf, gc = np.split(gates, 4, axis=1)
                c_prev = c[rows]
                i = f(clipped(gi + pi * c_prev))
                forget = 1 - i if input_forget else f(clipped(gf + pf * c_prev))
                c_new = (forget * c_prev + i * g(clipped(gc))).astype(np.float32)
                o = f(clipped(go + po * c_new))
                h[rows], c[rows] = (o * h_act(c_new)).astype(np.float32), c_new
                y[t, d, rows] = h[rows]
            ended = lens > 0  # a sequence of length 0 ends in zero states
            Y_h[k], Y_c[k] = np.where(ended[:, None], h, 0), np.where(ended[:, None], c, 0)
        layer_in = y.transpose(0, 2, 1, 3).reshape(T, batch, D * H)
    return y, Y_h, Y_c
