"""Would stock onnxruntime accept this LSTM node? Asked of stock onnxruntime itself: a one-node
model with the node's attributes and input types, whose session creation runs the checks stock
makes before any call (schema, types, attributes in the kernel's constructor). Shapes are checked
by the rules (stock checks them per call)."""

from __future__ import annotations

import functools

import onnx
import onnx_ir as ir
from onnx import helper

_INPUTS = ("X", "W", "R", "B", "sequence_lens", "initial_h", "initial_c", "P")


def stock_refusal(node: ir.Node, opset: int | None, element_type: ir.DataType | None) -> str:
    """Why stock onnxruntime's CPU provider refuses to create a session for this node ("" when it
    accepts it). ``layout=1`` is left out (stock's CPU LSTM refuses it, FusedLSTM runs it);
    `element_type` stands in for inputs whose type is not known."""
    attrs = []
    for attr in node.attributes.values():
        proto = ir.serde.serialize_attribute(attr)
        if proto.name == "layout" and proto.type == onnx.AttributeProto.INT and proto.i == 1 and (opset or 0) >= 14:
            continue
        attrs.append(proto.SerializeToString())
    fallback = int(element_type) if element_type is not None else onnx.TensorProto.FLOAT
    types = []
    for k, value in enumerate(node.inputs):
        if value is None:
            types.append(None)
        elif value.dtype is not None:
            types.append(int(value.dtype))
        else:
            types.append(onnx.TensorProto.INT32 if k == 4 else fallback)
    outputs = tuple(bool(o.name) and bool(o.uses() or o.is_graph_output()) for o in node.outputs)
    return _refusal(opset or 7, tuple(sorted(attrs)), tuple(types), outputs, node.domain or "")


@functools.lru_cache(maxsize=512)
def _refusal(opset: int, attrs: tuple[bytes, ...], types: tuple[int | None, ...], outputs: tuple[bool, ...],
             domain: str) -> str:
    import onnxruntime as ort

    from lstm_ort.runtime.model_io import max_ir_version

    inputs = [name if t is not None else "" for name, t in zip(_INPUTS, types)]
    while inputs and not inputs[-1]:
        inputs.pop()
    out_names = [name if keep else "" for name, keep in zip(("Y", "Y_h", "Y_c"), outputs)]
    while out_names and not out_names[-1]:
        out_names.pop()
    if not any(out_names):
        out_names = ["Y"]
    node = helper.make_node("LSTM", inputs, out_names, domain=domain)
    for raw in attrs:
        node.attribute.add().ParseFromString(raw)
    x_type = types[0] if types and types[0] is not None else onnx.TensorProto.FLOAT
    graph = helper.make_graph(
        [node], "stock_probe",
        [helper.make_tensor_value_info(name, t, None) for name, t in zip(_INPUTS, types) if t is not None],
        [helper.make_tensor_value_info(name, x_type, None) for name in out_names if name])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid(domain, opset)])
    model.ir_version = min(max(onnx.helper.find_min_ir_version_for([model.opset_import[0]], True), 3),
                           max_ir_version())
    options = ort.SessionOptions()
    options.log_severity_level = 4
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    try:
        ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    except Exception as e:
        return _clean(str(e))
    return ""


def _clean(message: str) -> str:
    """onnxruntime's message, short: for a schema error, only why."""
    from lstm_ort.runtime.messages import clean_message

    message = clean_message(Exception(message)).replace("Exception during initialization: ", "")
    if message.startswith("This is an invalid model") and ", Error " in message:  # the node's signature, then why
        message = message.rsplit(", Error ", 1)[1]
    return message[:300]
