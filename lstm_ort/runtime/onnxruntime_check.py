"""Which ONNX Runtime this environment has, checked before anything imports it.

lstm-ort requires no onnxruntime distribution by itself: ``onnxruntime`` (CPU) and
``onnxruntime-gpu`` install the same ``onnxruntime`` module, and pip cannot express "one of the
two". The extras choose: ``lstm-ort[cpu]`` brings onnxruntime, ``lstm-ort[gpu]`` onnxruntime-gpu
with its CUDA libraries. This module turns the two ways that goes wrong into clear messages.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import warnings

INSTALL_HINT = "pip install 'lstm-ort[cpu]' (CPU) or 'lstm-ort[gpu]' (NVIDIA GPUs, CUDA 13)"
# Distributions that install the `onnxruntime` module; more than one means files overwrote each other.
_ORT_DISTRIBUTIONS = ("onnxruntime", "onnxruntime-gpu", "onnxruntime-directml", "onnxruntime-openvino",
                      "onnxruntime-qnn", "onnxruntime-training")


def installed_onnxruntimes() -> list[str]:
    """The onnxruntime distributions installed, as "name version"."""
    found = []
    for name in _ORT_DISTRIBUTIONS:
        try:
            found.append(f"{name} {importlib.metadata.version(name)}")
        except importlib.metadata.PackageNotFoundError:
            pass
    return found


def check_onnxruntime() -> None:
    """ImportError when no onnxruntime is installed; a warning when two distributions share the
    module (the usual cause of a GPU install without the CUDA execution provider)."""
    if importlib.util.find_spec("onnxruntime") is None:
        raise ImportError(f"lstm_ort needs ONNX Runtime, and none is installed: {INSTALL_HINT}")
    found = installed_onnxruntimes()
    if len(found) > 1:
        names = " ".join(f.split()[0] for f in found)
        warnings.warn(
            f"lstm_ort: {' and '.join(found)} are all installed; they share the `onnxruntime` module, so "
            f"whichever was installed last won, file by file. For the CUDA execution provider: "
            f"pip uninstall -y {names} && pip install 'lstm-ort[gpu]'; for CPU only: "
            f"pip uninstall -y {names} && pip install 'lstm-ort[cpu]'",
            RuntimeWarning,
            stacklevel=3,
        )
