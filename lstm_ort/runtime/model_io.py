"""Reading ONNX models the way every lstm_ort entry point does, and walking their graphs."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import onnx

# onnxruntime 1.21 (our oldest) reads IR versions up to 10; newer ORTs up to 13 or more.
MAX_IR_VERSION = 13


class ModelError(ValueError):
    """The input is not a model lstm_ort can read."""


def load_model(model_or_path: str | os.PathLike | bytes | onnx.ModelProto) -> onnx.ModelProto:
    if isinstance(model_or_path, onnx.ModelProto):
        return model_or_path
    try:
        if isinstance(model_or_path, bytes):
            proto = onnx.load_from_string(model_or_path)
        else:
            path = Path(model_or_path)
            if not path.is_file():
                raise ModelError(f"{path}: no such file")
            proto = onnx.load(str(path), load_external_data=True)
    except ModelError:
        raise
    except Exception as e:  # protobuf's DecodeError and friends
        raise ModelError(f"not an ONNX model, or a truncated one: {e}") from e
    if not proto.graph.node and not proto.graph.input:
        raise ModelError("not an ONNX model: the file parsed, but holds no graph")
    if proto.ir_version > MAX_IR_VERSION or proto.ir_version < 3:
        raise ModelError(f"unsupported IR version {proto.ir_version} (supported: 3..{MAX_IR_VERSION})")
    return proto


def iter_graphs(model: onnx.ModelProto) -> Iterator[onnx.GraphProto | onnx.FunctionProto]:
    """The main graph, every function, and every subgraph inside them (If/Loop/Scan bodies)."""
    pending = [model.graph, *model.functions]
    while pending:
        graph = pending.pop()
        yield graph
        for node in graph.node:
            for attr in node.attribute:
                if attr.type == onnx.AttributeProto.GRAPH:
                    pending.append(attr.g)
                elif attr.type == onnx.AttributeProto.GRAPHS:
                    pending.extend(attr.graphs)
