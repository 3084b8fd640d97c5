"""lstm_ort.pipeline on real GPUs: parity with the single-GPU session (<= 2e-5, fp32) for every
split of a 4-layer stack, both schedules, uni/bidirectional, sequence_lens, ops before/after,
peer and staged transfers, two stages on one GPU; every export style of the CPU tests (torch's
two exporters, a tf2onnx-style Keras stack; torch needed) at 4 x H64; the one-GPU fallback.

    PYTHONPATH=. LSTM_ORT_LIBRARY=build/.../liblstm_ort_ops.so python3 -m pytest -q -m gpu tests/test_pipeline_gpu.py
"""

import numpy as np
import pytest

from lstm_ort.builders import LstmSpec, fused_model, random_layers
from lstm_ort.testing import make_feeds

pytestmark = pytest.mark.gpu
TOL = 2e-5


def gpu_count() -> int:
    try:
        from cuda.bindings import runtime
    except ImportError:
        return -1
    err, n = runtime.cudaGetDeviceCount()
    return int(n) if err == runtime.cudaError_t.cudaSuccess else 0


def need(n: int):
    count = gpu_count()
    if count < 0:
        pytest.skip("cuda-python is not installed (pip install 'lstm-ort[pipeline]')")
    if count < n:
        pytest.skip(f"needs {n} GPUs, {count} visible")


@pytest.fixture
def two_gpus():
    need(2)


@pytest.fixture
def one_gpu():
    need(1)


def single_gpu(model, feeds, names=None, **cuda_options):
    from lstm_ort.runtime.session import InferenceSession

    options = {"device_id": "0", **cuda_options}
    sess = InferenceSession(model.SerializeToString(), providers=[("CUDAExecutionProvider", options)])
    wanted = {i.name for i in sess.get_inputs()}
    return sess.run(names, {k: v for k, v in feeds.items() if k in wanted})


def max_diff(a, b):
    assert len(a) == len(b)
    worst = 0.0
    for x, y in zip(a, b):
        assert x.shape == y.shape, (x.shape, y.shape)
        worst = max(worst, float(np.abs(x.astype(np.float64) - y).max(initial=0.0)))
    return worst


def pipeline(model, **kw):
    from lstm_ort.pipeline import PipelineSession

    return PipelineSession(model, **kw)


def case(rng, direction="forward", layout=0, L=4, I=48, H=64, T=40, B=16, seq_lens=False, initial_states=True):
    spec = LstmSpec(input_size=I, hidden_size=H, num_layers=L, direction=direction, layout=layout)
    model = fused_model(spec, random_layers(spec, rng), seq_lens=seq_lens, initial_states=initial_states)
    return model, make_feeds(spec, T, B, rng, seq_lens=seq_lens, initial_states=initial_states)


@pytest.mark.parametrize("direction", ["forward", "bidirectional"])
@pytest.mark.parametrize("counts", [[1, 3], [2, 2], [3, 1]])
def test_every_split_both_schedules(two_gpus, rng, direction, counts):
    model, feeds = case(rng, direction)
    ref = single_gpu(model, feeds)
    schedules = [{"micro_batch": 4}, {"micro_batch": 16}]
    if direction == "forward":
        schedules += [{"micro_batch": 16, "time_chunk": 10}, {"micro_batch": 8, "time_chunk": 7}]
    for sched in schedules:
        sess = pipeline(model, devices=(0, 1), stages=counts, **sched)
        got = sess.run(None, feeds)
        assert max_diff(ref, got) <= TOL, (sched, sess.last_plan.describe())
        sess.close()


@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
def test_sequence_lens_micro_batches(two_gpus, rng, direction):
    model, feeds = case(rng, direction, layout=1, seq_lens=True)
    ref = single_gpu(model, feeds)
    sess = pipeline(model, devices=(0, 1), micro_batch=5)
    assert sess.last_plan is None
    got = sess.run(None, feeds)
    assert sess.last_plan.num_chunks == 1 and sess.last_plan.num_micro_batches == 4
    assert max_diff(ref, got) <= TOL


def test_auto_plans(two_gpus, rng):
    """stages='auto', micro_batch/time_chunk chosen per call: one long sequence goes in chunks."""
    model, feeds = case(rng, "forward", T=300, B=1, H=128, I=128)
    ref = single_gpu(model, feeds)
    sess = pipeline(model, devices=(0, 1))
    got = sess.run(None, feeds)
    assert sess.last_plan.num_chunks > 1, sess.last_plan.describe()
    assert max_diff(ref, got) <= TOL
    model, feeds = case(rng, "bidirectional", B=32)
    ref = single_gpu(model, feeds)
    sess = pipeline(model, devices=(0, 1))
    assert max_diff(ref, sess.run(None, feeds)) <= TOL
    assert sess.last_plan.num_chunks == 1


def test_ops_before_and_after(two_gpus, rng):
    """The classifier's MatMul runs in ORT's default TF32 on both sides, and a TF32 rounding flip
    of one Y entry moves a logit by ~1e-4 (measured: either side is 5e-5-1e-4 off the float64
    reference in the logits, 1e-7 in Y_h), so fp32 parity is checked with use_tf32=0."""
    from lstm_ort.pipeline.testing import embedded_classifier, token_feeds

    for direction in ("forward", "bidirectional"):
        spec = LstmSpec(input_size=32, hidden_size=64, num_layers=4, direction=direction)
        model = embedded_classifier(spec, rng, vocab=50, classes=7)
        feeds = token_feeds(spec, 30, 12, rng, vocab=50)
        ref = single_gpu(model, feeds, use_tf32="0")
        sess = pipeline(model, devices=(0, 1), micro_batch=4, time_chunk=10 if direction == "forward" else None,
                        providers_options={"use_tf32": "0"})
        assert max_diff(ref, sess.run(None, feeds)) <= TOL


@pytest.mark.parametrize("threads", [True, False])
@pytest.mark.parametrize("transfer", ["auto", "staged"])
def test_transfers_and_host_threads(two_gpus, rng, transfer, threads):
    model, feeds = case(rng, "forward", layout=1)
    ref = single_gpu(model, feeds)
    sess = pipeline(model, devices=(0, 1), micro_batch=4, time_chunk=8, transfer=transfer, threads=threads)
    for _ in range(3):  # buffers and events reused from call to call
        assert max_diff(ref, sess.run(None, feeds)) <= TOL
    modes = [bd.mode for bd in sess.executor.boundaries]
    assert modes == ["staged"] if transfer == "staged" else modes[0] in ("peer", "staged")


def test_two_stages_on_one_gpu(one_gpu, rng):
    for direction, sched in (("forward", {"micro_batch": 8, "time_chunk": 10}), ("bidirectional", {"micro_batch": 4})):
        model, feeds = case(rng, direction)
        ref = single_gpu(model, feeds)
        sess = pipeline(model, devices=(0, 0), **sched)
        assert [bd.mode for bd in sess.executor.boundaries] == ["same"]
        assert max_diff(ref, sess.run(None, feeds)) <= TOL


def test_profile(two_gpus, rng):
    model, feeds = case(rng, "forward", T=64, B=32, H=128, I=128)
    sess = pipeline(model, devices=(0, 1), micro_batch=8, time_chunk=16, profile=True)
    sess.run(None, feeds)
    prof = sess.last_profile.as_dict()
    assert prof["items"] == 16 and all(b > 0 for b in prof["stage_busy_ms"])
    assert prof["copy_ms_total"][0] > 0 and prof["copy_bytes"][0] == 64 * 32 * 128 * 4
    assert 0 <= prof["measured_bubble"] < 1


# -- models as users export them ----------------------------------------------------------------

def _real_cases():
    from lstm_ort.pipeline.testing import EXPORTERS, TORCH_STYLES

    return ([(s, e) for e in EXPORTERS for s in TORCH_STYLES if (s, e) != ("learned_states", "dynamo")]
            + [("keras", "tf2onnx-opset13"), ("keras", "tf2onnx-opset11")])


REAL = _real_cases()
SIZES = {"input_size": 48, "hidden": 64, "layers": 4}


def _real_export(style, exporter):
    """(the export, lstm_ort.optimize of it, feeds at (B, T)) at 4 layers of H=64."""
    from lstm_ort import optimize
    from lstm_ort.pipeline.testing import keras_feeds, keras_stack, torch_export, torch_feeds

    if style == "keras":
        model = keras_stack(layers=4, input_size=48, hidden=64, opset=int(exporter.rsplit("opset", 1)[1]))
        return model, optimize(model), lambda B, T: keras_feeds(input_size=48, hidden=64, batch=B, steps=T)
    pytest.importorskip("torch", reason="torch makes the exports")
    model, _ = torch_export(style, exporter, batch=16, steps=30, **SIZES)
    return model, optimize(model), lambda B, T: torch_feeds(style, B, T, **SIZES)


@pytest.mark.parametrize("style,exporter", REAL, ids=[f"{s}-{e}" for s, e in REAL])
def test_real_exports_on_two_gpus(two_gpus, style, exporter):
    """Each export style, optimized, split 1|3, 2|2, 3|1 over two GPUs, in micro-batches and (where
    exact) time chunks: parity with the optimized model on one GPU (fp32, TF32 off on both sides
    for the ops around the stack)."""
    from lstm_ort.pipeline import Unsupported

    _, optimized, feeds_at = _real_export(style, exporter)
    feeds = feeds_at(16, 30)
    ref = single_gpu(optimized, feeds, use_tf32="0")
    for counts in ([1, 3], [2, 2], [3, 1]):
        sess = pipeline(optimized, devices=(0, 1), stages=counts, providers_options={"use_tf32": "0"})
        for mb, tc in ((4, None), (16, None), (8, 10), (16, 7)):
            try:
                sess.set_schedule(mb, tc)
            except Unsupported:
                assert tc and sess.pm.chunk_refusal
                continue
            got = sess.run(None, feeds)
            assert max_diff(ref, got) <= TOL, (counts, mb, tc, sess.last_plan.describe())
        sess.close()


def test_auto_falls_back_to_one_gpu(two_gpus, rng):
    """A call no split plan is modelled faster for runs unsplit on the first GPU, and says so."""
    model, feeds = case(rng, "forward", T=3, B=1, H=32, I=32)
    ref = single_gpu(model, feeds)
    sess = pipeline(model, devices=(0, 1))
    got = sess.run(None, feeds)
    assert sess.last_plan.one_gpu, sess.last_plan.describe()
    assert max_diff(ref, got) <= TOL
