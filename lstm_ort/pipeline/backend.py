"""The device layer a pipeline runs on: streams, events, buffers, copies and stage sessions.

``CudaBackend`` is the real one: cuda-python's runtime bindings (``cuda.bindings.runtime``,
imported when a backend is made, so the package imports without them) and one onnxruntime
session per stage on the CUDA EP, its ``user_compute_stream`` set to the stage's stream and its
inputs and outputs bound to device buffers. ``lstm_ort.pipeline.fake.FakeBackend`` is the same
interface on the CPU, for tests: it records every call and checks the ordering.

ORT's ``Run`` synchronises the EP's stream before returning (``OnRunEnd(sync_stream=true)``)
unless the run option ``disable_synchronize_execution_providers`` is "1"; the runner sets it, so
a call only enqueues work. The executor still drives each stage from its own host thread
(``run_with_iobinding`` releases the GIL), so stages overlap even where a Run does block.
"""

from __future__ import annotations

import ctypes
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from lstm_ort.ops.identity import np_dtype_of_ort

RUN_NO_SYNC = "disable_synchronize_execution_providers"


@dataclass(eq=False)
class Stream:
    handle: Any
    device: int
    name: str = ""


@dataclass(eq=False)
class Event:
    handle: Any
    device: int
    timing: bool = False


@dataclass(eq=False)
class DeviceBuffer:
    ptr: int
    device: int
    nbytes: int
    owner: Any = None  # what keeps the memory alive (an OrtValue, a numpy array), if not the backend
    name: str = ""


@dataclass
class DeviceView:
    """A typed window on a buffer: ``shape`` elements of ``dtype`` from its start."""

    buffer: DeviceBuffer
    shape: tuple
    dtype: Any
    keep: list = field(default_factory=list)

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * np.dtype(self.dtype).itemsize  # per item: math.prod, not numpy's

    @property
    def ptr(self) -> int:
        return self.buffer.ptr

    @property
    def device(self) -> int:
        return self.buffer.device


class CudaError(RuntimeError):
    pass


def _runtime():
    try:
        from cuda.bindings import runtime
    except ImportError as e:  # pragma: no cover - depends on the machine
        raise ImportError("lstm_ort.pipeline on GPUs needs cuda-python: pip install 'lstm-ort[pipeline]' "
                          "(cuda-python, cuda-core)") from e
    return runtime


class CudaBackend:
    """Streams, events and copies through ``cuda.bindings.runtime``; stages as ORT CUDA sessions."""

    def __init__(self):
        self.rt = _runtime()
        self._host_buffers: dict[int, int] = {}

    # -- errors, devices --------------------------------------------------------------------
    def _check(self, result):
        err, *rest = result if isinstance(result, tuple) else (result,)
        if err != self.rt.cudaError_t.cudaSuccess:
            _, text = self.rt.cudaGetErrorString(err)
            raise CudaError(f"CUDA error {int(err)}: {text.decode() if isinstance(text, bytes) else text}")
        return rest[0] if len(rest) == 1 else rest

    def set_device(self, device: int) -> None:
        self._check(self.rt.cudaSetDevice(device))

    def device_count(self) -> int:
        return int(self._check(self.rt.cudaGetDeviceCount()))

    def device_name(self, device: int) -> str:
        props = self._check(self.rt.cudaGetDeviceProperties(device))
        name = props.name
        return (name.decode() if isinstance(name, bytes) else str(name)).rstrip("\x00")

    def can_access_peer(self, device: int, peer: int) -> bool:
        return bool(self._check(self.rt.cudaDeviceCanAccessPeer(device, peer)))

    def enable_peer(self, device: int, peer: int) -> None:
        """Lets ``device`` access ``peer``'s memory (copies between them then go over the link)."""
        self.set_device(device)
        err = self.rt.cudaDeviceEnablePeerAccess(peer, 0)
        err = err[0] if isinstance(err, tuple) else err
        if err not in (self.rt.cudaError_t.cudaSuccess, self.rt.cudaError_t.cudaErrorPeerAccessAlreadyEnabled):
            self._check((err,))
        self.rt.cudaGetLastError()  # clear a sticky "already enabled"

    # -- streams, events -------------------------------------------------------------------
    def create_stream(self, device: int, name: str = "") -> Stream:
        self.set_device(device)
        return Stream(self._check(self.rt.cudaStreamCreateWithFlags(self.rt.cudaStreamNonBlocking)), device, name)

    def destroy_stream(self, stream: Stream) -> None:
        self.set_device(stream.device)
        self._check(self.rt.cudaStreamDestroy(stream.handle))

    def stream_handle(self, stream: Stream) -> int:
        return int(stream.handle)

    def create_event(self, device: int, timing: bool = False) -> Event:
        self.set_device(device)
        flags = self.rt.cudaEventDefault if timing else self.rt.cudaEventDisableTiming
        return Event(self._check(self.rt.cudaEventCreateWithFlags(flags)), device, timing)

    def destroy_event(self, event: Event) -> None:
        self.set_device(event.device)
        self._check(self.rt.cudaEventDestroy(event.handle))

    def record(self, event: Event, stream: Stream) -> None:
        self.set_device(stream.device)
        self._check(self.rt.cudaEventRecord(event.handle, stream.handle))

    def wait(self, stream: Stream, event: Event) -> None:
        self.set_device(stream.device)
        self._check(self.rt.cudaStreamWaitEvent(stream.handle, event.handle, 0))

    def synchronize(self, stream: Stream) -> None:
        self.set_device(stream.device)
        self._check(self.rt.cudaStreamSynchronize(stream.handle))

    def event_synchronize(self, event: Event) -> None:
        """Blocks the host until the work before the event's last record is done."""
        self._check(self.rt.cudaEventSynchronize(event.handle))

    def elapsed_ms(self, start: Event, end: Event) -> float:
        return float(self._check(self.rt.cudaEventElapsedTime(start.handle, end.handle)))

    # -- memory ----------------------------------------------------------------------------
    def alloc(self, device: int, nbytes: int, name: str = "") -> DeviceBuffer:
        self.set_device(device)
        return DeviceBuffer(int(self._check(self.rt.cudaMalloc(max(int(nbytes), 1)))), device, int(nbytes), None, name)

    def free(self, buffer: DeviceBuffer) -> None:
        if buffer.owner is None and buffer.ptr:
            self.set_device(buffer.device)
            self._check(self.rt.cudaFree(buffer.ptr))
            buffer.ptr = 0

    def memset(self, buffer: DeviceBuffer, value: int, stream: Stream) -> None:
        self.set_device(stream.device)
        self._check(self.rt.cudaMemsetAsync(buffer.ptr, value, buffer.nbytes, stream.handle))

    def alloc_host(self, shape, dtype) -> np.ndarray:
        """Pinned host memory as a numpy array (async copies need it)."""
        nbytes = max(int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize, 1)
        ptr = int(self._check(self.rt.cudaMallocHost(nbytes)))
        raw = (ctypes.c_byte * nbytes).from_address(ptr)
        array = np.frombuffer(raw, np.uint8, nbytes)[: nbytes].view(dtype)
        array = array[: int(np.prod(shape, dtype=np.int64))].reshape(shape)
        self._host_buffers[id(array)] = ptr
        return array

    def free_host(self, array: np.ndarray) -> None:
        ptr = self._host_buffers.pop(id(array), None)
        if ptr:
            self._check(self.rt.cudaFreeHost(ptr))

    # -- copies ----------------------------------------------------------------------------
    def copy_peer(self, dst: DeviceView, src: DeviceView, stream: Stream) -> None:
        self.set_device(stream.device)
        self._check(self.rt.cudaMemcpyPeerAsync(dst.ptr, dst.device, src.ptr, src.device, src.nbytes, stream.handle))

    def copy_d2h(self, dst: np.ndarray, src: DeviceView, stream: Stream) -> None:
        assert dst.nbytes >= src.nbytes and dst.flags.c_contiguous
        self.set_device(stream.device)
        self._check(self.rt.cudaMemcpyAsync(dst.ctypes.data, src.ptr, src.nbytes,
                                            self.rt.cudaMemcpyKind.cudaMemcpyDeviceToHost, stream.handle))

    def copy_h2d(self, dst: DeviceView, src: np.ndarray, stream: Stream) -> None:
        assert src.nbytes >= dst.nbytes and src.flags.c_contiguous
        self.set_device(stream.device)
        self._check(self.rt.cudaMemcpyAsync(dst.ptr, src.ctypes.data, dst.nbytes,
                                            self.rt.cudaMemcpyKind.cudaMemcpyHostToDevice, stream.handle))

    # -- stages ----------------------------------------------------------------------------
    def create_runner(self, model_bytes: bytes, device: int, stream: Stream, providers_options: dict | None = None,
                      sess_options=None) -> OrtCudaRunner:
        return OrtCudaRunner(model_bytes, device, self.stream_handle(stream), providers_options, sess_options)

    def create_single(self, model_bytes: bytes, device: int, providers_options: dict | None = None,
                      sess_options=None) -> OrtCudaSingle:
        return OrtCudaSingle(model_bytes, device, providers_options, sess_options)


class OrtCudaSingle:
    """The whole model on one GPU, numpy in and out: the one-GPU plan of a call no pipeline plan
    is modelled faster for."""

    def __init__(self, model_bytes: bytes, device: int, providers_options: dict | None = None, sess_options=None):
        from lstm_ort.runtime.session import InferenceSession

        options = {str(k): str(v) for k, v in (providers_options or {}).items()}
        options["device_id"] = str(device)
        self.session = InferenceSession(model_bytes, sess_options,
                                        providers=[("CUDAExecutionProvider", options), "CPUExecutionProvider"])

    def run(self, names: list[str], feeds: dict) -> list:
        return self.session.run(names, feeds)


class OrtCudaRunner:
    """One stage: an lstm_ort.InferenceSession on the CUDA EP of ``device`` computing on
    ``stream`` (the provider option ``user_compute_stream``: the stream's address as a decimal
    string), run through I/O binding on device buffers, without synchronising at the end."""

    def __init__(self, model_bytes: bytes, device: int, stream_handle: int, providers_options: dict | None = None,
                 sess_options=None):
        import onnxruntime as ort

        from lstm_ort.runtime.session import InferenceSession

        self.device = device
        if sess_options is None:
            # Every op of a stage runs on the GPU; ORT's intra-op threads would only spin after
            # each Run, taking cores from the thread that enqueues the next stage's kernels.
            sess_options = ort.SessionOptions()
            sess_options.intra_op_num_threads = 1
            sess_options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        options = {str(k): str(v) for k, v in (providers_options or {}).items()}
        options.update(device_id=str(device), user_compute_stream=str(stream_handle))
        providers = [("CUDAExecutionProvider", options), "CPUExecutionProvider"]
        self.session = InferenceSession(model_bytes, sess_options, providers=providers)
        got = self.session.get_provider_options().get("CUDAExecutionProvider")
        if got is None:
            raise RuntimeError("onnxruntime did not create the CUDA execution provider for a pipeline stage")
        if not _uses_stream(got, stream_handle):
            raise RuntimeError(f"onnxruntime did not take user_compute_stream={stream_handle} for a pipeline stage "
                               f"(its CUDA options: {got})")
        self.run_options = ort.RunOptions()
        self.run_options.add_run_config_entry(RUN_NO_SYNC, "1")
        self.bindings = Bindings(self.session, "cuda", device)

    def run(self, inputs: dict, outputs: dict) -> dict[str, DeviceView]:
        """``inputs``: name -> numpy array (host; ORT copies it on the stage's stream) or DeviceView;
        ``outputs``: name -> DeviceView, or None for ORT to allocate it on the device (returned)."""
        return self.bindings.run(inputs, outputs, self.run_options)


class Bindings:
    """I/O bindings of one session on one device, kept per set of buffers: a pipeline runs every
    item through the same few slots, so each Run after the first binds nothing (measured on the
    CPU EP, 3 inputs and 3 outputs: 105 µs per Run with a kept binding, 209 µs binding each Run;
    ``tools/bench_pipeline.py --host-probe``). Outputs ORT allocates (None) are bound afresh for every Run:
    a kept binding would hand ORT the previous item's output, still being copied to the host, to
    write into."""

    def __init__(self, session, device_type: str, device_id: int, keep: int = 64):
        self.session, self.device_type, self.device_id, self.keep = session, device_type, device_id, keep
        self.cache: dict = {}

    @staticmethod
    def _signature(values: dict) -> tuple | None:
        sig = []
        for name, v in values.items():
            if isinstance(v, np.ndarray):
                return None  # a host array: ORT copies it per Run, nothing to keep
            sig.append((name, None) if v is None else (name, v.ptr, tuple(v.shape), np.dtype(v.dtype).str))
        return tuple(sig)

    def _bind_outputs(self, binding, outputs: dict) -> None:
        for name, view in outputs.items():
            if view is None:
                binding.bind_output(name, self.device_type, self.device_id)
            else:
                binding.bind_output(name, self.device_type, self.device_id, np.dtype(view.dtype).type,
                                    list(view.shape), view.ptr)

    def run(self, inputs: dict, outputs: dict, run_options=None) -> dict[str, DeviceView]:
        key = None
        sig_in, sig_out = self._signature(inputs), self._signature(outputs)
        if sig_in is not None and sig_out is not None:
            key = (sig_in, sig_out)
        binding = self.cache.get(key) if key is not None else None
        if binding is None:
            binding = self.session.io_binding()
            for name, value in inputs.items():
                if isinstance(value, np.ndarray):
                    binding.bind_cpu_input(name, value)
                else:
                    binding.bind_input(name, self.device_type, self.device_id, np.dtype(value.dtype).type,
                                       list(value.shape), value.ptr)
            self._bind_outputs(binding, outputs)
            if key is not None:
                if len(self.cache) >= self.keep:
                    self.cache.pop(next(iter(self.cache)))
                self.cache[key] = binding
        elif any(v is None for v in outputs.values()):
            binding.clear_binding_outputs()
            self._bind_outputs(binding, outputs)
        self.session.run_with_iobinding(binding, run_options)
        allocated = {}
        if any(v is None for v in outputs.values()):
            for name, value in zip(outputs, binding.get_outputs()):
                if outputs[name] is None:
                    dtype = np_dtype_of_ort(value.data_type())
                    shape = tuple(value.shape())
                    nbytes = int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
                    allocated[name] = DeviceView(DeviceBuffer(value.data_ptr(), self.device_id, nbytes, owner=value),
                                                 shape, dtype)
        return allocated


def _uses_stream(options: dict, handle: int) -> bool:
    """Whether the CUDA EP's options (as get_provider_options reports them) name our stream."""
    if str(options.get("has_user_compute_stream", "1")).lower() in ("0", "false"):
        return False
    value = options.get("user_compute_stream")
    if value is None:
        return True  # not reported by this onnxruntime: nothing to contradict
    try:
        return int(str(value), 0) == handle
    except ValueError:
        return True

