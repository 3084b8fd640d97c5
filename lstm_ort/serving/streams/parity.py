"""`lstm-ort optimize --batchify --check`: a batch of streams through the batchified model, each
entry compared with the original model (batch 1) run alone on that stream's feeds."""

from __future__ import annotations

import numpy as np
import onnx

from lstm_ort.graph.batch_axes import batch_layout, split_outputs
from lstm_ort.runtime.session import InferenceSession
from lstm_ort.verify import CPU, max_abs, random_feeds


def batch_parity(original: onnx.ModelProto, batched: onnx.ModelProto, shapes: dict[str, list[int]] | None = None,
                 streams: int = 3) -> float:
    """Max-abs difference over every output of ``streams`` streams run as one batch."""
    rng = np.random.default_rng(0)
    alone = [random_feeds(original, rng, dim=1, shapes=shapes) for _ in range(streams)]
    layout = batch_layout(batched, alone[0])
    together = {}
    for name, value in alone[0].items():
        axis = layout.inputs.get(name)
        if axis is None:  # shared by the streams of a batch
            for feeds in alone:
                feeds[name] = value
            together[name] = value
        else:
            together[name] = np.concatenate([feeds[name] for feeds in alone], axis=axis)
    got_session = InferenceSession(batched.SerializeToString(), providers=CPU)
    names = [o.name for o in got_session.get_outputs()]
    got = split_outputs(got_session.run(None, together), names, layout, streams)
    ref_session = InferenceSession(original.SerializeToString(), providers=CPU)
    return max(max_abs(ref_session.run(names, feeds), g) for feeds, g in zip(alone, got))
