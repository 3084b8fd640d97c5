"""The low-rank pass (`optimize --low-rank`): after fusion, each FusedLSTM node's input weights W
([4H, I_l] per layer and direction, the four gates together) and recurrent weights R ([4H, H])
are replaced by truncated-SVD factors (docs/ops.md, Factored weights), and the error this costs
is measured against the unfactored optimized model (lstm_ort.low_rank_error). Opt-in, and never
silent: every matrix is listed in the report with its rank or why it was kept whole, and the
error figures go with it; a bound on the error refuses the model rather than return it. Never
slower: a matrix is factored only where that is expected to make its layer faster on the device
the model is meant for (`LowRank.device`; the rule is low_rank_cost.factoring_pays).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import onnx
import onnx_ir as ir

from lstm_ort.ops.factoring import energy_rank, kept_energy, singular_values, truncated_svd
from lstm_ort.ops.identity import np_dtype
from lstm_ort.ops.packing import PARTS, pack_layers
from lstm_ort.rewriter.fused_node import change_fused_nodes, whole_layers
from lstm_ort.rewriter.graph_utils import add_constant, drop_if_unused
from lstm_ort.rewriter.low_rank_cost import DEVICES, factoring_pays, node_batches
from lstm_ort.rewriter.report import LowRankMatrix, LowRankReport, Report

TARGETS = {"input": ("input",), "recurrent": ("recurrent",), "both": PARTS}


class LowRankError(ValueError):
    """The low-rank option cannot be applied as asked (a rank no matrix can take)."""


class ErrorBoundExceeded(Exception):
    """The factored model's outputs are further from the unfactored model's than `max_error`;
    the report carries the figures."""


@dataclass(frozen=True)
class LowRank:
    """How to factor: one `rank` for every matrix, or the smallest rank per matrix keeping fraction
    `energy` of its squared singular values; `target` the matrices (input, recurrent or both).
    `device`: where the model will run, "cpu", "cuda" or "any" (both): a matrix is factored only
    where that is expected faster there (low_rank_cost.factoring_pays); None (the default): the
    devices this install runs (runtime.library.install_devices; the report says so). `batches`:
    the batch sizes the FusedLSTM nodes will be called with, for nodes whose batch the model (or
    --shape) leaves open; CUDA needs them to show that factoring pays."""

    rank: int | None = None
    energy: float | None = None
    target: str = "both"
    device: str | None = None
    batches: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if (self.rank is None) == (self.energy is None):
            raise ValueError("low rank: give either a rank or an energy, not both or neither")
        if self.rank is not None and (isinstance(self.rank, bool) or not isinstance(self.rank, (int, np.integer))
                                      or self.rank < 1):
            raise ValueError(f"low rank: the rank must be an integer >= 1, got {self.rank!r}")
        if self.energy is not None and not (isinstance(self.energy, (int, float)) and 0 < self.energy <= 1):
            raise ValueError(f"low rank: the energy must be a fraction in (0, 1], got {self.energy!r}")
        if self.target not in TARGETS:
            raise ValueError(f"low rank: the target must be one of {', '.join(TARGETS)}, got {self.target!r}")
        if self.device is not None and self.device not in DEVICES:
            raise ValueError(f"low rank: the device must be one of {', '.join(DEVICES)}, got {self.device!r}")
        batches = (self.batches,) if isinstance(self.batches, (int, np.integer)) else tuple(self.batches)
        if any(isinstance(b, bool) or not isinstance(b, (int, np.integer)) or b < 1 for b in batches):
            raise ValueError(f"low rank: the batch sizes must be integers >= 1, got {self.batches!r}")
        object.__setattr__(self, "batches", tuple(int(b) for b in batches))

    @property
    def parts(self) -> tuple[str, ...]:
        return TARGETS[self.target]

    def describe(self) -> str:
        how = f"rank {self.rank}" if self.rank is not None else f"energy {self.energy:g}"
        where = {"any": "CPU and CUDA", None: "the devices this install runs"}.get(self.device) or self.device.upper()
        return f"{how}, {self.target} weights, for {where}"


def factorize(model: onnx.ModelProto, option: LowRank, report: Report | None = None,
              shapes: dict[str, list[int]] | None = None) -> onnx.ModelProto:
    """A copy of `model` with the matrices `option` asks for factored in every FusedLSTM node whose
    weights are constants, where factoring pays on `option.device` at the node's batch sizes (the
    model's own or those `shapes`, dims by input name, give; else `option.batches`);
    `report.low_rank` lists every matrix. Raises LowRankError when a fixed rank exceeds the smaller
    side of every matrix it targets."""
    installed = option.device is None
    if installed:  # the devices this install runs: the CUDA ones only where they load
        from lstm_ort.runtime.library import install_devices

        option = replace(option, device=install_devices())
    summary = LowRankReport(option.describe() + (" (the devices this install runs)" if installed else ""))
    batches = node_batches(model, shapes) if option.device != "cpu" else {}
    out = change_fused_nodes(model, lambda graph, node: _factor_node(
        graph, node, option, summary, (batches[node.name],) if node.name in batches else option.batches))
    if option.rank is not None and summary.matrices and not summary.factored and all(
            m.rank == 0 and option.rank > min(m.shape) for m in summary.matrices):
        widest = max(min(m.shape) for m in summary.matrices)
        raise LowRankError(f"rank {option.rank} exceeds the smaller side of every matrix it targets (at most "
                           f"{widest} here): nothing to truncate")
    if report is not None:
        report.low_rank = summary
    return out


def factor_and_measure(model: onnx.ModelProto, option: LowRank, report: Report, *, calibration=None,
                       shapes: dict[str, list[int]] | None = None, max_error: float | None = None) -> onnx.ModelProto:
    """factorize(), then the error against `model` (the unfactored optimized model) on the
    calibration samples (a path to an .npz of input arrays with a leading sample axis, or a list
    of feed dicts) or on seeded random unit-scale inputs; raises ErrorBoundExceeded when the
    max-abs error of the outputs exceeds `max_error`."""
    from lstm_ort import low_rank_error  # runs sessions: the runtime's job, loaded only here

    factored = factorize(model, option, report, shapes)
    if not report.low_rank.factored:
        report.low_rank.inputs = "nothing factored: the model is the unfactored one"
        return factored
    measure_against(model, factored, report.low_rank, "low-rank", calibration=calibration, shapes=shapes,
                    max_error=max_error, changed=low_rank_error.is_factored)
    return factored


def measure_against(model: onnx.ModelProto, changed_model: onnx.ModelProto, summary, what: str, *, calibration,
                    shapes, max_error: float | None, changed) -> None:
    """Fills `summary` (a report.MeasuredError) with the error of `changed_model` against `model` on the
    calibration samples or seeded random inputs, the nodes `changed(node, constants)` picks measured
    alone; raises ErrorBoundExceeded when the max-abs error of the outputs exceeds `max_error`."""
    from lstm_ort import low_rank_error  # runs sessions: the runtime's job, loaded only here

    summary.max_error = max_error
    samples, summary.inputs = low_rank_error.samples_for(model, calibration, shapes)
    summary.outputs, summary.nodes = low_rank_error.measure(model, changed_model, samples, changed=changed, what=what)
    worst = summary.output_max_abs
    if max_error is not None and not worst <= max_error:  # NaN exceeds any bound
        raise ErrorBoundExceeded(f"{what} error: max-abs {worst:.3g} on the outputs exceeds --max-error {max_error:g}")


def _factor_node(graph, node: ir.Node, option: LowRank, summary: LowRankReport, batches: tuple[int, ...]) -> None:
    name = node.name or "<unnamed>"
    found = whole_layers(node)
    if isinstance(found, str):
        summary.skipped.append(f"{name}: {found}")
        return
    layers, w = found
    W = w.numpy().reshape(-1)
    D = layers[0].num_directions
    precision = node.attributes.get("precision")
    cost = {"hidden": node.attributes["hidden_size"].as_int(), "device": option.device, "batches": batches,
            "precision": precision.as_string() if precision is not None else None}
    summary.elements_before += W.size
    for layer_index, layer in enumerate(layers):
        found = {part: [None] * D for part in PARTS}
        for d in range(D):
            for part in option.parts:
                matrix = (layer.W if part == "input" else layer.R)[d]
                entry, factors = _factor_matrix(matrix, option, cost)
                entry.node, entry.layer, entry.direction, entry.part = name, layer_index, d, part
                summary.matrices.append(entry)
                found[part][d] = factors
        layer.W_factors = found["input"] if any(f is not None for f in found["input"]) else None
        layer.R_factors = found["recurrent"] if any(f is not None for f in found["recurrent"]) else None
    packed = pack_layers(layers, np_dtype(w.dtype))
    if not packed.ranks.any:
        summary.elements_after += W.size
        return
    summary.elements_after += packed.W.size + packed.factors.size
    base = name if node.name else "fused_lstm"
    old = node.inputs[1]
    node.replace_input_with(1, add_constant(graph, node, base + "_W_low_rank", packed.W))
    node.resize_inputs(8)
    node.replace_input_with(7, add_constant(graph, node, base + "_factors", packed.factors))
    count = len(layers) * D
    node.attributes["rank_input"] = ir.AttrInt64s("rank_input", list(packed.ranks.input or (0,) * count))
    node.attributes["rank_recurrent"] = ir.AttrInt64s("rank_recurrent", list(packed.ranks.recurrent or (0,) * count))
    drop_if_unused(graph, old)


def _factor_matrix(matrix: np.ndarray, option: LowRank, cost: dict):
    """(its report entry, its Factors or None) for one ONNX matrix [4H, n]; `cost`: the rest of
    factoring_pays' arguments (the node's H, precision and batch sizes, the device)."""
    G, n = matrix.shape
    entry = LowRankMatrix(node="", layer=0, direction=0, part="", shape=[G, n], elements=G * n)
    s = singular_values(matrix) if option.rank is None else None  # a fixed rank needs them only when factored
    rank = option.rank if s is None else energy_rank(s, option.energy)
    if rank > min(G, n):
        entry.reason = f"rank {rank} exceeds min({G}, {n}): nothing to truncate"
        return entry, None
    verdict = factoring_pays(rank=rank, width=n, **cost)
    if not verdict.pays:
        entry.reason = verdict.reason
        return entry, None
    s = singular_values(matrix) if s is None else s
    entry.rank, entry.kept_energy, entry.elements = rank, kept_energy(s, rank), rank * (n + G)
    return entry, truncated_svd(matrix, rank)
