"""1-D convolutions over a batch of streams, as one 2-D convolution with the batch as its height.

onnxruntime's CPU Conv runs one GEMM per image of the batch; for the short chunks of streaming
models (silero-vad: 4 STFT frames, then 4, 2 and 1) those GEMMs are a few columns wide and a batch
of 256 costs almost 256 calls' worth (55 us a stream against 104 alone, one core). As one image of
height N with a 1 x k kernel ([N, C, L] -> [1, C, N, L]), the batch becomes the GEMM's columns:
19 us a stream. Rows of the height axis never meet (kernel height 1, no padding on it), so each
stream's result is its own; the sums run in another order, within float32 rounding of the
original (docs/streams.md, *Exactness*).

Between two such convolutions an elementwise activation would take the batch back to the 1-D
layout and out again (Squeeze, Transpose, Relu, Transpose, Unsqueeze); the round trip is dropped,
the activation applied in the 2-D layout (the same values, element for element), so that
onnxruntime fuses it into the Conv and keeps its blocked layout from one Conv to the next.

Used by StreamBatcher on the CPU execution provider, on its own copy of the model.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper

from lstm_ort.runtime.model_io import constant_tensors, iter_graphs, producers, read_names, reader_counts


def convs_as_2d(model: onnx.ModelProto) -> int:
    """Rewrites, in place, every Conv with a constant 3-D float weight (a 1-D convolution), in
    every graph; returns how many."""
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 13)
    weights = constant_tensors(model)
    count = [0]

    def rewrite(graph: onnx.GraphProto) -> None:
        nodes = []
        for node in graph.node:
            for a in node.attribute:
                for g in ([a.g] if a.type == onnx.AttributeProto.GRAPH else a.graphs):
                    rewrite(g)
            w = weights.get(node.input[1]) if node.op_type == "Conv" and not node.domain and len(node.input) > 1 else None
            if w is None or len(w.dims) != 3 or w.data_type not in (onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16,
                                                                     onnx.TensorProto.DOUBLE):
                nodes.append(node)
                continue
            count[0] += 1
            nodes += _as_2d(node, w, f"{node.name or node.output[0]}__2d", opset)
        del graph.node[:]
        graph.node.extend(nodes)

    rewrite(model.graph)
    if count[0]:
        constants = constant_tensors(model)  # with the axes of the Squeezes and Unsqueezes just written
        # subgraphs before the graph that holds them: a graph's rewrite copies its nodes anew, and a
        # subgraph rewritten after would be a copy its graph no longer holds
        for graph in reversed(list(iter_graphs(model))):
            _drop_round_trips(graph, constants)
    return count[0]


# Elementwise ops of one tensor input (others, where any, are scalars): they commute with the
# layout change.
_ELEMENTWISE = {"Relu", "LeakyRelu", "PRelu", "Sigmoid", "Tanh", "Elu", "Selu", "Celu", "HardSigmoid", "HardSwish",
                "Softplus", "Softsign", "Clip", "Gelu", "Mish", "ThresholdedRelu"}


def _drop_round_trips(graph: onnx.GraphProto, constants: dict[str, onnx.TensorProto]) -> None:
    """Squeeze(0) -> Transpose(1,0,2) -> activation -> Transpose(1,0,2) -> Unsqueeze(0) becomes the
    activation alone, where each link has no other reader (in ``graph``)."""
    producer = producers(graph)
    readers = reader_counts(graph)  # an output of the graph, or a value a subgraph reads, is never dropped
    only_read_by = {}
    for n in graph.node:
        for i in n.input:
            only_read_by[i] = n if readers[i] == 1 else None

    def link(name: str, op: str, check) -> onnx.NodeProto | None:
        node = producer.get(name)
        return node if node is not None and node.op_type == op and not node.domain and check(node) else None

    dropped = set()
    for act in list(graph.node):
        if act.op_type not in _ELEMENTWISE or act.domain or readers.get(act.input[0]) != 1:
            continue
        if not all(_scalar(i, constants) for i in act.input[1:] if i):  # PRelu's slope per channel: no
            continue
        t1 = link(act.input[0], "Transpose", _swaps_01)
        squeeze = t1 is not None and readers.get(t1.input[0]) == 1 and link(t1.input[0], "Squeeze",
                                                                            lambda n: _on_axis0(n, constants))
        t2 = only_read_by.get(act.output[0])
        t2 = t2 if t2 is not None and t2.op_type == "Transpose" and not t2.domain and _swaps_01(t2) else None
        unsqueeze = only_read_by.get(t2.output[0]) if t2 is not None else None
        if not squeeze or unsqueeze is None or unsqueeze.op_type != "Unsqueeze" or not _on_axis0(unsqueeze, constants):
            continue
        act.input[0] = squeeze.input[0]
        act.output[0] = unsqueeze.output[0]
        dropped.update(id(n) for n in (squeeze, t1, t2, unsqueeze))
    if dropped:
        axes = {n.input[1] for n in graph.node if id(n) in dropped and len(n.input) > 1}
        kept = [n for n in graph.node if id(n) not in dropped]
        read = read_names(kept)
        # the dropped Squeezes' and Unsqueezes' axes, left unread (onnxruntime warns of each)
        kept = [n for n in kept if not (n.op_type == "Constant" and n.output[0] in axes and n.output[0] not in read)]
        del graph.node[:]
        graph.node.extend(kept)


def _scalar(name: str, constants: dict[str, onnx.TensorProto]) -> bool:
    """A constant of one value (which broadcasts the same in either layout)."""
    return name in constants and int(np.prod(constants[name].dims, dtype=np.int64)) == 1


def _swaps_01(node: onnx.NodeProto) -> bool:
    return [helper.get_attribute_value(a) for a in node.attribute if a.name == "perm"] == [[1, 0, 2]]


def _on_axis0(node: onnx.NodeProto, constants: dict[str, onnx.TensorProto]) -> bool:
    """Whether a Squeeze or Unsqueeze takes axis 0 only (its attribute, or a constant input)."""
    axes = [helper.get_attribute_value(a) for a in node.attribute if a.name == "axes"]
    if axes:
        return list(axes[0]) == [0]
    if len(node.input) < 2 or node.input[1] not in constants:
        return False
    return numpy_helper.to_array(constants[node.input[1]]).tolist() == [0]


def _as_2d(node: onnx.NodeProto, weight: onnx.TensorProto, p: str, opset: int) -> list[onnx.NodeProto]:
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    w = numpy_helper.to_array(weight)
    k = int(attrs.get("kernel_shape", [w.shape[2]])[0])
    pads = list(attrs.get("pads", [0, 0]))
    conv_attrs = dict(kernel_shape=[1, k], strides=[1, int(attrs.get("strides", [1])[0])],
                      dilations=[1, int(attrs.get("dilations", [1])[0])], group=int(attrs.get("group", 1)))
    auto_pad = attrs.get("auto_pad", b"NOTSET")
    auto_pad = auto_pad.decode() if isinstance(auto_pad, bytes) else auto_pad
    if auto_pad != "NOTSET":
        conv_attrs["auto_pad"] = auto_pad
    else:
        conv_attrs["pads"] = [0, int(pads[0]), 0, int(pads[1])]
    out = [helper.make_node("Constant", [], [p + "_w"], value=numpy_helper.from_array(w[:, :, None, :], p + "_w")),
           helper.make_node("Transpose", [node.input[0]], [p + "_cnl"], perm=[1, 0, 2])]
    out += _axis0(opset, "Unsqueeze", p + "_cnl", p + "_1cnl", p)
    conv_inputs = [p + "_1cnl", p + "_w"] + ([node.input[2]] if len(node.input) > 2 and node.input[2] else [])
    out.append(helper.make_node("Conv", conv_inputs, [p + "_1onl"], name=p, **conv_attrs))
    out += _axis0(opset, "Squeeze", p + "_1onl", p + "_onl", p + "_sq")
    out.append(helper.make_node("Transpose", [p + "_onl"], [node.output[0]], perm=[1, 0, 2]))
    return out


def _axis0(opset: int, op: str, x: str, y: str, p: str) -> list[onnx.NodeProto]:
    if opset < 13:
        return [helper.make_node(op, [x], [y], axes=[0])]
    axes = numpy_helper.from_array(np.array([0], np.int64), p + "_axes")
    return [helper.make_node("Constant", [], [p + "_axes"], value=axes), helper.make_node(op, [x, p + "_axes"], [y])]
