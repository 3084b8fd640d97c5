"""`lstm-ort optimize --check --sequence-lens-input`: the parity run of lstm_ort.verify, with the
added ``sequence_lens`` input fed. Each batch entry gets its own length (full, 1, and in between),
and the original model, which knows no lengths, runs each entry alone on its own prefix."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort

from lstm_ort.runtime.session import InferenceSession
from lstm_ort.serving.ragged import analyze
from lstm_ort.verify import CPU, max_abs, random_feeds


def ragged_parity(original: onnx.ModelProto, optimized: onnx.ModelProto, dim: int = 3) -> float:
    """Max-abs difference over every output, each batch entry compared with the original run alone
    on its first `length` steps (outputs with a time axis compared on those steps)."""
    layout = analyze(optimized)
    feeds = random_feeds(original, np.random.default_rng(0), dim)
    got_session = InferenceSession(optimized.SerializeToString(), providers=CPU)
    if layout.sequence_lens is None or layout.sequence_lens not in {i.name for i in got_session.get_inputs()}:
        from lstm_ort.verify import parity

        return parity(original, optimized)
    x = feeds[layout.input]
    T, B = x.shape[layout.time_axis], x.shape[layout.batch_axis]
    lens = np.array([max(1, T - k) for k in range(B)], np.int32)
    got = got_session.run(None, {**feeds, layout.sequence_lens: lens})
    ref_session = ort.InferenceSession(original.SerializeToString(), providers=CPU)
    names = [o.name for o in ref_session.get_outputs()]
    worst = 0.0
    for b in range(B):
        one = {**feeds, layout.input: np.take(np.take(x, [b], axis=layout.batch_axis), np.arange(lens[b]),
                                               axis=layout.time_axis)}
        ref = ref_session.run(None, one)
        for name, r, g in zip(names, ref, got):
            axes = layout.outputs.get(name)
            if axes is None or axes.batch is None:
                continue
            g = np.take(g, [b], axis=axes.batch)
            if axes.time is not None:
                g = np.take(g, np.arange(lens[b]), axis=axes.time)
            worst = max(worst, max_abs([r], [g]))
    return worst
