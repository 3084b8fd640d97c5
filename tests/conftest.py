import os
import zlib

import numpy as np
import onnxruntime as ort
import pytest


# The suite tests FusedLSTM's own CPU kernel: nodes that name no cpu_kernel run it alone, not the
# per-shape choice between it and onnxruntime's kernel (which would make a case's kernel depend on
# timing). tests/test_cpu_kernel_choice.py names the choice on its nodes. Read once per process,
# so set before any session is made.
os.environ.setdefault("LSTM_ORT_CPU_KERNEL", "fused")


def cuda_available() -> bool:
    return "CUDAExecutionProvider" in ort.get_available_providers()


def pytest_report_header(config):
    """Which lstm_ort and which op library the tests run against (a source tree or an install)."""
    import lstm_ort

    try:
        library = lstm_ort.get_library_path()
    except FileNotFoundError as e:
        library = f"none ({e})"
    return [f"lstm_ort: {lstm_ort.__file__}", f"op library: {library}"]


def pytest_collection_modifyitems(config, items):
    if cuda_available():
        return
    skip = pytest.mark.skip(reason="onnxruntime's CUDA execution provider is not available on this machine")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def rng(request):
    # A different, reproducible draw for every test case (crc32, not hash(): str hashes change
    # with every interpreter run).
    return np.random.default_rng(zlib.crc32(request.node.nodeid.encode()))


@pytest.fixture(autouse=True)
def private_tuning_cache(tmp_path, monkeypatch):
    """Every test sees its own, empty `lstm-ort tune` cache, never the user's."""
    monkeypatch.setenv("LSTM_ORT_CACHE_DIR", str(tmp_path / "lstm-ort-cache"))


@pytest.fixture
def corpus():
    """models/corpus.py, loaded once (it is no package)."""
    import importlib.util
    import sys
    from pathlib import Path

    if "corpus" not in sys.modules:
        spec = importlib.util.spec_from_file_location("corpus", Path(__file__).parents[1] / "models" / "corpus.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules["corpus"] = module  # dataclasses look their module up while the file runs
        spec.loader.exec_module(module)
    return sys.modules["corpus"]
