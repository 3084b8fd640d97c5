"""FusedLSTM's cuBLAS calls on the call's stream go through onnxruntime's handle of that stream
(custom_ops/cuda/gemm/cublas_handles.h, CublasLease): calls that capture no graph make no handle
of their own (each holds a 64 MiB workspace pool), FP32 mode stays FP32 whatever onnxruntime's
TF32 setting, and onnxruntime's kernels after ours find their handle on their own stream."""

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import helper, numpy_helper

from lstm_ort.builders import LstmSpec, fused_model, random_layers
from lstm_ort.runtime import native
from lstm_ort.runtime.nodes import NodeShape
from lstm_ort.runtime.session import InferenceSession
from lstm_ort.testing import factored_layers, make_feeds

pytestmark = pytest.mark.gpu


def providers(tf32: bool):
    return [("CUDAExecutionProvider", {"use_tf32": "1" if tf32 else "0"}), "CPUExecutionProvider"]


# (T, B, I, H, L, direction, strategy, precision, low-rank ranks): calls longer than the longest a
# whole-call graph takes (heuristics.h, kMaxStepsForCallGraph = 64), on the backends that call
# cuBLAS. The first captures its cuBLAS step loops (v1, launch_graphs.h) through the thread's own
# handle: made once per thread, not per call or session.
LONG_CALLS = [
    (70, 300, 64, 256, 1, "bidirectional", "auto", "fp32", None),
    (70, 64, 512, 512, 4, "forward", "auto", "auto", None),  # the seed's stack: tensor-core step graphs
    (70, 64, 512, 256, 2, "forward", "auto", "fp32", None),
    (70, 32, 96, 128, 3, "forward", "wavefront", "fp32", None),
    (70, 16, 40, 200, 1, "reverse", "tiled", "fp32", None),
    (70, 64, 256, 256, 2, "forward", "auto", "fp16", None),
    (70, 256, 128, 512, 1, "forward", "auto", "tf32", None),
    (66, 7, 20, 33, 2, "bidirectional", "auto", "fp32", (4, 5)),
]


@pytest.mark.parametrize("T,B,I,H,L,direction,strategy,precision,ranks", LONG_CALLS)
def test_long_calls_borrow_onnxruntime_handle(T, B, I, H, L, direction, strategy, precision, ranks, rng):
    """No handle of our own; and in fp32 mode the outputs do not depend on onnxruntime's use_tf32
    (its handle may be in TF32 math; the lease runs ours in FP32): the same bits either way."""
    spec = LstmSpec(input_size=I, hidden_size=H, num_layers=L, direction=direction)
    layers = random_layers(spec, rng)
    if ranks:
        layers = factored_layers(layers, *ranks)
    model = fused_model(spec, layers).SerializeToString()
    so = ort.SessionOptions()
    so.add_session_config_entry("lstm_ort.strategy", strategy)
    shape = NodeShape(L, spec.num_directions, I, H, "float32")
    step_graphs = "v1 cuBLAS" in native.describe(shape, T, B, strategy, precision)
    made = native.own_cublas_handles()
    outs = {}
    for tf32 in (True, False):
        sess = InferenceSession(model, so, providers=providers(tf32), precision=precision)
        feeds = make_feeds(spec, T, B, np.random.default_rng(1))
        outs[tf32] = [sess.run(None, feeds) for _ in range(3)]
    assert native.own_cublas_handles() - made <= (1 if step_graphs else 0), "a cuBLAS handle of our own per call"
    if precision in ("fp32", "fp16"):
        for got, want in zip(outs[True], outs[False]):
            assert all(np.array_equal(g, w) for g, w in zip(got, want)), "use_tf32 changed an fp32/fp16-mode call"


def with_matmul(model: onnx.ModelProto, H: int, N: int, rng) -> tuple[onnx.ModelProto, np.ndarray]:
    """The model with Z = Y @ M (a stock MatMul on onnxruntime's cuBLAS handle) as one more output."""
    m = (rng.standard_normal((H, N)) / np.sqrt(H)).astype(np.float32)
    graph = model.graph
    graph.initializer.append(numpy_helper.from_array(m, "M"))
    graph.node.append(helper.make_node("MatMul", ["Y", "M"], ["Z"]))
    graph.output.append(helper.make_tensor_value_info("Z", onnx.TensorProto.FLOAT, None))
    return model, m


@pytest.mark.parametrize("T,B,strategy", [(1, 300, "auto"), (3, 64, "auto"), (6, 16, "tiled"), (70, 64, "auto")])
def test_onnxruntime_matmul_after_ours_runs_on_its_stream(T, B, strategy, rng):
    """Calls into bound buffers (short ones replayed as whole-call graphs, captured on a stream of
    the thread's own) followed by onnxruntime's MatMul of Y: each call's Z is Y @ M of that same
    call's Y. Were the handle left on the capture stream, the MatMul would run there, unordered
    with the replay on onnxruntime's stream, and read an earlier call's Y."""
    H, N = 256, 2048
    spec = LstmSpec(input_size=64, hidden_size=H, num_layers=2)
    model, m = with_matmul(fused_model(spec, random_layers(spec, rng), initial_states=True), H, N, rng)
    so = ort.SessionOptions()
    so.add_session_config_entry("lstm_ort.strategy", strategy)
    sess = InferenceSession(model.SerializeToString(), so, providers=providers(False), precision="fp32")
    feeds = make_feeds(spec, T, B, rng, initial_states=True)
    values = {name: ort.OrtValue.ortvalue_from_numpy(v, "cuda", 0) for name, v in feeds.items()}
    binding = sess.io_binding()
    for name, value in values.items():
        binding.bind_ortvalue_input(name, value)
    shapes = {"Y": (T, 1, B, H), "Y_h": (2, B, H), "Y_c": (2, B, H), "Z": (T, 1, B, N)}
    for name, shape in shapes.items():
        binding.bind_ortvalue_output(name, ort.OrtValue.ortvalue_from_shape_and_type(shape, np.float32, "cuda", 0))
    names = [o.name for o in sess.get_outputs()]
    for _ in range(8):
        fresh = make_feeds(spec, T, B, rng, initial_states=True)
        for name, value in values.items():
            value.update_inplace(fresh[name])
        sess.run_with_iobinding(binding)
        out = dict(zip(names, binding.copy_outputs_to_cpu()))
        want = out["Y"].astype(np.float64) @ m
        np.testing.assert_allclose(out["Z"], want, rtol=1e-4, atol=1e-4)
