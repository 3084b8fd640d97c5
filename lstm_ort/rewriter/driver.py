"""Runs the rewrite rules over every graph of a model and keeps the report."""

from __future__ import annotations

import onnx
import onnx_ir as ir
import onnxscript.optimizer
from onnx_ir.passes.common import NameFixPass

from lstm_ort.ops.identity import DOMAIN, OPSET_VERSION
from lstm_ort.rewriter import fold_weights, sequence_lens
from lstm_ort.rewriter.graph_utils import iter_graphs
from lstm_ort.rewriter.report import Finding, Report
from lstm_ort.rewriter.rule import Rule
from lstm_ort.rewriter.rules import DEFAULT_RULES
from lstm_ort.runtime.model_io import iter_graphs as iter_proto_graphs
from lstm_ort.runtime.model_io import load_model


def optimize(model_or_path, *, fold_constants: bool = True, rules: list[Rule] | None = None,
             report: Report | None = None, sequence_lens_input: bool = False) -> onnx.ModelProto:
    """The model with every LSTM the rules can take replaced by FusedLSTM nodes.

    ``report`` (if given) is filled with one finding per LSTM or fused stack and each rule's counts.
    ``sequence_lens_input``: add a ``sequence_lens`` input wired into the FusedLSTMs (rewriter/sequence_lens.py).
    """
    proto = load_model(model_or_path)
    ir_version = proto.ir_version
    input_valid = _passes_checker(proto)
    model = ir.serde.deserialize_model(proto)
    if fold_constants:
        fold_weights.fold_constants(model)
    report = report if report is not None else Report()
    by_node: dict[ir.Node, Finding] = {}  # FusedLSTM node -> the finding it carries
    for rule in DEFAULT_RULES if rules is None else rules:
        if _apply(rule, model, report, by_node):
            # What the rewrite bypassed (export glue, dropped zero states' shape code) is dead now;
            # removing it lets the next rule see a layer output feeding only the next layer.
            onnxscript.optimizer.remove_unused_nodes(model)
    if any(f.rewritten for f in report.findings):
        # Values and nodes the rules made get names unique across the whole model, subgraphs
        # included (ONNX's single assignment spans scopes; a name clash does not load).
        NameFixPass()(model)
        model.opset_imports[DOMAIN] = OPSET_VERSION
        for function in model.functions.values():  # functions import their opsets themselves
            if any(n.domain == DOMAIN for n in function):
                function.opset_imports[DOMAIN] = OPSET_VERSION
    _drop_unused_initializers(model)
    out = ir.serde.serialize_model(model)
    out.ir_version = ir_version
    if sequence_lens_input:
        sequence_lens.add_sequence_lens_input(out, report)
    for graph in iter_proto_graphs(out):
        if isinstance(graph, onnx.GraphProto):  # intermediate value infos are stale; inference writes them anew
            del graph.value_info[:]
    if input_valid:  # a model the checker already refused is not made worse, but cannot be held to it
        onnx.checker.check_model(out)
    return onnx.shape_inference.infer_shapes(out)


def _apply(rule: Rule, model: ir.Model, report: Report, by_node: dict[ir.Node, Finding]) -> bool:
    """One rule over every graph; True if it rewrote anything."""
    hit = False
    for location, graph in iter_graphs(model):
        for match in list(rule.find(graph)):
            covered = rule.nodes(match)
            earlier = [by_node.pop(n) for n in covered if n in by_node]  # findings of nodes an earlier rule made
            result = rule.check(match)
            if not result:
                report.count(rule.name, refused=result.reason)
                if earlier:
                    by_node.update(zip(covered, earlier))
                else:
                    report.findings.append(Finding(location, _names(covered), rule.describe(match),
                                                   reason=result.reason))
                continue
            fused = rule.rewrite(graph, match)
            report.count(rule.name)
            hit = True
            if earlier:
                finding = Finding(location, [name for f in earlier for name in f.nodes], earlier[0].shape,
                                  layers=sum(f.layers for f in earlier), rewritten=True, fused_node=fused.name)
                report.findings = [f for f in report.findings if f not in earlier]
            else:
                finding = Finding(location, _names(covered), rule.describe(match), rewritten=True,
                                  fused_node=fused.name)
            report.findings.append(finding)
            by_node[fused] = finding
    return hit


def _names(nodes: list[ir.Node]) -> list[str]:
    return [n.name or "<unnamed>" for n in nodes]


def _drop_unused_initializers(model: ir.Model) -> None:
    for _, graph in iter_graphs(model):
        if not isinstance(graph, ir.Graph):
            continue
        for name, value in list(graph.initializers.items()):
            if not value.uses() and not value.is_graph_output() and not value.is_graph_input():
                del graph.initializers[name]


def _passes_checker(proto: onnx.ModelProto) -> bool:
    try:
        onnx.checker.check_model(proto)
        return True
    except onnx.checker.ValidationError:
        return False
