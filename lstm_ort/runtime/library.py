"""Where the compiled op libraries live, and their C entry points for Python tools.

Two libraries: ``liblstm_ort_ops.so`` (registration, the CPU kernel; loads everywhere) and, in
builds with CUDA, ``liblstm_ort_cuda.so`` beside it (the CUDA kernels; links the CUDA runtime and
cuBLAS). The first loads the second when it can and says why when it cannot (``cuda_status``).
"""

from __future__ import annotations

import ctypes
import functools
import importlib.util
import os
from pathlib import Path

LIBRARY_ENV = "LSTM_ORT_LIBRARY"
_NAME = "liblstm_ort_ops.so"


def _package_dirs() -> list[Path]:
    """The lstm_ort package's directories: one for an install; for an editable install
    (scikit-build-core's redirect mode) the install tree in site-packages, where the built
    library is, and the source tree."""
    spec = importlib.util.find_spec("lstm_ort")
    dirs = [Path(p) for p in (spec.submodule_search_locations or [])] if spec else []
    here = Path(__file__).resolve().parent.parent
    return dirs + ([here] if here not in dirs else [])


def get_library_path() -> str:
    """Path of the custom-op shared library (``$LSTM_ORT_LIBRARY`` overrides the packaged one)."""
    override = os.environ.get(LIBRARY_ENV)
    if override:
        if not Path(override).is_file():
            raise FileNotFoundError(f"{LIBRARY_ENV}={override} does not name a file")
        return override
    looked = []
    for d in _package_dirs():
        candidate = d / "lib" / _NAME
        if candidate.is_file():
            return str(candidate)
        looked.append(str(candidate))
    raise FileNotFoundError(
        f"lstm_ort's op library was not built into this install (looked for {', '.join(looked)}); "
        f"reinstall with `pip install .` (or `pip install -e .`) or point {LIBRARY_ENV} at a built {_NAME}"
    )


@functools.lru_cache(maxsize=None)
def native() -> ctypes.CDLL:
    """The op library, loaded once for its C entry points (custom_ops/entry_points.cc)."""
    return ctypes.CDLL(get_library_path())


def call_for_text(fn, *args, size: int = 2048) -> str:
    """Calls an entry point that writes text into (out, size) and returns 0, or an error message."""
    buf = ctypes.create_string_buffer(size)
    if fn(*args, buf, len(buf)) != 0:
        raise RuntimeError(buf.value.decode())
    return buf.value.decode()


@functools.lru_cache(maxsize=None)
def preload_cuda_libraries() -> None:
    """Load the CUDA libraries of the pip packages (nvidia-cuda-runtime, nvidia-cublas, cuDNN)
    the way onnxruntime-gpu documents it (``onnxruntime.preload_dlls``), once, where onnxruntime
    has its CUDA execution provider. Both onnxruntime's CUDA provider and lstm_ort's CUDA plugin
    then find them whatever the loader's search path; the plugin's RUNPATH
    (site-packages/nvidia/cu13/lib) covers hosts that do not call this."""
    import onnxruntime as ort

    if "CUDAExecutionProvider" in ort.get_available_providers() and hasattr(ort, "preload_dlls"):
        ort.preload_dlls()


def cuda_status() -> tuple[bool, str]:
    """(True, plugin path) when the CUDA kernels are loaded into this process (loading them if
    they can be), else (False, why not)."""
    preload_cuda_libraries()
    fn = native().LstmOrtCudaPluginStatus
    fn.argtypes = [ctypes.c_char_p, ctypes.c_int]
    try:
        return True, call_for_text(fn)
    except RuntimeError as e:
        return False, str(e)


@functools.lru_cache(maxsize=None)
def install_devices() -> str:
    """Where FusedLSTM runs with this install, as `optimize --low-rank-device` names it: "any" (the
    CPU and CUDA) where onnxruntime has its CUDA execution provider and lstm_ort's CUDA kernels
    load, else "cpu" (a CPU-only install: a CUDA session would run FusedLSTM on the CPU kernel)."""
    import onnxruntime as ort

    if "CUDAExecutionProvider" not in ort.get_available_providers():
        return "cpu"
    return "any" if cuda_status()[0] else "cpu"


def cuda_native() -> ctypes.CDLL:
    """The CUDA plugin, for its C entry points (custom_ops/cuda/entry_points.cc); RuntimeError
    saying why when it is not loaded."""
    loaded, what = cuda_status()
    if not loaded:
        raise RuntimeError(f"lstm_ort's CUDA kernels are not available: {what}")
    return ctypes.CDLL(what)
