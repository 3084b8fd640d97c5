"""Runs the rewrite rules over every graph of a model and keeps the report.

Memory stays bounded for large models: the model's tensors are read where they lie in the input
proto, the packed weights are lazy (packed when the model is serialized, one tensor at a time),
and the onnx checker and shape inference see the model without its large initializers.
"""

from __future__ import annotations

import contextlib
import numbers
from dataclasses import dataclass
from pathlib import Path

import onnx
import onnx_ir as ir
import onnxscript.optimizer
from onnx_ir.passes.common import NameFixPass

from lstm_ort import progress
from lstm_ort.ops.identity import DOMAIN, INT8, OPSET_VERSION, Precision
from lstm_ort.rewriter import fold_weights, model_writer, passes
from lstm_ort.rewriter.graph_utils import RewriteContext, const_tensor, iter_graphs, model_names, rewrite_context
from lstm_ort.rewriter.lazy_weights import is_lazy
from lstm_ort.rewriter.low_rank import LowRank
from lstm_ort.rewriter.report import Finding, Report
from lstm_ort.rewriter.rule import Rule
from lstm_ort.rewriter.rules import DEFAULT_RULES
from lstm_ort.runtime import model_io
from lstm_ort.runtime.model_io import StagedModel, load_model


@dataclass
class Rewritten:
    """The rewritten model before it is serialized (its packed weights not yet computed)."""

    model: ir.Model
    ir_version: int
    input_valid: bool  # the input passed the onnx checker


def optimize(model_or_path, *, fold_constants: bool = True, rules: list[Rule] | None = None,
             report: Report | None = None, freeze_inputs: bool = False,
             sequence_lens_input: bool = False, precision: str | None = None, low_rank: LowRank | int | None = None,
             calibration=None, max_error: float | None = None, batchify: bool = False) -> onnx.ModelProto:
    """The model with every LSTM the rules can take replaced by FusedLSTM nodes, then the passes
    after the rewrite the options ask for (passes.py: batchify, sequence_lens, int8, low rank).

    ``report`` (if given) is filled with one finding per LSTM or fused stack and each rule's counts.
    ``freeze_inputs``: pack weights that are initializers and graph inputs too (by default such
    LSTMs are left, since a caller may feed other weights); the frozen inputs leave the graph's
    inputs, so feeding them is an error rather than silently ignored.
    ``sequence_lens_input``: add a ``sequence_lens`` input wired into the FusedLSTMs (rewriter/sequence_lens.py).
    ``precision``: a Precision (or its name), written as the ``precision`` attribute of every
    FusedLSTM node the rewrite makes (docs/ops.md, "Precision modes"); None writes
    OPTIMIZE_PRECISION ("auto", Precision.written).
    ``low_rank``: factor the weights (an int: that rank for every matrix; or a rewriter.low_rank.LowRank)
    and measure the error against the unfactored model on ``calibration`` (an .npz path or a list of
    feed dicts; default seeded random inputs): ``report.low_rank`` holds every matrix's rank and the
    error figures; with ``max_error``, a max-abs error of the outputs beyond it raises
    ErrorBoundExceeded (rewriter/low_rank.py).
    ``precision="int8"``: float32 weights become int8 per output channel (rewriter/int8_weights.py),
    the error measured and bounded as for ``low_rank``; ``report.int8`` holds the figures.
    ``batchify``: a model exported for batch 1 gets a symbolic batch dimension, or BatchifyRefused
    names the op that mixes the entries of a batch (rewriter/batchify.py).
    """
    _check_arguments(fold_constants=fold_constants, freeze_inputs=freeze_inputs,
                     sequence_lens_input=sequence_lens_input, batchify=batchify, rules=rules, report=report)
    report = report if report is not None else Report()
    int8 = precision == INT8
    if isinstance(low_rank, numbers.Integral) and not isinstance(low_rank, bool):
        low_rank = LowRank(rank=int(low_rank))
    options = passes.Options(batchify=batchify, sequence_lens_input=sequence_lens_input, int8=int8,
                             low_rank=low_rank, calibration=calibration, max_error=max_error)
    out = serialize(rewrite(model_or_path, fold_constants=fold_constants, rules=rules, report=report,
                            freeze_inputs=freeze_inputs, precision=None if int8 else precision))
    return passes.run(passes.after_rewrite(options), out, report)


def _check_arguments(*, rules, report, **flags) -> None:
    """optimize's arguments before any work: a ValueError naming the one of the wrong kind (the
    passes' options are checked by passes.Options)."""
    for name, value in flags.items():
        if not isinstance(value, bool):
            raise ValueError(f"optimize: {name} must be True or False, got {value!r}")
    if rules is not None and (isinstance(rules, (str, bytes)) or not all(isinstance(r, Rule) for r in rules)):
        raise ValueError(f"optimize: rules must be a list of rewriter.rule.Rule, got {rules!r}")
    if report is not None and not isinstance(report, Report):
        raise ValueError(f"optimize: report must be a lstm_ort.Report, got {report!r}")


def rewrite(model_or_path, *, fold_constants: bool = True, rules: list[Rule] | None = None,
            report: Report | None = None, freeze_inputs: bool = False, precision: str | None = None) -> Rewritten:
    """The rewrite itself, in onnx-ir: what `lstm-ort check` needs, without packing any weight."""
    precision = Precision.written(precision)  # checked before any work
    proto = load_model(model_or_path)
    ir_version = proto.ir_version
    with progress.step("building the graph"):
        model = ir.serde.deserialize_model(proto)
    input_valid = _passes_checker(model)
    if fold_constants:
        with progress.step("folding constants"):
            fold_weights.fold_constants(model)
    _infer_shapes(model, clear=False)  # the rules read the shapes of zero initial states
    report = report if report is not None else Report()
    ctx = RewriteContext(freeze_inputs=freeze_inputs, names=model_names(model), opsets=_opsets(model))
    by_node: dict[ir.Node, Finding] = {}  # FusedLSTM node -> the finding it carries
    with rewrite_context(ctx), progress.step("rewriting"):
        for rule in DEFAULT_RULES if rules is None else rules:
            if _apply(rule, model, report, by_node):
                # What the rewrite bypassed (export glue, dropped zero states' shape code) is dead now;
                # removing it lets the next rule see a layer output feeding only the next layer.
                onnxscript.optimizer.remove_unused_nodes(model)
    _set_precision(by_node, precision)
    if any(f.rewritten for f in report.findings):
        # Values and nodes the rules made get names unique across the whole model, subgraphs
        # included (ONNX's single assignment spans scopes; a name clash does not load).
        NameFixPass()(model)
        model.opset_imports[DOMAIN] = OPSET_VERSION
        for function in model.functions.values():  # functions import their opsets themselves
            if any(n.domain == DOMAIN for n in function):
                function.opset_imports[DOMAIN] = OPSET_VERSION
    _drop_unused_initializers(model, freeze_inputs)
    return Rewritten(model, ir_version, input_valid)


def serialize(rewritten: Rewritten) -> onnx.ModelProto:
    """The rewritten model as a checked ModelProto with fresh value infos; packs the weights."""
    _finish(rewritten)
    with progress.step("packing weights and serializing"):
        out = ir.serde.serialize_model(rewritten.model)
    out.ir_version = rewritten.ir_version
    return out


def written_size(rewritten: Rewritten) -> int:
    """About how many bytes the model takes written: its tensors' data (the rest is small)."""
    return sum(v.const_value.nbytes for v in rewritten.model.graph.initializers.values() if v.const_value is not None)


def write(rewritten: Rewritten, path, *, data_name: str | None = None) -> None:
    """Writes the checked model to `path` without building it in memory (model_writer.py); with
    `data_name`, its large tensors go to that file beside it as external data."""
    _finish(rewritten)
    model_writer.write(rewritten.model, rewritten.ir_version, path, data_name=data_name)


def stage(rewritten: Rewritten, dst: Path) -> StagedModel:
    """The model written beside ``dst`` (runtime.model_io.StagedModel, committed or discarded by the
    caller), its tensors in a data file where it is larger than EXTERNAL_DATA_THRESHOLD."""
    return StagedModel(dst, lambda path, data_name: write(rewritten, path, data_name=data_name),
                       external=written_size(rewritten) > model_io.EXTERNAL_DATA_THRESHOLD)


def _finish(rewritten: Rewritten) -> None:
    """Fresh value infos, and the onnx checker when the input passed it."""
    model = rewritten.model
    _infer_shapes(model, clear=True)  # intermediate value infos may be stale; inference writes them anew
    if rewritten.input_valid:  # a model the checker already refused is not made worse, but cannot be held to it
        with _without_large_initializers(model, as_inputs=True):
            onnx.checker.check_model(ir.serde.serialize_model(model))


def skeleton(rewritten: Rewritten) -> onnx.ModelProto:
    """The rewritten model with its large initializers as external-data stubs (shapes and types
    only, nothing packed): for reading the nodes and their sizes, not for running."""
    with _without_large_initializers(rewritten.model, as_inputs=False):
        out = ir.serde.serialize_model(rewritten.model)
    out.ir_version = rewritten.ir_version
    return out


def _apply(rule: Rule, model: ir.Model, report: Report, by_node: dict[ir.Node, Finding]) -> bool:
    """One rule over every graph; True if it rewrote anything."""
    hit = False
    for location, graph in iter_graphs(model):
        for match in list(rule.find(graph)):
            covered = rule.nodes(match)
            popped = {n: by_node.pop(n) for n in covered if n in by_node}  # findings of nodes an earlier rule made
            earlier = list(popped.values())
            result = rule.check(match)
            if not result:
                report.count(rule.name, refused=result.reason)
                if earlier:
                    by_node.update(popped)
                else:
                    report.findings.append(Finding(location, _names(covered), rule.describe(match),
                                                   reason=result.reason))
                continue
            fused = rule.rewrite(graph, match)
            report.count(rule.name)
            hit = True
            if earlier:
                finding = Finding(location, [name for f in earlier for name in f.nodes], earlier[0].shape,
                                  layers=_num_layers(fused), rewritten=True, fused_node=fused.name)
                report.findings = [f for f in report.findings if f not in earlier]
            else:
                finding = Finding(location, _names(covered), rule.describe(match), rewritten=True,
                                  fused_node=fused.name)
            report.findings.append(finding)
            by_node[fused] = finding
    return hit


def _set_precision(by_node: dict[ir.Node, Finding], precision: Precision) -> None:
    """Once every rule has run (so stacks are fused): each FusedLSTM node made gets ``precision``,
    written as its attribute, and its finding says what it runs."""
    for node, finding in by_node.items():
        w = const_tensor(node.inputs[1])
        if w is not None and w.dtype == ir.DataType.INT8:  # int8 weights fix the arithmetic (docs/ops.md)
            finding.precision = INT8
            continue
        node.attributes["precision"] = ir.AttrString("precision", precision.value)
        finding.precision = precision.value


def _num_layers(fused: ir.Node) -> int:
    attr = fused.attributes.get("num_layers")
    return attr.value if attr is not None else 1


def _names(nodes: list[ir.Node]) -> list[str]:
    return [n.name or "<unnamed>" for n in nodes]


def _opsets(model: ir.Model) -> dict[int, int]:
    """The default-domain opset of every graph (by id): subgraphs run under their model's or
    function's."""
    opsets: dict[int, int] = {}

    def walk(graph, version):
        opsets[id(graph)] = version
        for node in graph:
            for attr in node.attributes.values():
                if attr.type == ir.AttributeType.GRAPH:
                    walk(attr.value, version)
                elif attr.type == ir.AttributeType.GRAPHS:
                    for g in attr.value:
                        walk(g, version)

    main = model.opset_imports.get("", model.opset_imports.get("ai.onnx"))
    walk(model.graph, main)
    for function in model.functions.values():
        version = function.opset_imports.get("", function.opset_imports.get("ai.onnx", main))
        opsets[id(function)] = version
        walk(function.graph, version)
    return opsets


def _drop_unused_initializers(model: ir.Model, freeze_inputs: bool) -> None:
    for _, graph in iter_graphs(model):
        if not isinstance(graph, ir.Graph):
            continue
        for name, value in list(graph.initializers.items()):
            if value.uses() or value.is_graph_output():
                continue
            if value.is_graph_input():
                if not freeze_inputs:
                    continue
                graph.inputs.remove(value)  # frozen: feeding it would now be silently ignored
            del graph.initializers[name]


@contextlib.contextmanager
def _without_large_initializers(model: ir.Model, *, as_inputs: bool):
    """The main graph's large (or lazily packed) initializers set aside for a serialization: as graph inputs of their
    type and shape (for the checker), or as external-data stubs that are never read (for
    reading the graph). The model is as before afterwards."""
    graph = model.graph
    inputs = list(graph.inputs)
    large = [v for v in graph.initializers.values()
             if v.const_value is not None and (v.const_value.nbytes > model_writer.LARGE_BYTES or is_lazy(v.const_value))]
    saved = {v: v.const_value for v in large}
    try:
        for value in large:
            tensor = value.const_value
            if as_inputs:
                value.shape, value.type = ir.Shape(tensor.shape), ir.TensorType(tensor.dtype)
                del graph.initializers[value.name]
                if value not in inputs:
                    graph.inputs.append(value)
            else:
                value.const_value = ir.ExternalTensor("(not written)", 0, tensor.nbytes, tensor.dtype,
                                                      shape=tensor.shape, name=value.name, base_dir="")
        yield
    finally:
        for value, tensor in saved.items():
            value.const_value = tensor
            if value.name not in graph.initializers:
                graph.initializers[value.name] = value
        graph.inputs[:] = inputs


def _infer_shapes(model: ir.Model, *, clear: bool) -> None:
    """onnx shape inference (with data propagation) on the model without its large
    initializers; the types and shapes found are set on the model's values. `clear`: forget the
    intermediate values' types and shapes first."""
    if clear:
        for graph in model.graphs():
            io = {*graph.inputs, *graph.outputs, *graph.initializers.values()}
            for node in graph:
                for value in node.outputs:
                    if value not in io and node.domain in ("", "ai.onnx"):
                        value.shape, value.type = None, None
    with progress.step("inferring shapes"):
        try:
            with _without_large_initializers(model, as_inputs=True):
                proto = ir.serde.serialize_model(model)
            inferred = onnx.shape_inference.infer_shapes(proto, strict_mode=False, data_prop=True)
            found = ir.serde.deserialize_model(inferred)
        except Exception:  # inference is a help, never a requirement
            return
    for graph, inferred_graph in zip(model.graphs(), found.graphs()):
        values = ir.convenience.create_value_mapping(graph)
        for name, value in ir.convenience.create_value_mapping(inferred_graph).items():
            target = values.get(name)
            if target is None or target.const_value is not None:
                continue
            if value.type is not None and target.type is None:
                target.type = value.type
            if value.shape is not None and (target.shape is None or not target.shape.is_static()):
                target.shape = value.shape


def _passes_checker(model: ir.Model) -> bool:
    try:
        with _without_large_initializers(model, as_inputs=True):
            proto = ir.serde.serialize_model(model)
        onnx.checker.check_model(proto)
        return True
    except onnx.checker.ValidationError:
        return False
