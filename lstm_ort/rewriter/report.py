"""What the rewriter found: one finding per LSTM (or fused stack), rewritten or not and why."""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field


@dataclass
class Finding:
    location: str  # "graph", "graph/<node>.<attribute>" for subgraphs, "function:<name>"
    nodes: list[str]  # the LSTM nodes this finding covers
    shape: str  # I, H, directions, layout
    layers: int = 1
    rewritten: bool = False
    reason: str = ""  # why not, when not rewritten
    fused_node: str = ""
    precision: str = ""  # the precision mode the FusedLSTM node runs in, when rewritten


@dataclass
class LowRankMatrix:
    """One matrix the low-rank pass looked at: an ONNX W[d] [4H, I_l] ("input") or R[d] [4H, H]
    ("recurrent") of one layer and direction of a FusedLSTM node."""

    node: str
    layer: int
    direction: int
    part: str
    shape: list[int]  # [4H, n] in ONNX terms
    rank: int = 0  # 0: kept whole (reason says why)
    kept_energy: float = 1.0  # fraction of the squared singular values the factors keep
    elements: int = 0  # weights after: rank * (n + 4H) factored, n * 4H whole
    reason: str = ""


@dataclass
class ErrorFigure:
    """Error of the factored model against the unfactored optimized one, on the same inputs:
    max-abs, and relative = ||factored - unfactored||_2 / ||unfactored||_2 over every element of
    every sample."""

    name: str  # a model output, or a FusedLSTM node (its Y, Y_h and Y_c together)
    max_abs: float
    relative: float
    inputs: str = ""  # nodes: "captured" (its inputs in the unfactored model's run) or why random


@dataclass(kw_only=True)
class MeasuredError:
    """What a pass that changes weights (--low-rank, --precision int8) costs against the model
    before it, on the same inputs (lstm_ort.low_rank_error)."""

    inputs: str = ""  # what the error was measured on
    outputs: list[ErrorFigure] = field(default_factory=list)
    nodes: list[ErrorFigure] = field(default_factory=list)  # each changed node alone
    max_error: float | None = None  # the bound asked for (max-abs over the outputs), if any

    @property
    def output_max_abs(self) -> float:
        return max((o.max_abs for o in self.outputs), default=0.0)

    def error_lines(self, what: str) -> list[str]:
        if not (self.outputs or self.nodes):
            return []
        lines = [f"{what} ({self.inputs}):"]
        lines += [f"  output {f.name}: max-abs {f.max_abs:.3g}, relative {f.relative:.3g}" for f in self.outputs]
        lines += [f"  node {f.name}: max-abs {f.max_abs:.3g}, relative {f.relative:.3g} ({f.inputs} inputs)"
                  for f in self.nodes]
        return lines


@dataclass
class LowRankReport(MeasuredError):
    option: str  # "rank 64", "energy 0.99", and the target
    matrices: list[LowRankMatrix] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)  # FusedLSTM nodes not looked at, and why
    elements_before: int = 0  # W (and factors) elements of the nodes looked at
    elements_after: int = 0

    @property
    def factored(self) -> int:
        return sum(1 for m in self.matrices if m.rank)

    def table(self) -> list[str]:
        lines = [f"low-rank ({self.option}): {self.factored} of {len(self.matrices)} matrices factored, "
                 f"weights {self.elements_before} -> {self.elements_after} elements"]
        for m in self.matrices:
            what = (f"rank {m.rank}, keeps {m.kept_energy:.4f} of the energy" if m.rank
                    else f"kept whole: {m.reason}")
            lines.append(f"  {m.node} layer {m.layer} dir {m.direction} {m.part} {m.shape}: {what}")
        lines += [f"  {name}: not factored: {why}" for name, why in (s.split(": ", 1) for s in self.skipped)]
        return lines + self.error_lines("low-rank error against the unfactored optimized model")


@dataclass
class Int8Node:
    """One FusedLSTM node the int8 pass (optimize --precision int8) gave int8 weights."""

    node: str
    blocks: int  # layers x directions
    bytes_before: int  # W, float32
    bytes_after: int  # W int8 and W_scale
    weight_error: float  # the largest ||w - levels x scale||_2 / ||w||_2 of its W[d] and R[d]


@dataclass
class Int8Report(MeasuredError):
    quantized: list[Int8Node] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)  # FusedLSTM nodes left float, and why

    def table(self) -> list[str]:
        lines = [f"int8 weights (per output channel): {len(self.quantized)} FusedLSTM nodes, W "
                 f"{sum(n.bytes_before for n in self.quantized)} -> {sum(n.bytes_after for n in self.quantized)} bytes"]
        lines += [f"  {n.node}: {n.blocks} layer-directions, weights' relative error <= {n.weight_error:.3g}"
                  for n in self.quantized]
        lines += [f"  {name}: left float: {why}" for name, why in (s.split(": ", 1) for s in self.skipped)]
        return lines + self.error_lines("int8 error against the float optimized model")


@dataclass
class RuleCounts:
    hits: int = 0
    refusals: dict[str, int] = field(default_factory=dict)  # reason -> how often


@dataclass
class Report:
    findings: list[Finding] = field(default_factory=list)
    rules: dict[str, RuleCounts] = field(default_factory=dict)  # rule name -> its counts
    low_rank: LowRankReport | None = None  # optimize --low-rank: what was factored, and the error it costs
    int8: Int8Report | None = None  # optimize --precision int8: what was quantized, and the error it costs

    def count(self, rule: str, refused: str = "") -> None:
        counts = self.rules.setdefault(rule, RuleCounts())
        if refused:
            counts.refusals[refused] = counts.refusals.get(refused, 0) + 1
        else:
            counts.hits += 1

    @property
    def lstm_count(self) -> int:
        return sum(len(f.nodes) for f in self.findings)

    @property
    def all_rewritten(self) -> bool:
        return all(f.rewritten for f in self.findings)

    def to_json(self) -> str:
        doc = {"lstms": self.lstm_count, "all_rewritten": self.all_rewritten,
               "findings": [asdict(f) for f in self.findings],
               "rules": {name: asdict(c) for name, c in self.rules.items()}}
        if self.low_rank is not None:
            doc["low_rank"] = _finite(asdict(self.low_rank))
        if self.int8 is not None:
            doc["int8"] = _finite(asdict(self.int8))
        return json.dumps(doc, indent=2)

    def table(self) -> str:
        if not self.findings:
            return "no LSTM found"
        rows = [("location", "LSTM nodes", "shape", "layers", "precision", "result")]
        for f in self.findings:
            result = f"rewritten -> {f.fused_node}" if f.rewritten else f"left: {f.reason}"
            rows.append((f.location, ",".join(f.nodes), f.shape, str(f.layers), f.precision or "-", result))
        widths = [max(len(r[i]) for r in rows) for i in range(5)]
        lines = ["  ".join(c.ljust(w) for c, w in zip(r[:5], widths)) + "  " + r[5] for r in rows]
        lines.insert(1, "-" * len(lines[0]))
        done = sum(len(f.nodes) for f in self.findings if f.rewritten)
        lines.append(f"{done} of {self.lstm_count} LSTM nodes rewritten into "
                     f"{sum(1 for f in self.findings if f.rewritten)} FusedLSTM nodes")
        for name, c in self.rules.items():
            refused = "".join(f"; refused {n}x: {reason}" for reason, n in c.refusals.items())
            lines.append(f"rule {name}: {c.hits} rewritten{refused}")
        if self.low_rank is not None:
            lines += self.low_rank.table()
        if self.int8 is not None:
            lines += self.int8.table()
        return "\n".join(lines)


def _finite(value):
    """JSON has no NaN or infinity: such figures are written as strings."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite(v) for v in value]
    return value
