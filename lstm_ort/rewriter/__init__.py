"""The rewriter: exported LSTMs -> lstm_ort.FusedLSTM, with a report of what was and was not taken.

Rules (one module each, each with its test beside it):
  single_lstm  one ONNX LSTM node -> one-layer FusedLSTM
  stack_lstm   FusedLSTM layers joined by export glue -> one multi-layer FusedLSTM
"""

from __future__ import annotations

import os
from pathlib import Path

import onnx
import onnx_ir as ir
import onnxscript.optimizer

from lstm_ort.builders import DOMAIN
from lstm_ort.rewriter import single_lstm, stack_lstm
from lstm_ort.rewriter.graph_utils import iter_graphs
from lstm_ort.rewriter.report import Finding, Report

__all__ = ["Finding", "ModelError", "Report", "load_model", "optimize"]

# onnxruntime 1.21 (our oldest) reads IR versions up to 10; newer ORTs up to 13 or more.
MAX_IR_VERSION = 13


class ModelError(ValueError):
    """The input is not a model the rewriter can read."""


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


def optimize(model_or_path, *, fold_constants: bool = True, fuse_stacks: bool = True,
             report: Report | None = None) -> onnx.ModelProto:
    """The model with every LSTM the rules can take replaced by FusedLSTM nodes.

    ``report`` (if given) is filled with one finding per LSTM or fused stack.
    """
    proto = load_model(model_or_path)
    ir_version = proto.ir_version
    input_valid = _passes_checker(proto)
    model = ir.serde.deserialize_model(proto)
    if fold_constants:
        # Dynamo exports build weights with Slice/Concat at run time: fold them into constants.
        onnxscript.optimizer.fold_constants(model)
    report = report if report is not None else Report()

    by_node = {}  # FusedLSTM node -> its finding
    for location, graph in iter_graphs(model):
        for node in list(graph):
            if not single_lstm.matches(node):
                continue
            finding = Finding(location, [node.name or "<unnamed>"], single_lstm.describe(node))
            report.findings.append(finding)
            refusal = single_lstm.check(node)
            if refusal:
                finding.reason = refusal.reason
                continue
            fused = single_lstm.rewrite(graph, node)
            finding.rewritten, finding.fused_node = True, fused.name
            by_node[fused] = finding
    # Dropped zero states leave their shape computations (Shape of a layer's output) dead: remove
    # them, so a layer output feeds only the next layer and stacks can be matched.
    onnxscript.optimizer.remove_unused_nodes(model)
    if fuse_stacks:
        for location, graph in iter_graphs(model):
            for chain, glue in stack_lstm.find_chains(graph):
                fused = stack_lstm.fuse_chain(graph, chain, glue)
                if fused is None:
                    continue
                parts = [by_node.pop(n) for n in chain if n in by_node]
                merged = Finding(location, [name for f in parts for name in f.nodes], parts[0].shape,
                                 layers=len(parts), rewritten=True, fused_node=fused.name)
                report.findings = [f for f in report.findings if f not in parts]
                report.findings.append(merged)
                by_node[fused] = merged
    if any(f.rewritten for f in report.findings):
        model.opset_imports[DOMAIN] = 1
        for function in model.functions.values():  # functions import their opsets themselves
            if any(n.domain == DOMAIN for n in function):
                function.opset_imports[DOMAIN] = 1
    onnxscript.optimizer.remove_unused_nodes(model)  # the glue and per-layer slices the rules bypassed
    _drop_unused_initializers(model)
    out = ir.serde.serialize_model(model)
    out.ir_version = ir_version
    _drop_value_info(out.graph)
    if input_valid:  # a model the checker already refused is not made worse, but cannot be held to it
        onnx.checker.check_model(out)
    return onnx.shape_inference.infer_shapes(out)


def _drop_unused_initializers(model: ir.Model) -> None:
    for _, graph in iter_graphs(model):
        if not isinstance(graph, ir.Graph):
            continue
        for name, value in list(graph.initializers.items()):
            if not value.uses() and not value.is_graph_output() and not value.is_graph_input():
                del graph.initializers[name]


def _drop_value_info(graph: onnx.GraphProto) -> None:
    """Intermediate value infos are stale after a rewrite; shape inference writes them anew."""
    del graph.value_info[:]
    for node in graph.node:
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.GRAPH:
                _drop_value_info(attr.g)
            for g in attr.graphs:
                _drop_value_info(g)


def _passes_checker(proto: onnx.ModelProto) -> bool:
    try:
        onnx.checker.check_model(proto)
        return True
    except onnx.checker.ValidationError:
        return False
