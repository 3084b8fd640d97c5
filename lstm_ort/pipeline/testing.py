"""Models and feeds for the pipeline's tests and tools/bench_pipeline.py."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from lstm_ort.builders import LstmSpec, fused_model, random_layers
from lstm_ort.ops.identity import DOMAIN, OPSET_VERSION


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
