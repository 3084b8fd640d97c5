"""Timing sessions on their own device: shared by tools/bench.py and `lstm-ort tune`."""

from __future__ import annotations

import statistics
import time

import onnx
import onnxruntime as ort

from lstm_ort.runtime.session import CPU_KERNEL_KEY, STRATEGY_KEY, InferenceSession


def timing_session(model: onnx.ModelProto, device: str, fused: bool, tf32: bool = False, strategy: str = "auto",
                   precision: str | None = None, cpu_kernel: str | None = None, threads: int = 0,
                   debug: dict | None = None, profile: str | None = None, cuda_graph: bool = False):
    """A session to time. ``tf32``: stock's CUDA provider may use TF32. ``strategy``, ``precision``,
    ``cpu_kernel``, ``debug``: FusedLSTM's session options (precision None: as the model's nodes
    say). ``threads``: the intra-op threads (0: onnxruntime's default). ``profile``: onnxruntime's
    profiler on, its file named from this prefix. ``cuda_graph``: the CUDA provider's session-level
    graph (enable_cuda_graph: a run replays what the first runs captured; inputs and outputs must
    stay bound at the same addresses)."""
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    if profile:
        so.enable_profiling = True
        so.profile_file_prefix = profile
    cuda_options = {"use_tf32": "1" if tf32 else "0", **({"enable_cuda_graph": "1"} if cuda_graph else {})}
    providers = [("CUDAExecutionProvider", cuda_options)] if device == "cuda" else ["CPUExecutionProvider"]
    if device == "cuda":
        # Every session's intra-op threads spin after its run; with several sessions in one
        # process they took the CPU from the thread that launches the next session's kernels
        # (per-step launches measured up to 2x slower right after another session ran).
        so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    if not fused:
        return ort.InferenceSession(model.SerializeToString(), so, providers=providers)
    so.add_session_config_entry(STRATEGY_KEY, strategy)
    if cpu_kernel is not None:
        so.add_session_config_entry(CPU_KERNEL_KEY, cpu_kernel)
    return InferenceSession(model.SerializeToString(), so, providers=providers, precision=precision, debug=debug)


class OrtRunner:
    """One session with inputs and outputs bound where the provider computes, so host copies stay out."""

    def __init__(self, model: onnx.ModelProto, feeds: dict, device: str, fused: bool, tf32: bool = False,
                 strategy: str = "auto", precision: str | None = None, cpu_kernel: str | None = None,
                 threads: int = 0):
        """As ``timing_session`` says."""
        self.sess = timing_session(model, device, fused, tf32, strategy, precision, cpu_kernel, threads)
        self.binding = self.sess.io_binding()
        for name, value in feeds.items():
            self.binding.bind_ortvalue_input(name, ort.OrtValue.ortvalue_from_numpy(value, device, 0))
        for out in self.sess.get_outputs():
            self.binding.bind_output(out.name, device, 0)

    def __call__(self):
        self.sess.run_with_iobinding(self.binding)

    def outputs(self):
        self()
        return [o.numpy() for o in self.binding.get_outputs()]


def median_ms(fn, runs: int, warmup: int, sync=lambda: None) -> float:
    for _ in range(warmup):
        fn()
    sync()
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        sync()
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)
