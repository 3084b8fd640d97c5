import collections
import os
import sys
import zlib
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest


# The suite tests FusedLSTM's own CPU kernel: nodes that name no cpu_kernel run it alone, not the
# per-shape choice between it and onnxruntime's kernel (which would make a case's kernel depend on
# timing). tests/test_cpu_kernel_choice.py names the choice on its nodes. Read once per process,
# so set before any session is made.
os.environ.setdefault("LSTM_ORT_CPU_KERNEL", "fused")

# The tests' shared helpers (streams_support.py) import as modules of their own: the suite runs in
# importlib mode, which puts no test directory on the path.
sys.path.insert(0, str(Path(__file__).parent))


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


# The test tiers (README, "Tests"), decided here and nowhere else. SMOKE: the quick tier, a few
# hundred cases standing for the suite (pytest -m "smoke and not gpu": under a minute on 2 cores;
# pytest -m "gpu and smoke": the quick device check). Keys: a file, or file::test (one test
# function); the value n: every n-th of its cases in collection order (1: all of them).
SMOKE = {
    # every rule
    **{f"lstm_ort/rewriter/rules/{rule}_test.py": 2 for rule in (
        "single_lstm", "dynamic_quantize_lstm", "cell_loop", "cell_chain", "unrolled_cell", "bidirectional_pair",
        "stack_lstm")},
    # the op against stock and onnx.reference, its options and its refusals
    "tests/test_cpu_parity.py": 16, "tests/test_reference_op.py": 10, "tests/test_low_rank_op.py": 6,
    "tests/test_cpu_runtime.py": 8, "tests/test_cpu_kernel_choice.py": 5, "tests/test_int8_kernel.py": 3,
    "tests/test_bad_input.py": 3, "tests/test_nan_semantics.py": 2, "tests/test_backend_cases.py": 2,
    "tests/test_op_identity.py": 3, "tests/test_precision_option.py": 3, "tests/test_strategy_option.py": 3,
    "tests/test_bf16_cpu.py": 8,
    "tests/test_debug_overrides.py": 2, "tests/test_install.py": 2, "tests/test_tuning.py": 3,
    # the CLI's paths: the rules at each opset, --check, the passes, the files it writes
    "tests/test_cli.py": 2, "tests/test_cli_safety.py": 3, "tests/test_cli_ragged_check.py": 3,
    "tests/test_precision_cli.py": 3, "tests/test_rule_opsets.py": 8, "tests/test_low_rank.py": 4,
    "tests/test_int8_precision.py": 2, "tests/test_cli_output_files.py": 3, "tests/test_package_layout.py": 1,
    # the axis analysis, serving, streams, and the pipeline on its fake devices
    "tests/test_axes.py": 2, "tests/test_streams_axes.py": 2, "tests/test_serving.py": 2,
    "tests/test_serving_safety.py": 4, "tests/test_serving_cli.py": 1, "tests/test_streams.py": 4,
    "tests/test_streams_bad_input.py": 4, "tests/test_streams_batchify.py": 3, "tests/test_streams_cli.py": 5,
    "tests/test_streams_device.py": 3, "tests/test_streams_fuzz.py::test_fuzz": 3, "tests/test_streams_bench.py": 3,
    "tests/test_pipeline.py": 4,
    # GPU (marked gpu: skipped without the CUDA EP)
    "tests/test_gpu_parity.py::test_shapes": 40, "tests/test_gpu_parity.py::test_features": 20,
    "tests/test_gpu_parity.py::test_cluster_kernel": 7, "tests/test_gpu_parity.py::test_split_tf32_projection": 10,
    "tests/test_gpu_parity.py::test_reference_sizes": 5, "tests/test_gpu_parity.py::test_gemm_step": 6,
    "tests/test_gpu_parity.py::test_float16": 5, "tests/test_precision_gpu.py::test_mode_within_its_bound": 10,
    "tests/test_precision_gpu.py::test_gemm_step_on_half_weights": 15,
    "tests/test_low_rank_gpu.py::test_cuda_matches_cpu": 6, "tests/test_low_rank_gpu.py::test_cell_features": 8,
    "tests/test_low_rank_gpu.py::test_optimized_low_rank_model_on_cuda": 1,
    "tests/test_mma_step_gpu.py::test_forced_step_within_its_bound": 4,
    "tests/test_mma_step_gpu.py::test_auto_takes_the_step_inside_its_rule_and_says_so": 1,
    "tests/test_pipeline_gpu.py::test_every_split_both_schedules": 3,
    "tests/test_pipeline_gpu.py::test_two_stages_on_one_gpu": 1, "tests/test_pipeline_gpu.py::test_ops_before_and_after": 1,
    "tests/test_serving.py::test_cuda_session_runs_with_io_binding": 1,
    "tests/test_int8_kernel.py::test_a_cuda_session_runs_int8_nodes_on_the_cpu_kernel": 1,
    "tests/test_install.py::test_cuda_kernels_load_where_the_cuda_provider_is": 1,
    "tests/test_debug_overrides.py::test_strict_mode_refuses_a_planned_fallback": 1,
}
# SLOW: the long cases (pytest -m "not slow" leaves them out): a file or file::test -> why.
SLOW = {
    "tests/test_torch_exports.py": "torch exports (TorchScript and dynamo) of every fixture",
    "tests/test_corpus.py": "third-party exports, optimized and checked",
    "tests/test_fuzz_cli.py": "drawn models through the CLI",
    "tests/test_serving_ray.py": "a local Ray cluster",
    "tests/test_native_units.py": "the C++ unit tests",
    "tests/test_pipeline.py::test_real_export_through_the_pipeline": "torch exports",
    "tests/test_pipeline.py::test_corpus_models_are_taken_or_refused_naming_the_node": "the corpus",
    "tests/test_pipeline.py::test_where_export_states_come_from": "torch exports",
    "tests/test_pipeline_gpu.py::test_real_exports_on_two_gpus": "torch exports",
    "tests/test_streams.py::test_torch_dynamo_export": "a dynamo export",
    "tests/test_streams.py::test_silero_many_streams_each_as_alone": "the corpus",
    "tests/test_streams_batchify.py::test_batch1_torch_export_becomes_batched": "torch exports",
    "tests/test_cli_output_files.py::test_optimize_signal_leaves_nothing": "signals to a subprocess",
    "tests/test_serving_safety.py::test_batch_signal_ends_cleanly": "signals to a subprocess",
    "tests/test_cpu_runtime.py::test_repeated_runs_do_not_grow_memory": "many runs",
}


def _tier(table: dict, item) -> tuple[str, object]:
    """The key of ``item``'s entry in ``table`` (its function's, else its file's) and the value."""
    path = item.nodeid.split("::")[0]
    key = f"{path}::{item.originalname}"
    return (key, table[key]) if key in table else (path, table.get(path))


@pytest.hookimpl(tryfirst=True)  # before -m selects by the marks set here
def pytest_collection_modifyitems(config, items):
    cases = collections.Counter()
    for item in items:
        key, every = _tier(SMOKE, item)
        if every is not None and "slow" not in item.keywords and _tier(SLOW, item)[1] is None:
            if cases[key] % every == 0:
                item.add_marker(pytest.mark.smoke)
            cases[key] += 1
        if _tier(SLOW, item)[1] is not None:
            item.add_marker(pytest.mark.slow)
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
