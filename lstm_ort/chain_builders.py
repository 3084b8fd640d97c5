"""LSTM cells chained over time in plain ONNX ops, the way exporters write a time loop they
unrolled, at any opset from 9: torch's ``nn.LSTMCell`` called in a Python loop (each step a Gather
of x, Gemm cells, the outputs stacked by Unsqueeze + Concat on axis 1) and tf2onnx's Keras
``LSTM(unroll=True)`` (x transposed to time-major, Split + Squeeze into steps, MatMul cells, the
outputs stacked on axis 0 and transposed back). Zero initial states are built from x's shape.
For the rewriter's tests; the real exports are models/export_fixtures.py and models/corpus.py.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from lstm_ort.builders import DEFAULT_OPSET, IR_VERSION, cell_nodes

_INT64_MIN = -(2 ** 63)


class _Graph:
    """Nodes and initializers being written at one opset."""

    def __init__(self, opset: int) -> None:
        self.opset, self.nodes, self.inits, self.count = opset, [], {}, 0

    def name(self, base: str) -> str:
        self.count += 1
        return f"{base}_{self.count}"

    def const(self, name: str, array) -> str:
        self.inits.setdefault(name, numpy_helper.from_array(np.asarray(array), name))
        return name

    def add(self, op: str, inputs: list[str], out: str | None = None, **attrs) -> str:
        out = out or self.name(op.lower())
        self.nodes.append(helper.make_node(op, inputs, [out], **attrs))
        return out

    def axes_op(self, op: str, value: str, axes: list[int]) -> str:
        if self.opset < 13:
            return self.add(op, [value], axes=axes)
        return self.add(op, [value, self.const(f"axes_{'_'.join(map(str, axes))}", np.array(axes, np.int64))])

    def zeros(self, x: str, batch_axis: int, H: int, spelling: str) -> str:
        """A [B, H] zero state built from x's shape: ConstantOfShape (torch) or Expand of a 0 (tf2onnx)."""
        batch = self.add("Gather", [self.add("Shape", [x]), self.const(f"index_{batch_axis}", np.array(batch_axis))])
        shape = self.add("Concat", [self.axes_op("Unsqueeze", batch, [0]), self.const("H", np.array([H], np.int64))],
                         axis=0)
        if spelling == "expand":
            return self.add("Expand", [self.const("zero", np.array(0, np.float32)), shape])
        return self.add("ConstantOfShape", [shape], value=numpy_helper.from_array(np.zeros(1, np.float32)))


def _cell(g: _Graph, template, prefix: str, k: int, x: str, h: str, c: str) -> tuple[str, str]:
    """One step: the template cell's nodes with step names, its constants shared by every step."""
    nodes, inits = template
    for t in inits:
        if prefix + t.name not in g.inits:
            copy = onnx.TensorProto()
            copy.CopyFrom(t)
            copy.name = prefix + t.name
            g.inits[copy.name] = copy
    h_out, c_out = f"{prefix}h_{k}", f"{prefix}c_{k}"
    names = {"x": x, "h": h, "c": c, "h_out": h_out, "c_out": c_out, **{t.name: prefix + t.name for t in inits}}
    for node in nodes:
        copy = onnx.NodeProto()
        copy.CopyFrom(node)
        copy.input[:] = [names.get(v, f"{prefix}s{k}_{v}") for v in node.input]
        copy.output[:] = [names.get(v, f"{prefix}s{k}_{v}") for v in node.output]
        g.nodes.append(copy)
    return h_out, c_out


def _steps(g: _Graph, seq: str, T: int, style: str, flip: bool) -> list[str]:
    """x_t for t in 0..T-1 of a [B, T, I] sequence: torch Gathers along axis 1 (of the flipped
    sequence with `flip`, so that x_t is then step T-1-t), tf2onnx a Split of the time-major one."""
    if style == "torch":
        if flip:
            bounds = [g.const(n, np.array([v], np.int64)) for n, v in (("flip_start", -1), ("flip_end", _INT64_MIN),
                                                                        ("flip_axis", 1), ("flip_step", -1))]
            seq = g.add("Slice", [seq, *bounds])
        return [g.add("Gather", [seq, g.const(f"t{t}", np.array(t, np.int64))], axis=1) for t in range(T)]
    major = g.add("Transpose", [seq], perm=[1, 0, 2])
    parts = [g.name("unstack") for _ in range(T)]
    g.nodes.append(helper.make_node("Split", [major], parts, axis=0, **({"num_outputs": T} if g.opset >= 18 else {})))
    return [g.axes_op("Squeeze", p, [0]) for p in parts]


def _stack(g: _Graph, hs: list[str], style: str) -> str:
    """[B, T, H] from the steps' h in time order."""
    axis = 1 if style == "torch" else 0
    stacked = g.add("Concat", [g.axes_op("Unsqueeze", h, [axis]) for h in hs], axis=axis)
    return stacked if style == "torch" else g.add("Transpose", [stacked], perm=[1, 0, 2])


def cell_chain_model(I: int, H: int, T: int, rng: np.random.Generator, *, style: str = "torch",
                     direction: str = "forward", layers: int = 1, zero_states: bool = True,
                     final_states: bool = False, opset: int = DEFAULT_OPSET, **cell) -> onnx.ModelProto:
    """A chain of `T` cells (builders.cell_nodes, `cell` its options) over X [B, T, I] -> Y.

    style "torch" or "keras" (tf2onnx). direction "forward"; "reverse" (steps read t = T-1..0,
    outputs stacked in time order); "flip" (torch: steps read a flipped X through a Slice with
    step -1, opset 10 on, and the stacked outputs are flipped back); "bidirectional" (a forward
    and a reverse chain, Y = Concat on the feature axis). layers > 1: each layer reads the one
    below (uni torch: step k reads h_k itself; otherwise the whole output sequence). zero_states:
    states built from X's shape (else graph inputs h0_<chain>, c0_<chain>). final_states: the
    first chain's last h and c are outputs h_last, c_last.
    """
    g = _Graph(opset)
    form = "gemm" if style == "torch" else "matmul"
    spelling = "constant_of_shape" if style == "torch" else "expand"
    directions = ["forward", "reverse"] if direction == "bidirectional" else [direction]
    seq, inputs, outputs, below = "X", [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["B", T, I])], [], None
    for layer in range(layers):
        width = I if layer == 0 else H * len(directions)
        sequences = []
        for d, way in enumerate(directions):
            prefix = f"l{layer}d{d}_"
            template = cell_nodes(width, H, rng, form=form, opset=opset, **cell)
            if layer > 0 and direction == "forward" and style == "torch":
                xs = below  # torch's stacked cells: step k reads the h_k of the cell below
            else:
                xs = _steps(g, seq, T, style, flip=way == "flip")
            order = list(range(T - 1, -1, -1)) if way == "reverse" else list(range(T))
            if zero_states:
                h = c = g.zeros("X", 0, H, spelling)
            else:
                h, c = f"h0_{prefix}", f"c0_{prefix}"
                inputs += [helper.make_tensor_value_info(n, TensorProto.FLOAT, ["B", H]) for n in (h, c)]
            hs = {}
            for k, t in enumerate(order):
                h, c = _cell(g, template, prefix, k, xs[t], h, c)
                hs[t] = h
            if final_states and layer == 0 and d == 0:
                outputs += [helper.make_tensor_value_info(n, TensorProto.FLOAT, ["B", H]) for n in ("h_last", "c_last")]
                g.add("Identity", [h], "h_last")
                g.add("Identity", [c], "c_last")
            if way == "flip":  # steps in processing order, then torch.flip of the stacked outputs
                stacked = _stack(g, [hs[t] for t in range(T)], style)
                bounds = [g.const(n, np.array([v], np.int64)) for n, v in (("flip_start", -1), ("flip_end", _INT64_MIN),
                                                                            ("flip_axis", 1), ("flip_step", -1))]
                sequences.append(g.add("Slice", [stacked, *bounds]))
            else:
                sequences.append(_stack(g, [hs[t] for t in range(T)], style))
            below = [hs[t] for t in range(T)]
        seq = sequences[0] if len(sequences) == 1 else g.add("Concat", sequences, axis=2)
    g.add("Identity", [seq], "Y")
    outputs.insert(0, helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["B", T, H * len(directions)]))
    graph = helper.make_graph(g.nodes, "cell_chain", inputs, outputs, list(g.inits.values()))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], producer_name="lstm_ort")
    model.ir_version = IR_VERSION
    return model
