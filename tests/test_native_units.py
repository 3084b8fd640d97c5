"""The C++ unit tests of custom_ops/tests (persistent planner, CUDA heuristics, scratch layout,
attribute rules, entry points): plain C++, no GPU, no onnxruntime headers. Built with CMake in a
temporary directory and run; any failed check fails this test with the binary's output."""

import os
import pathlib
import shutil
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
SOURCE = ROOT / "custom_ops" / "tests"


def _cxx_compiler():
    return os.environ.get("CXX") or next((c for c in ("c++", "g++", "clang++") if shutil.which(c)), None)


@pytest.fixture(scope="module")
def unit_test_binary(tmp_path_factory):
    if not shutil.which("cmake"):
        pytest.skip("cmake is not installed")
    if not _cxx_compiler():
        pytest.skip("no C++ compiler (c++, g++, clang++ or $CXX)")
    build = tmp_path_factory.mktemp("native-units")
    generator = ["-G", "Ninja"] if shutil.which("ninja") else []
    for cmd in (["cmake", "-S", str(SOURCE), "-B", str(build), *generator],
                ["cmake", "--build", str(build), "--parallel", "2"]):
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, f"{' '.join(cmd)} failed:\n{done.stdout}\n{done.stderr}"
    found = [p for p in build.rglob("lstm_ort_unit_tests*") if p.is_file() and os.access(p, os.X_OK)]
    assert found, f"no lstm_ort_unit_tests binary under {build}"
    return found[0]


def test_native_units(unit_test_binary):
    done = subprocess.run([str(unit_test_binary)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"C++ unit tests failed:\n{done.stdout}\n{done.stderr}"
    assert " 0 failed" in done.stdout
