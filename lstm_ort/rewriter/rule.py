"""What a rewrite rule is: find candidates in a graph, check one (a refusal carries its reason),
rewrite it. The driver (lstm_ort.rewriter.optimize) runs a plain list of rules, DEFAULT_RULES,
and keeps the report; a rule knows nothing of the report."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable
from typing import Any

import onnx_ir as ir


class CheckResult:
    """Truthy when the rule may rewrite; else ``reason`` says why not (as onnxscript's
    ``check_result.fail("reason")``)."""

    def __init__(self, reason: str = "") -> None:
        self.reason = reason

    def __bool__(self) -> bool:
        return not self.reason

    @classmethod
    def fail(cls, reason: str) -> CheckResult:
        assert reason, "a refusal needs a reason"
        return cls(reason)


OK = CheckResult()


class Rule(ABC):
    """One rewrite. ``name`` keys the report's per-rule counts."""

    name: str

    @abstractmethod
    def find(self, graph: ir.Graph | ir.Function) -> Iterable[Any]:
        """The candidates (matches) of this rule in one graph, before any is rewritten."""

    @abstractmethod
    def nodes(self, match: Any) -> list[ir.Node]:
        """The nodes a match covers: the report follows them from rule to rule."""

    @abstractmethod
    def describe(self, match: Any) -> str:
        """The match's sizes in words, for the report."""

    @abstractmethod
    def check(self, match: Any) -> CheckResult:
        """Whether the match can be rewritten exactly, or why not."""

    @abstractmethod
    def rewrite(self, graph: ir.Graph | ir.Function, match: Any) -> ir.Node:
        """Replaces the match by one FusedLSTM node and returns it."""
