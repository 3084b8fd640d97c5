"""Every streaming model of the corpus (models/corpus.py: the entries that carry a state) through a
StreamBatcher: several streams stepped concurrently give what each gets from its own session
call per step, and the models exported for any batch size run their streams' steps together.
Each stream's feeds are one row of the entry's own feeds (its batch axis below)."""

import numpy as np
import pytest
import streams_support as support

from lstm_ort.serving.streams import StreamBatcher

TOL = 1e-5
STREAMING = [e for e in support.corpus.ENTRIES if e.carry]
# Exported for one stream only (every dim fixed): one stream per call, still exact
# (test_streams_batchify.py batchifies the OpenVINO one).
BATCH_ONE = {"silero_vad_16k_sequence", "silero_vad_openvino_16k"}


def batch_axis(entry, name: str, value: np.ndarray) -> int | None:
    """Where the entry's feeds hold their batch: silero-vad's state [2, B, 128] and the shared
    state of the cell with one state tensor on axis 1, a scalar (sr) nowhere, the rest on axis 0;
    the batch-1 exports hold one stream's feeds as they are."""
    if entry.name in BATCH_ONE or value.ndim == 0:
        return None
    return 1 if name == "state" else 0


def one_stream(entry, feeds: dict, row: int) -> dict:
    out = {}
    for name, value in feeds.items():
        axis = batch_axis(entry, name, value)
        out[name] = value if axis is None else np.take(value, [row % value.shape[axis]], axis=axis)
    return out


@pytest.mark.filterwarnings("ignore:StreamBatcher.*run one stream per call")  # the batch-1 exports, said
@pytest.mark.parametrize("entry", STREAMING, ids=[e.name for e in STREAMING])
def test_streaming_corpus_model_as_alone(entry):
    model, carry = support.corpus_optimized(entry.name)
    rng = np.random.default_rng(0)
    draws = [entry.feeds(rng) for _ in range(3)]
    # 4 streams of 3 steps, each step a row of another draw of the entry's feeds
    chunks = [[one_stream(entry, draws[k], s) for k in range(3)] for s in range(4)]
    initial = {inp: np.zeros_like(chunks[0][0][inp]) for inp in carry.values()}
    steps = [[{n: v for n, v in c.items() if n not in carry.values()} for c in stream] for stream in chunks]
    want = [support.alone(model, carry, s, initial) for s in steps]
    with StreamBatcher(model, carry) as b:
        got = support.serve_concurrently(b, steps, 4)
        assert b.batched == (entry.name not in BATCH_ONE), b.fallback_reasons
    assert support.worst_difference(got, want) <= TOL
