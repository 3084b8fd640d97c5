"""Models and feeds for the pipeline's tests and tools/bench_pipeline.py."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from lstm_ort.builders import LstmSpec, fused_model, random_layers
from lstm_ort.ops.identity import DOMAIN, OPSET_VERSION, is_fused


def stack(spec: LstmSpec, rng: np.random.Generator, **model_kw) -> onnx.ModelProto:
    """One FusedLSTM node (builders.fused_model) with random weights."""
    return fused_model(spec, random_layers(spec, rng), **model_kw)


def embedded_classifier(spec: LstmSpec, rng: np.random.Generator, vocab: int = 11, classes: int = 3,
                        with_states: bool = True) -> onnx.ModelProto:
    """tokens [T, B] (or [B, T]) -> Gather(embedding) -> FusedLSTM -> Y without the direction axis
    -> MatMul + Add -> LogSoftmax: logits per step; plus Y_h. Layout-0 bidirectional Y goes
    through Transpose + Reshape, as torch exports it."""
    base = stack(spec, rng)
    g = base.graph
    node = g.node[0]
    D, H = spec.num_directions, spec.hidden_size
    inits = list(g.initializer)
    inits.append(numpy_helper.from_array(rng.standard_normal((vocab, spec.input_size)).astype(np.float32), "emb"))
    inits.append(numpy_helper.from_array((rng.standard_normal((D * H, classes)) / np.sqrt(D * H)).astype(np.float32), "cls_w"))
    inits.append(numpy_helper.from_array(rng.standard_normal(classes).astype(np.float32), "cls_b"))
    nodes = [helper.make_node("Gather", ["emb", "tokens"], ["X"], name="embed")]
    fused = helper.make_node(node.op_type, list(node.input), ["Y", "Y_h" if with_states else ""], domain=DOMAIN,
                             name="stack")
    fused.attribute.extend(node.attribute)
    nodes.append(fused)
    if spec.layout == 0:
        nodes.append(helper.make_node("Transpose", ["Y"], ["Y_t"], perm=[0, 2, 1, 3]))
        inits.append(numpy_helper.from_array(np.array([0, 0, -1], np.int64), "flat"))
        nodes.append(helper.make_node("Reshape", ["Y_t", "flat"], ["Y_flat"]))
    else:
        inits.append(numpy_helper.from_array(np.array([0, 0, -1], np.int64), "flat"))
        nodes.append(helper.make_node("Reshape", ["Y", "flat"], ["Y_flat"]))
    nodes.append(helper.make_node("MatMul", ["Y_flat", "cls_w"], ["mm"]))
    nodes.append(helper.make_node("Add", ["mm", "cls_b"], ["pre"]))
    nodes.append(helper.make_node("LogSoftmax", ["pre"], ["logits"], axis=-1))
    tok_shape = ["T", "B"] if spec.layout == 0 else ["B", "T"]
    inputs = [helper.make_tensor_value_info("tokens", TensorProto.INT64, tok_shape)]
    outputs = [helper.make_tensor_value_info("logits", TensorProto.FLOAT, None)]
    if with_states:
        outputs.append(helper.make_tensor_value_info("Y_h", TensorProto.FLOAT, None))
    graph = helper.make_graph(nodes, "embedded_classifier", inputs, outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(DOMAIN, OPSET_VERSION)])
    model.ir_version = base.ir_version
    return model


def token_feeds(spec: LstmSpec, T: int, B: int, rng: np.random.Generator, vocab: int = 11) -> dict:
    shape = (T, B) if spec.layout == 0 else (B, T)
    return {"tokens": rng.integers(0, vocab, size=shape).astype(np.int64)}


# -- models as users export them ----------------------------------------------------------------

# "plain": no states, dynamic time and batch; "fixed_batch": no states, every shape fixed;
# "states": h0, c0 as inputs; "batch_first"; "bidirectional"; "tagger": embedding -> LSTM -> Linear
# -> LogSoftmax on every step; "last_step": embedding -> batch-first LSTM -> Linear on y[:, -1], and
# a second head on the last layer's final h (h_n[-1]); "learned_states": h0, c0 parameters expanded
# over the batch (computed in the graph from the input's shape).
TORCH_STYLES = ("plain", "fixed_batch", "states", "batch_first", "bidirectional", "tagger", "last_step",
                "learned_states")
EXPORTERS = ("torchscript", "dynamo")
VOCAB, CLASSES = 17, 5


def _torch_net(style: str, input_size: int, hidden: int, layers: int):
    import torch

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.batch_first = style in ("batch_first", "last_step")
            tokens = style in ("tagger", "last_step")
            self.embed = torch.nn.Embedding(VOCAB, input_size) if tokens else None
            self.lstm = torch.nn.LSTM(input_size, hidden, layers, batch_first=self.batch_first,
                                      bidirectional=style == "bidirectional")
            self.head = torch.nn.Linear(hidden, CLASSES) if tokens else None
            self.state_head = torch.nn.Linear(hidden, 2) if style == "last_step" else None
            if style == "learned_states":
                self.h0 = torch.nn.Parameter(torch.randn(layers, 1, hidden))
                self.c0 = torch.nn.Parameter(torch.randn(layers, 1, hidden))

        def forward(self, x, h0=None, c0=None):
            if self.embed is not None:
                x = self.embed(x)
            if style == "states":
                return self.lstm(x, (h0, c0))
            if style == "learned_states":
                batch = x.shape[1]
                return self.lstm(x, (self.h0.expand(-1, batch, -1).contiguous(),
                                     self.c0.expand(-1, batch, -1).contiguous()))
            y, (h, c) = self.lstm(x)
            if style == "tagger":
                return torch.log_softmax(self.head(y), dim=-1)
            if style == "last_step":
                return self.head(y[:, -1]), self.state_head(h[-1])
            return y, h, c

    return Net().eval()


def torch_feeds(style: str, batch: int, steps: int, *, input_size: int = 6, hidden: int = 8, layers: int = 3,
                seed: int = 0) -> dict:
    """Feeds for ``torch_export(style, ...)`` at any batch size and length."""
    rng = np.random.default_rng(seed)
    time_major = style not in ("batch_first", "last_step")
    shape = (steps, batch) if time_major else (batch, steps)
    if style in ("tagger", "last_step"):
        feeds = {"X": rng.integers(0, VOCAB, size=shape).astype(np.int64)}
    else:
        feeds = {"X": rng.standard_normal(shape + (input_size,)).astype(np.float32)}
    if style == "states":
        for name in ("h0", "c0"):
            feeds[name] = rng.standard_normal((layers, batch, hidden)).astype(np.float32)
    return feeds


def torch_export(style: str, exporter: str, *, input_size: int = 6, hidden: int = 8, layers: int = 3,
                 batch: int = 3, steps: int = 5, seed: int = 0) -> tuple[onnx.ModelProto, dict]:
    """A torch.nn.LSTM stack exported the way users export it (``torch.onnx.export`` with the
    TorchScript exporter, or ``dynamo=True``), time and batch dynamic unless the style is
    "fixed_batch", and feeds for it at the example's sizes (styles above: ``TORCH_STYLES``).
    Needs torch (the CPU build is enough)."""
    import io
    import warnings

    import torch

    torch.manual_seed(seed)
    net = _torch_net(style, input_size, hidden, layers)
    feeds = torch_feeds(style, batch, steps, input_size=input_size, hidden=hidden, layers=layers, seed=seed)
    args = tuple(torch.from_numpy(v) for v in feeds.values())
    outputs = {"tagger": ["logits"], "last_step": ["logits", "state_logits"]}.get(style, ["Y", "Y_h", "Y_c"])
    time_axis, batch_axis = (1, 0) if net.batch_first else (0, 1)
    kw = {}
    if style != "fixed_batch":
        if exporter == "dynamo":
            T, B = torch.export.Dim("T", min=2), torch.export.Dim("B", min=2)
            dims = {"x": {time_axis: T, batch_axis: B}}
            if style == "states":
                dims.update(h0={1: B}, c0={1: B})
            kw["dynamic_shapes"] = dims
        else:
            axes = {"X": {time_axis: "T", batch_axis: "B"}}
            if style == "states":
                axes.update(h0={1: "B"}, c0={1: "B"})
            kw["dynamic_axes"] = axes
    f = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(net, args, f, dynamo=exporter == "dynamo", input_names=list(feeds), output_names=outputs,
                          opset_version=18 if exporter == "dynamo" else 17, verbose=False, **kw)
    model = onnx.load_from_string(f.getvalue())
    model.ir_version = min(model.ir_version, 10)
    return model, feeds


def drop_initial_states(model: onnx.ModelProto) -> onnx.ModelProto:
    """The model with every FusedLSTM's initial_h / initial_c left out (zeros, by the op's
    contract) and the nodes that computed them removed: what the rewriter writes once it proves
    an exporter's computed states zero. Only for models whose states are zeros."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    g = out.graph
    for node in g.node:
        if is_fused(node):
            for k in (4, 5):
                if len(node.input) > k:
                    node.input[k] = ""
    used = {o.name for o in g.output}
    keep = []
    for node in reversed(list(g.node)):
        if any(o in used for o in node.output if o):
            keep.append(node)
            used.update(i for i in node.input if i)
    del g.node[:]
    g.node.extend(reversed(keep))
    kept_inits = [i for i in g.initializer if i.name in used]
    del g.initializer[:]
    g.initializer.extend(kept_inits)
    return out


def keras_stack(layers: int = 3, input_size: int = 6, hidden: int = 8, seed: int = 0, opset: int = 13) -> onnx.ModelProto:
    """A stack of Keras LSTM layers (return_sequences=True) as tf2onnx writes it
    (models/corpus.py ``keras_transpose_glue``, stacked): batch-major x [B, T, I] transposed to
    time-major before each LSTM, Y squeezed and transposed back after; the first layer's states
    from graph inputs h, c ([B, H], unsqueezed), the others' zeros filled from x's shape
    (Shape -> Gather -> Concat -> ConstantOfShape); outputs the last Y and the last layer's h, c.
    Below opset 13, Squeeze and Unsqueeze take their axes as attributes (tf2onnx at opset 11)."""
    rng = np.random.default_rng(seed)

    def squeeze(op, x, axis, out):
        if opset < 13:
            return helper.make_node(op, [x], [out], axes=[axis])
        return helper.make_node(op, [x, f"axis{axis}"], [out])

    s = 1 / np.sqrt(hidden)
    inits = [numpy_helper.from_array(np.array([k], np.int64), f"axis{k}") for k in (0, 1) if opset >= 13]
    inits += [numpy_helper.from_array(np.array([1], np.int64), "one"),
             numpy_helper.from_array(np.array([hidden], np.int64), "units"),
             numpy_helper.from_array(np.array(0, np.int64), "batch_dim")]
    nodes = [helper.make_node("Shape", ["x"], ["x_shape"]),
             helper.make_node("Gather", ["x_shape", "batch_dim"], ["batch"], axis=0),
             squeeze("Unsqueeze", "batch", 0, "batch_1"),
             helper.make_node("Concat", ["one", "batch_1", "units"], ["zero_shape"], axis=0),
             helper.make_node("ConstantOfShape", ["zero_shape"], ["zeros"],
                              value=numpy_helper.from_array(np.zeros(1, np.float32)))]
    x = "x"
    width = input_size
    for k in range(layers):
        u = lambda *shape: rng.uniform(-s, s, shape).astype(np.float32)  # noqa: E731
        inits += [numpy_helper.from_array(u(1, 4 * hidden, width), f"W{k}"),
                  numpy_helper.from_array(u(1, 4 * hidden, hidden), f"R{k}"),
                  numpy_helper.from_array(u(1, 8 * hidden), f"B{k}")]
        if k == 0:
            nodes += [squeeze("Unsqueeze", "h", 0, "h0_0"), squeeze("Unsqueeze", "c", 0, "c0_0")]
            h0, c0 = "h0_0", "c0_0"
        else:
            h0 = c0 = "zeros"
        nodes += [helper.make_node("Transpose", [x], [f"x_tbi{k}"], perm=[1, 0, 2]),
                  helper.make_node("LSTM", [f"x_tbi{k}", f"W{k}", f"R{k}", f"B{k}", "", h0, c0],
                                   [f"y{k}", f"yh{k}", f"yc{k}"], hidden_size=hidden, name=f"keras_lstm{k}"),
                  squeeze("Squeeze", f"y{k}", 1, f"y_tbh{k}"),
                  helper.make_node("Transpose", [f"y_tbh{k}"], [f"seq{k}"], perm=[1, 0, 2])]
        x, width = f"seq{k}", hidden
    last = layers - 1
    nodes += [helper.make_node("Identity", [x], ["out"]),
              squeeze("Squeeze", f"yh{last}", 0, "h_out"), squeeze("Squeeze", f"yc{last}", 0, "c_out")]
    ins = [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "time", input_size]),
           helper.make_tensor_value_info("h", TensorProto.FLOAT, ["batch", hidden]),
           helper.make_tensor_value_info("c", TensorProto.FLOAT, ["batch", hidden])]
    outs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in ("out", "h_out", "c_out")]
    graph = helper.make_graph(nodes, "keras_stack", ins, outs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], producer_name="tf2onnx-style")
    model.ir_version = 7
    return model


def keras_feeds(input_size: int = 6, hidden: int = 8, batch: int = 3, steps: int = 5, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    return {"x": rng.standard_normal((batch, steps, input_size)).astype(np.float32),
            "h": rng.standard_normal((batch, hidden)).astype(np.float32),
            "c": rng.standard_normal((batch, hidden)).astype(np.float32)}
