"""The kernels' debug overrides (custom_ops/overrides.h; docs/architecture.md, "Overrides"): session
config entries lstm_ort.debug.<key> reach every FusedLSTM node as its `debug` attribute, one strict
parser checks them (and their environment aliases) when a kernel is made, and strict mode turns a
CUDA fallback into an error that names it."""

import re
import subprocess

import onnxruntime as ort
import pytest

from lstm_ort.builders import LstmSpec, fused_model, random_layers
from lstm_ort.ops.identity import DEBUG_KEYS
from lstm_ort.runtime.nodes import fused_nodes
from lstm_ort.runtime.session import DEBUG_PREFIX, InferenceSession, node_options, with_attributes
from lstm_ort.testing import CUDA, child_python, make_feeds, max_abs, planned_fallbacks, run_fused, run_fused_strict

SPEC = LstmSpec(input_size=5, hidden_size=8, num_layers=2, direction="bidirectional")


def options(**entries) -> ort.SessionOptions:
    so = ort.SessionOptions()
    for key, value in entries.items():
        so.add_session_config_entry(DEBUG_PREFIX + key, value)
    return so


def debug_attributes(model_bytes: bytes) -> list[str]:
    import onnx

    model = onnx.load_from_string(model_bytes)
    return [a.s.decode() for n in fused_nodes(model) for a in n.attribute if a.name == "debug"]


def test_entries_become_the_debug_attribute_in_key_order(rng):
    forced = node_options(options(gemm_step="1", strict="1"))
    assert forced == {"debug": "strict=1;gemm_step=1"}
    model = fused_model(SPEC, random_layers(SPEC, rng)).SerializeToString()
    assert debug_attributes(with_attributes(model, forced)) == ["strict=1;gemm_step=1"]
    assert "debug" not in node_options(ort.SessionOptions())


def test_keyword_sets_the_entries_and_cpu_results_are_unchanged(rng):
    layers = random_layers(SPEC, rng)
    feeds = make_feeds(SPEC, 6, 3, rng)
    plain = run_fused(SPEC, layers, feeds)
    sess = InferenceSession(fused_model(SPEC, layers), debug={"strict": "1", "strategy": "tiled"})
    assert max_abs(sess.run(None, feeds), plain) == 0.0  # the CPU kernel has no CUDA fallback to refuse


def test_unknown_key_is_refused_in_python(rng):
    with pytest.raises(ValueError, match="debug key must be one of"):
        InferenceSession(fused_model(SPEC, random_layers(SPEC, rng)), debug={"fastest": "1"})
    with pytest.raises(ValueError, match="may not contain"):
        node_options(options(strategy="tiled;strict=1"))


@pytest.mark.parametrize("key,value,message", [
    ("mma", "int8", "debug key mma must be fma, 3xtf32, tf32, fp16 or bf16, got 'int8'"),
    ("gemm_step", "yes", "debug key gemm_step must be 0 or 1, got 'yes'"),
    ("cluster_slices", "3", "debug key cluster_slices must be 2, 4 or 8, got '3'"),
])
def test_bad_value_fails_the_session_naming_the_key(key, value, message, rng):
    with pytest.raises(Exception, match=message):
        InferenceSession(fused_model(SPEC, random_layers(SPEC, rng)), debug={key: value})


@pytest.mark.parametrize("key, value, takes", [
    ("strict", "2", "0 or 1"), ("strategy", "warp", "auto, tiled, splitk, persistent, wavefront or cluster"),
    ("gemm_step", "yes", "0 or 1"), ("cluster_size", "0", "a cluster size from 1 to 16"),
    ("persistent_chunks", "5", "1, 2, 3 or 4"), ("mma", "int8", "fma, 3xtf32, tf32, fp16 or bf16"),
])
def test_a_bad_value_fails_a_cpu_session_by_every_way_in(key, value, takes, monkeypatch, rng):
    """Issue 45 row 7: the per-node keys are checked on every kernel, the CPU's too, whether the value
    comes as the environment's alias, the session entry or the debug keyword (once the CPU kernel
    never read the alias: LSTM_ORT_STRICT=2 ran)."""
    model = fused_model(SPEC, random_layers(SPEC, rng))
    with pytest.raises(Exception, match=f"debug key {key} must be {takes}, got '{value}'"):
        InferenceSession(model, debug={key: value})
    with pytest.raises(Exception, match=f"debug key {key} must be {takes}, got '{value}'"):
        InferenceSession(model, options(**{key: value}))
    alias = f"LSTM_ORT_{key.upper()}"
    monkeypatch.setenv(alias, value)
    with pytest.raises(Exception, match=f"{alias} must be {takes}, got '{value}'"):
        InferenceSession(model, providers=["CPUExecutionProvider"])
    monkeypatch.delenv(alias)
    InferenceSession(model, providers=["CPUExecutionProvider"])


_LISTS_ENTRIES = tuple(int(v) for v in ort.__version__.split(".")[:2]) >= (1, 23)


@pytest.mark.skipif(not _LISTS_ENTRIES, reason="onnxruntime lists a session's config entries from 1.23")
@pytest.mark.parametrize("key", ["lstm_ort.debug.stirct", "lstm_ort.cpu_kernal", "lstm_ort.precison",
                                 "lstm_ort.debug.", "lstm_ort.", "lstm_ort.debug.cpu_threads"])
def test_a_session_entry_nothing_reads_is_refused_naming_it(key, rng):
    """Raw entries under "lstm_ort." (issue 45 row 7): a misspelt key fails the session through
    lstm_ort.InferenceSession and through onnxruntime's own registration alike."""
    from lstm_ort.runtime.library import get_library_path

    model = fused_model(SPEC, random_layers(SPEC, rng)).SerializeToString()
    so = ort.SessionOptions()
    so.add_session_config_entry(key, "1")
    with pytest.raises(Exception, match=f"session config entry '{re.escape(key)}' is none of lstm_ort's"):
        InferenceSession(model, so, providers=["CPUExecutionProvider"])
    raw = ort.SessionOptions()
    raw.add_session_config_entry(key, "1")
    with pytest.raises(Exception, match=re.escape(key)):
        raw.register_custom_ops_library(get_library_path())


def test_session_entries_lstm_ort_reads_and_others_pass(rng):
    layers = random_layers(SPEC, rng)
    model = fused_model(SPEC, layers)
    so = options(strict="0")
    so.add_session_config_entry("lstm_ort.cpu_kernel", "auto")
    so.add_session_config_entry("lstm_ortx.anything", "1")  # not lstm_ort's prefix
    so.add_session_config_entry("session.intra_op.allow_spinning", "1")
    feeds = make_feeds(SPEC, 3, 2, rng)
    got = InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"]).run(None, feeds)
    assert max_abs(got, run_fused(SPEC, layers, feeds)) == 0


def test_every_key_has_a_session_entry():
    assert list(DEBUG_KEYS) == ["strict", "strategy", "mma", "gemm_step", "half_step_weights", "cluster_size",
                                "cluster_slices", "persistent_tile", "persistent_chunks", "low_rank_stepwise",
                                "call_graphs", "mma_step", "mma_step_tile", "mma_step_pdl", "mma_step_resident",
                                "mma_step_layers", "refuse_launches"]


def test_bad_cpu_alias_fails_the_session_naming_the_variable(tmp_path, rng):
    """The CPU knobs are read once per process: a fresh interpreter with a bad one."""
    path = tmp_path / "m.onnx"
    path.write_bytes(fused_model(SPEC, random_layers(SPEC, rng)).SerializeToString())
    code = ("import sys; from lstm_ort.runtime.session import InferenceSession\n"
            "try:\n    InferenceSession(sys.argv[1]).run(None, {'X': __import__('numpy').zeros((2, 1, 5), 'float32')})\n"
            "except Exception as e:\n    print(e)\n")
    argv, env = child_python(code, str(path), env={"LSTM_ORT_CPU_SPLIT": "two"})
    done = subprocess.run(argv, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert "LSTM_ORT_CPU_SPLIT must be 0, 1, 2 or 3, got 'two'" in done.stdout + done.stderr


@pytest.mark.gpu
def test_strict_mode_refuses_a_planned_fallback(rng):
    """cluster forced where it does not plan (H=512) runs as auto, and says so; strict refuses it."""
    spec = LstmSpec(input_size=16, hidden_size=512, num_layers=1)
    layers = random_layers(spec, rng)
    feeds = make_feeds(spec, 5, 16, rng)
    assert any("cluster does not plan at H=512 B=16" in f for f in planned_fallbacks(spec, 5, 16, strategy="cluster"))
    with pytest.raises(Exception, match="strict mode .* refuses a fallback: cluster does not plan"):
        run_fused(spec, layers, feeds, providers=CUDA, strategy="cluster", debug={"strict": "1"})
    loose = run_fused(spec, layers, feeds, providers=CUDA, strategy="cluster")
    assert max_abs(loose, run_fused_strict(spec, layers, feeds, strategy="cluster")) == 0.0


@pytest.mark.gpu
def test_strict_mode_runs_a_forced_path_that_holds(rng):
    spec = LstmSpec(input_size=16, hidden_size=64, num_layers=3)
    layers = random_layers(spec, rng)
    feeds = make_feeds(spec, 20, 8, rng)
    assert planned_fallbacks(spec, 20, 8, strategy="wavefront") == []
    strict = run_fused(spec, layers, feeds, providers=CUDA, strategy="wavefront", debug={"strict": "1"})
    assert max_abs(strict, run_fused(spec, layers, feeds)) <= 2e-5
