"""Writing a rewritten model without building it in memory: at most one layer's packed weights
are held besides the input.

A model under EXTERNAL_DATA_THRESHOLD is one file: the main graph's large initializers are left
out of the serialized model and streamed after it, each as protobuf frames it (an initializer of
the graph: its tag and length from protobuf's own encoder), lazily packed weights a layer at a
time. A larger one keeps its tensors in a data file beside it, written by onnx-ir (``ir.save``),
which streams each tensor through its ``tofile`` (lazy_weights.py: a layer at a time too).
driver.stage hands ``write`` to runtime.model_io.StagedModel, the one way a model file is written.
"""

from __future__ import annotations

import onnx
import onnx_ir as ir
from google.protobuf.internal import encoder, wire_format

from lstm_ort import progress
from lstm_ort.rewriter.lazy_weights import is_lazy, tensor_chunks

LARGE_BYTES = 1 << 16  # initializers above this are streamed (inline) or written beside the model (external)
_ALIGN = 4096  # external tensors start on a page, as onnx writes them


def write(model: ir.Model, ir_version: int, path, *, data_name: str | None = None) -> None:
    """Writes ``model`` (checked and shaped already) to ``path``; with ``data_name``, its large
    tensors go to that file beside it as external data."""
    if data_name:
        saved, model.ir_version = model.ir_version, ir_version
        try:
            with progress.step("packing weights and writing"):
                ir.save(model, path, external_data=data_name, size_threshold_bytes=LARGE_BYTES, alignment=_ALIGN,
                        align_threshold=LARGE_BYTES)
        finally:
            model.ir_version = saved
        return
    graph = model.graph
    large = [v for v in graph.initializers.values() if _streamable(v.const_value)]
    for value in large:
        del graph.initializers[value.name]
    try:
        proto = ir.serde.serialize_model(model)
    finally:
        for value in large:
            graph.initializers[value.name] = value
    proto.ir_version = ir_version
    graph_bytes = proto.graph.SerializeToString()
    proto.ClearField("graph")
    head = proto.SerializeToString()
    stubs = [_stub(v.const_value, v.name).SerializeToString() for v in large]
    # Each large initializer: its stub (name, type, dims), then raw_data's frame and bytes.
    raws = [_frame(onnx.TensorProto, "raw_data", v.const_value.nbytes) for v in large]
    sizes = [len(stub) + len(raw) + v.const_value.nbytes for stub, raw, v in zip(stubs, raws, large)]
    graph_size = len(graph_bytes) + sum(len(_frame(onnx.GraphProto, "initializer", n)) + n for n in sizes)
    with open(path, "wb") as f, progress.step("packing weights and writing"):
        f.write(head + _frame(onnx.ModelProto, "graph", graph_size) + graph_bytes)
        for value, stub, raw, size in zip(large, stubs, raws, sizes):
            f.write(_frame(onnx.GraphProto, "initializer", size) + stub + raw)
            _write_tensor(value.const_value, f)


def _frame(message, field: str, length: int) -> bytes:
    """What precedes ``length`` bytes of a length-delimited ``field`` of ``message``: its tag and
    length, as protobuf encodes them."""
    number = message.DESCRIPTOR.fields_by_name[field].number
    return encoder.TagBytes(number, wire_format.WIRETYPE_LENGTH_DELIMITED) + encoder._VarintBytes(length)


def _stub(tensor, name: str) -> onnx.TensorProto:
    stub = onnx.TensorProto(name=name, dims=list(tensor.shape.numpy()), data_type=int(tensor.dtype))
    if tensor.doc_string:
        stub.doc_string = tensor.doc_string
    return stub


def _streamable(tensor) -> bool:
    return (tensor is not None and (tensor.nbytes > LARGE_BYTES or is_lazy(tensor))
            and tensor.dtype != ir.DataType.STRING and tensor.dtype.bitwidth % 8 == 0)


def _write_tensor(tensor, f) -> None:
    written = 0
    for chunk in tensor_chunks(tensor):
        f.write(chunk)
        written += len(chunk) if isinstance(chunk, bytes) else chunk.nbytes
        del chunk  # before the next one is made
    if written != tensor.nbytes:
        raise RuntimeError(f"tensor {tensor.name}: wrote {written} bytes, not {tensor.nbytes}")
