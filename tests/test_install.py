"""How an install says what it lacks: no onnxruntime, two onnxruntimes sharing one module, a
session that asks for the CUDA execution provider without lstm_ort's CUDA kernels loaded."""

import importlib.util
import os
from pathlib import Path

import onnxruntime as ort
import pytest

import lstm_ort
from lstm_ort.runtime import cuda_status, onnxruntime_check, session

ROOT = Path(__file__).resolve().parents[1]


def test_no_onnxruntime_is_a_clear_import_error(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "onnxruntime" else real(name, *a))
    with pytest.raises(ImportError, match=r"lstm-ort\[cpu\].*lstm-ort\[gpu\]"):
        onnxruntime_check.check_onnxruntime()


def test_two_onnxruntimes_warn(monkeypatch):
    monkeypatch.setattr(onnxruntime_check, "installed_onnxruntimes", lambda: ["onnxruntime 1.32.0", "onnxruntime-gpu 1.31.1"])
    with pytest.warns(RuntimeWarning, match="share the `onnxruntime` module.*pip uninstall -y onnxruntime onnxruntime-gpu"):
        onnxruntime_check.check_onnxruntime()


def test_one_onnxruntime_is_quiet(recwarn):
    if len(onnxruntime_check.installed_onnxruntimes()) != 1:
        pytest.skip(f"this environment has {onnxruntime_check.installed_onnxruntimes()}")
    onnxruntime_check.check_onnxruntime()
    assert not [w for w in recwarn if "lstm_ort" in str(w.message)]


@pytest.mark.skipif("CUDAExecutionProvider" in ort.get_available_providers(), reason="a CUDA machine")
def test_cuda_status_says_why_not():
    loaded, why = cuda_status()
    assert not loaded
    # A CPU-only build has no plugin; a CUDA build (the wheel) has one that cannot load here.
    assert "has no CUDA kernels" in why or "could not load the CUDA kernels" in why, why


def test_session_warns_when_cuda_kernels_are_missing(monkeypatch):
    monkeypatch.setattr(session.ort, "get_available_providers", lambda: ["CUDAExecutionProvider", "CPUExecutionProvider"])
    monkeypatch.setattr(session, "cuda_status", lambda: (False, "could not load the CUDA kernels: libcublas.so.13: missing"))
    with pytest.warns(RuntimeWarning, match="CUDA kernels are not loaded.*libcublas.so.13"):
        session.warn_without_cuda_kernels()


@pytest.mark.skipif("CUDAExecutionProvider" in ort.get_available_providers(), reason="a CUDA machine")
def test_session_asking_for_cuda_without_it_warns():
    from lstm_ort.builders import LstmSpec, fused_model, random_layers
    import numpy as np

    spec = LstmSpec(4, 8)
    model = fused_model(spec, random_layers(spec, np.random.default_rng(0)), np.float32)
    with pytest.warns(RuntimeWarning, match="this onnxruntime has none"):
        lstm_ort.InferenceSession(model, providers=["CUDAExecutionProvider", "CPUExecutionProvider"])


@pytest.mark.gpu
def test_cuda_kernels_load_where_the_cuda_provider_is():
    loaded, what = cuda_status()
    assert loaded, what


@pytest.mark.skipif(not os.environ.get("LSTM_ORT_TEST_INSTALLED"), reason="only when testing an installed wheel")
def test_tests_run_against_the_install():
    assert ROOT not in Path(lstm_ort.__file__).resolve().parents, lstm_ort.__file__
    assert "LSTM_ORT_LIBRARY" not in os.environ
    assert ROOT not in Path(lstm_ort.get_library_path()).resolve().parents
