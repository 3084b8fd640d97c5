"""What stock onnxruntime can run: the original with its layout-1 LSTMs (which stock's CPU
provider refuses) as their layout-0 twins between Transposes."""

from __future__ import annotations

import onnx

from lstm_ort.runtime.model_io import iter_graphs


def has_layout1_lstm(model: onnx.ModelProto) -> bool:
    return any(_is_layout1_lstm(n) for g in iter_graphs(model) for n in g.node)


def _is_layout1_lstm(node: onnx.NodeProto) -> bool:
    return node.op_type == "LSTM" and node.domain in ("", "ai.onnx") and any(
        a.name == "layout" and a.i == 1 for a in node.attribute)


def stock_equivalent(model: onnx.ModelProto, *, in_place: bool = False) -> onnx.ModelProto:
    """The model with every layout-1 LSTM (which stock's CPU provider refuses) replaced by its
    layout-0 twin between Transposes: the same network, for stock onnxruntime to run."""
    if not in_place:
        copy = onnx.ModelProto()
        copy.CopyFrom(model)
        model = copy
    taken = {n for g in iter_graphs(model) for node in g.node for n in [*node.input, *node.output, node.name]}
    taken |= {v.name for g in iter_graphs(model) for v in [*getattr(g, "input", []), *getattr(g, "initializer", [])]}

    def fresh(base):
        name, k = base, 1
        while name in taken:
            name, k = f"{base}_{k}", k + 1
        taken.add(name)
        return name

    for graph in iter_graphs(model):
        nodes = []
        for node in graph.node:
            if not _is_layout1_lstm(node):
                nodes.append(node)
                continue
            base = node.name or "lstm"
            for k, perm in ((0, [1, 0, 2]), (5, [1, 0, 2]), (6, [1, 0, 2])):
                if k < len(node.input) and node.input[k]:
                    moved = fresh(f"{base}_layout0_in{k}")
                    nodes.append(onnx.helper.make_node("Transpose", [node.input[k]], [moved], perm=perm,
                                                       name=fresh(f"{base}_layout0_in{k}")))
                    node.input[k] = moved
            for a in node.attribute:
                if a.name == "layout":
                    a.i = 0
            after = []
            for k, perm in ((0, [2, 0, 1, 3]), (1, [1, 0, 2]), (2, [1, 0, 2])):
                if k < len(node.output) and node.output[k]:
                    original = node.output[k]
                    node.output[k] = fresh(f"{base}_layout0_out{k}")
                    after.append(onnx.helper.make_node("Transpose", [node.output[k]], [original], perm=perm,
                                                       name=fresh(f"{base}_layout0_out{k}")))
            nodes.append(node)
            nodes.extend(after)
        if len(nodes) != len(graph.node):
            kept = [onnx.NodeProto() for _ in nodes]
            for dst, src in zip(kept, nodes):
                dst.CopyFrom(src)
            del graph.node[:]
            graph.node.extend(kept)
    return model
