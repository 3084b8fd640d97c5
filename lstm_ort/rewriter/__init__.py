"""The rewriter: exported LSTMs -> lstm_ort.FusedLSTM, with a report of what was and was not taken.

``optimize`` runs a plain list of rules (rules.DEFAULT_RULES), each a pattern / check / rewrite
(rule.Rule); the report holds one finding per LSTM or fused stack and counts each rule's hits
and refusals.
"""

from lstm_ort.rewriter.driver import optimize
from lstm_ort.rewriter.report import Finding, Report
from lstm_ort.runtime.model_io import ModelError, load_model

__all__ = ["Finding", "ModelError", "Report", "load_model", "optimize"]
