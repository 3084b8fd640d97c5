"""`optimize(batchify=True)` / `lstm-ort optimize --batchify` (lstm_ort/rewriter/batchify.py): a
model exported for batch 1 gets a symbolic batch where every op keeps the entries of a batch
apart (checked: a batch of streams equals each run alone), else a refusal naming the op; a
StreamBatcher falls back to one call per stream before, and batches after."""

import io
import warnings

import numpy as np
import onnx
import pytest
import streams_support as support

from lstm_ort.cli import main
from lstm_ort.rewriter import Report, optimize
from lstm_ort.rewriter.batchify import BatchifyRefused, batchify
from lstm_ort.serving.streams import StreamBatcher
from lstm_ort.serving.streams.parity import batch_parity


def batch1_export(head: str, exporter: str = "torchscript") -> onnx.ModelProto:
    """A torch LSTM (batch_first) exported with every dim fixed for batch 1; ``head``: "reshape"
    (views that write the batch of 1: y.reshape(1, -1, H), out.reshape(1, -1)) or "mix" (subtracts
    the mean over the batch: only right for batch 1)."""
    torch = pytest.importorskip("torch", reason="torch exports the model")

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lstm = torch.nn.LSTM(12, 16, 1, batch_first=True)
            self.head = torch.nn.Linear(16, 5)

        def forward(self, x, h, c):
            y, (hn, cn) = self.lstm(x, (h, c))
            if head == "mix":
                z = self.head(y)
                return z - z.mean(dim=0, keepdim=True), hn, cn
            return self.head(y.reshape(1, -1, 16)).reshape(1, -1), hn, cn

    torch.manual_seed(0)
    args = (torch.randn(1, 4, 12), torch.zeros(1, 1, 16), torch.zeros(1, 1, 16))
    f = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(Net().eval(), args, f, dynamo=exporter == "dynamo", input_names=["x", "h", "c"],
                          output_names=["y", "hn", "cn"], opset_version=18 if exporter == "dynamo" else 17)
    return onnx.load_from_string(f.getvalue())


def dims(model, name):
    vi = next(v for v in [*model.graph.input, *model.graph.output] if v.name == name)
    return [d.dim_param or d.dim_value for d in vi.type.tensor_type.shape.dim]


@pytest.mark.parametrize("exporter", ["torchscript", "dynamo"])
def test_batch1_torch_export_becomes_batched(exporter):
    original = batch1_export("reshape", exporter)
    report = Report()
    model = optimize(original, batchify=True, report=report)
    assert report.rules["batchify"].hits >= 1
    assert dims(model, "x") == ["batch", 4, 12] and dims(model, "h") == [1, "batch", 16]
    assert dims(model, "y") == ["batch", 20] and dims(model, "hn") == [1, "batch", 16]
    assert batch_parity(original, model, streams=4) <= 1e-5


def test_mixing_model_is_refused_naming_the_op():
    model = optimize(batch1_export("mix"))
    before = model.SerializeToString()
    report = Report()
    with pytest.raises(BatchifyRefused, match=r"ReduceMean node .* reduces over the batch axis"):
        batchify(model, report)
    assert model.SerializeToString() == before  # untouched
    assert report.rules["batchify"].hits == 0 and report.rules["batchify"].refusals


@pytest.mark.parametrize("flags, said", [([], "each entry run alone"), (["--precision", "int8"], "before quantizing")],
                         ids=["float", "int8"])
def test_cli_batchify_check_writes(tmp_path, capsys, flags, said):
    """With --precision int8 too: the passes after the rewrite run as one list (int8 once skipped
    --batchify without a word)."""
    src, dst = tmp_path / "b1.onnx", tmp_path / "out.onnx"
    onnx.save(batch1_export("reshape"), src)
    assert main(["optimize", str(src), "-o", str(dst), "--batchify", "--check", *flags]) == 0
    out = capsys.readouterr().out
    assert "rule batchify:" in out and said in out
    assert dims(onnx.load(dst), "x") == ["batch", 4, 12]


def test_cli_batchify_refusal_writes_nothing(tmp_path, capsys):
    src, dst = tmp_path / "mix.onnx", tmp_path / "out.onnx"
    onnx.save(batch1_export("mix"), src)
    assert main(["optimize", str(src), "-o", str(dst), "--batchify"]) == 1
    assert "--batchify refused: ReduceMean node" in capsys.readouterr().err
    assert not dst.exists()


def test_cli_batchify_with_low_rank_is_a_usage_error(tmp_path, capsys):
    src = tmp_path / "b1.onnx"
    onnx.save(batch1_export("reshape"), src)
    assert main(["optimize", str(src), "-o", str(tmp_path / "o.onnx"), "--batchify", "--low-rank", "4"]) == 2


def test_silero_openvino_batch1_export(rng):
    """silero-vad's OpenVINO export (every dim fixed for batch 1) from the corpus: the batcher
    falls back to one call per stream and says so; batchified, the same streams share calls and
    each still gets its own run's results."""
    entry = next(e for e in support.corpus.ENTRIES if e.name == "silero_vad_openvino_16k")
    try:
        original = entry.build()
    except support.corpus.Unavailable as e:
        pytest.skip(str(e))
    fixed = optimize(original)
    streams = [[{"input": (0.1 * rng.standard_normal((1, 576))).astype(np.float32)} for _ in range(k)]
               for k in rng.integers(1, 6, 16)]
    zero = {"state": np.zeros((2, 1, 128), np.float32)}
    want = [support.alone(fixed, entry.carry, s, zero) for s in streams]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with StreamBatcher(fixed, entry.carry) as b:
            got_fixed = support.serve_concurrently(b, streams, 4)
            assert b.batched is False and b.stats().mean_batch == 1
    batched = optimize(original, batchify=True)
    with StreamBatcher(batched, entry.carry) as b:
        got = support.serve_concurrently(b, streams, 4)
        assert b.batched is True and b.stats().mean_batch > 1
    assert support.worst_difference(got_fixed, want) <= 1e-5  # its convs run as 2-D ones (batch_convs)
    assert support.worst_difference(got, want) <= 1e-5
