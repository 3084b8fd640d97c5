"""What the rewriter found: one finding per LSTM (or fused stack), rewritten or not and why."""

from __future__ import annotations

import json
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
class RuleCounts:
    hits: int = 0
    refusals: dict[str, int] = field(default_factory=dict)  # reason -> how often


@dataclass
class Report:
    findings: list[Finding] = field(default_factory=list)
    rules: dict[str, RuleCounts] = field(default_factory=dict)  # rule name -> its counts

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
        return json.dumps({"lstms": self.lstm_count, "all_rewritten": self.all_rewritten,
                           "findings": [asdict(f) for f in self.findings],
                           "rules": {name: asdict(c) for name, c in self.rules.items()}}, indent=2)

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
        return "\n".join(lines)
