"""Every rule at every default-domain opset from 9 to 21: the nodes a rule writes around its
FusedLSTM (Squeeze, Unsqueeze, Slice, Gather, Transpose, Reshape, Concat) must be valid in the
model's own opset (axes are attributes before 13, Slice bounds before 10). The rewritten model
passes the full onnx checker and gives the original's outputs on stock onnxruntime."""

import importlib

import numpy as np
import onnx
import pytest

from lstm_ort.rewriter import Report, optimize
from lstm_ort.rewriter.rules import DEFAULT_RULES
from lstm_ort.testing import max_abs, run
from lstm_ort.verify import random_feeds

OPSETS = list(range(9, 22))


def _rule_models() -> dict:
    """Every rule's models, from OPSET_MODELS in the test beside it (a rule added to DEFAULT_RULES
    brings its own): name -> (rule, builder(opset), first opset)."""
    models = {}
    for rule in DEFAULT_RULES:
        tests = importlib.import_module(type(rule).__module__ + "_test")
        for name, (build, first) in tests.OPSET_MODELS.items():
            models[name] = (rule.name, build, first)
    return models


MODELS = _rule_models()
CASES = [(name, opset) for name, (_, _, first) in MODELS.items() for opset in OPSETS if opset >= first]


def test_every_rule_has_opset_models():
    for rule in DEFAULT_RULES:
        assert hasattr(importlib.import_module(type(rule).__module__ + "_test"), "OPSET_MODELS"), rule.name


@pytest.mark.parametrize("name,opset", CASES, ids=[f"{n}-opset{o}" for n, o in CASES])
def test_rule_writes_nodes_of_the_model_opset(name, opset):
    rule, build, _ = MODELS[name]
    model = build(opset)
    onnx.checker.check_model(model, full_check=True)  # the input is valid at this opset
    report = Report()
    out = optimize(model, report=report)
    assert report.all_rewritten and report.rules[rule].hits >= 1, report.table()
    assert [o.version for o in out.opset_import if o.domain in ("", "ai.onnx")] == [opset]
    onnx.checker.check_model(out, full_check=True)
    feeds = random_feeds(model, np.random.default_rng(opset))
    assert max_abs(run(out, feeds), run(model, feeds, fused=False)) <= 1e-5
