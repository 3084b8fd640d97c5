"""optimize --low-rank never slower (lstm_ort/rewriter/low_rank_cost.py): the cost rule at its
boundaries (the measured numbers are in the module's docstring and docs/ops.md, Factored weights),
the batch sizes it reads from the model and --shape, and the pass keeping layers whole with the
reason in the report where factoring does not pay on the device the model is meant for."""

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from lstm_ort.builders import LstmSpec, random_layers, stock_model
from lstm_ort.cli import EXIT_OK, EXIT_USAGE, main
from lstm_ort.ops.identity import DOMAIN, OP_TYPE, OPSET_VERSION
from lstm_ort.ops.packing import pack_layers
from lstm_ort.rewriter import Report, optimize
from lstm_ort.rewriter.low_rank import LowRank
from lstm_ort.rewriter.low_rank_cost import factoring_pays, node_batches
from lstm_ort.runtime.native import decide_precision

ROOT = Path(__file__).resolve().parents[1]


def auto_runs_as_tf32(H, B):
    """What the op library decides `auto` runs on CUDA at H and B (custom_ops/precision.h): the one
    rule the kernel and the cost rule both follow."""
    return decide_precision("cuda", "auto", H, B, steps=100).runs == "tf32"  # the steps the cost rule asks for


def pays(device="cuda", precision="fp32", H=1024, B=(64,), rank=None, width=None):
    return factoring_pays(rank=H // 4 if rank is None else rank, width=H if width is None else width, hidden=H,
                          precision=precision, device=device, batches=tuple(B))


# ---- the rule ----

@pytest.mark.parametrize("H,B", [(1024, 64), (2048, 64), (1024, 1000), (512, 256), (768, 256), (512, 4096)])
def test_cuda_fp32_pays_in_the_measured_region(H, B):
    assert pays(H=H, B=[B]) == (True, "")
    assert pays(precision=None, H=H, B=[B]).pays  # an absent attribute is fp32


@pytest.mark.parametrize("H,B", [(1024, 63), (1023, 64), (512, 255), (511, 256), (512, 64), (1024, 1), (2048, 16),
                                 (256, 8), (4096, 1)])
def test_cuda_fp32_keeps_whole_outside_it(H, B):
    verdict = pays(H=H, B=[B])
    assert not verdict.pays
    assert f"on CUDA at H={H} B={B} the factored path is slower than the whole layer in fp32" in verdict.reason


@pytest.mark.parametrize("H,B", [(1024, 64), (512, 256), (2048, 4096)])
def test_cuda_auto_keeps_whole_where_it_runs_tf32(H, B):
    """Every shape where the factored path beats fp32 is one where auto runs TF32, which beats it."""
    assert auto_runs_as_tf32(H, B)
    verdict = pays(precision="auto", H=H, B=[B])
    assert not verdict.pays and f"at B={B} precision auto runs the whole layer in TF32" in verdict.reason


def test_cuda_auto_resolving_to_fp32_is_judged_as_fp32():
    assert not auto_runs_as_tf32(1024, 15)
    assert "slower than the whole layer in fp32" in pays(precision="auto", H=1024, B=[15]).reason


@pytest.mark.parametrize("precision", ["tf32", "fp16", "bf16"])
def test_cuda_tensor_core_precisions_keep_whole(precision):
    verdict = pays(precision=precision, H=1024, B=[64])
    assert not verdict.pays and f"the whole layer runs {precision} on tensor cores" in verdict.reason


def test_cuda_unknown_batch_keeps_whole():
    verdict = pays(B=())
    assert not verdict.pays and "batch size is unknown: give it with --shape" in verdict.reason


def test_cuda_every_known_batch_must_pay():
    assert pays(B=[64, 512]).pays
    verdict = pays(B=[64, 1])
    assert not verdict.pays and "B=1" in verdict.reason


def test_cuda_rank_above_a_quarter_of_h_keeps_whole():
    assert pays(H=1024, rank=256).pays
    verdict = pays(H=1024, rank=257)
    assert not verdict.pays and "rank 257 > H/4 = 256" in verdict.reason


def test_cpu_pays_where_the_rank_saves_work():
    """The CPU factored kernel pays at every measured shape: the rule is saves_work alone, whatever
    the batch or precision."""
    assert pays("cpu", "auto", H=16, B=(), rank=9, width=16) == (True, "")  # 9 x (16 + 64) = 720 < 1024
    assert pays("cpu", "tf32", H=256, B=[1], rank=200, width=256).pays  # above H/4: still less work
    verdict = pays("cpu", H=16, B=(), rank=13, width=16)
    assert not verdict.pays and verdict.reason == ("rank 13 saves no work: 13 x (16 + 64) = 1040 multiply-adds per "
                                                   "row >= 16 x 64 = 1024 whole")
    assert pays("cuda", H=16, B=(), rank=13, width=16).reason == verdict.reason  # no device pays for more work


def test_any_needs_both():
    assert pays("any", "fp32", H=1024, B=[64]).pays
    verdict = pays("any", "auto", H=1024, B=[64])
    assert not verdict.pays and verdict.reason.startswith("on CUDA at B=64")
    assert "--low-rank-device cpu for a model that runs on the CPU only" in verdict.reason
    assert "--low-rank-device cpu" not in pays("cuda", "auto", H=1024, B=[64]).reason


def test_auto_follows_the_librarys_decision_at_its_boundaries():
    """The rule reads auto's resolution from the op library (precision.h's AutoRunsAsTf32) for a
    sequence (T = 100, where the region was measured), at its boundaries: B >= 256, H >= 1024 with
    B*H >= 16K, and H >= 1536 (the step's 16-bit weights) at any batch."""
    for H, B in [(1, 256), (1024, 16), (2048, 8), (1536, 1)]:
        assert auto_runs_as_tf32(H, B)
        assert "precision auto runs the whole layer in TF32" in pays(precision="auto", H=max(H, 4), B=[B]).reason
    for H, B in [(1023, 255), (1024, 15), (1535, 10)]:
        assert not auto_runs_as_tf32(H, B)
        assert "precision auto runs" not in pays(precision="auto", H=max(H, 4), B=[B]).reason


def test_bad_device_or_batches_are_clear_errors():
    with pytest.raises(ValueError, match="device must be one of any, cpu, cuda"):
        LowRank(rank=4, device="gpu")
    with pytest.raises(ValueError, match="batch sizes must be integers >= 1"):
        LowRank(rank=4, batches=(0,))
    assert LowRank(rank=4, batches=64).batches == (64,) and LowRank(rank=4, batches=[1, 8]).batches == (1, 8)


# ---- the batch sizes the rule is given ----

def chained_model(B, layout=0):
    """Two FusedLSTM nodes, the second fed the first's Y through a Squeeze (at layout 1, batch-major)."""
    rng = np.random.default_rng(0)
    nodes, inits = [], []
    width = 8
    for k in range(2):
        spec = LstmSpec(input_size=width, hidden_size=16, layout=layout)
        inits.append(numpy_helper.from_array(pack_layers(random_layers(spec, rng), np.float32).W, f"W{k}"))
        x = "X" if k == 0 else "Y0s"
        nodes.append(helper.make_node(OP_TYPE, [x, f"W{k}"], [f"Y{k}"], name=f"lstm{k}", domain=DOMAIN,
                                      **spec.fused_attributes()))
        width = 16
    inits.append(numpy_helper.from_array(np.array([1 if layout == 0 else 2], np.int64), "axis"))
    nodes.insert(1, helper.make_node("Squeeze", ["Y0", "axis"], ["Y0s"]))
    x = helper.make_tensor_value_info("X", TensorProto.FLOAT, ["T", B, 8] if layout == 0 else [B, "T", 8])
    graph = helper.make_graph(nodes, "g", [x], [helper.make_tensor_value_info("Y1", TensorProto.FLOAT, None)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                   helper.make_opsetid(DOMAIN, OPSET_VERSION)])


@pytest.mark.parametrize("layout", [0, 1])
def test_batches_from_the_model_and_from_shapes(layout):
    assert node_batches(chained_model(7, layout)) == {"lstm0": 7, "lstm1": 7}
    symbolic = chained_model("batch", layout)
    assert node_batches(symbolic) == {}
    given = [5, 12, 8] if layout == 0 else [12, 5, 8]
    assert node_batches(symbolic, {"X": given}) == {"lstm0": 12, "lstm1": 12}


# ---- the pass ----

@pytest.fixture
def spec():
    return LstmSpec(input_size=32, hidden_size=24, num_layers=2, direction="bidirectional")


def test_default_keeps_every_layer_whole_without_a_batch_and_says_why(spec, rng):
    """--low-rank for any device (the default where CUDA kernels load) or CUDA, without a batch size:
    nothing can show that factoring pays on CUDA, so the model comes back unfactored, every matrix
    with the reason."""
    model = stock_model(spec, random_layers(spec, rng))
    for option in (LowRank(rank=4, device="any"), LowRank(rank=4, device="cuda")):
        report = Report()
        out = optimize(model, low_rank=option, report=report)
        lr = report.low_rank
        assert len(lr.matrices) == 8 and lr.factored == 0 and lr.elements_after == lr.elements_before
        assert all("on CUDA factoring pays only at precision fp32" in m.reason and "unknown" in m.reason
                   for m in lr.matrices)
        assert lr.inputs == "nothing factored: the model is the unfactored one"
        assert not any(a.name == "rank_input" for n in out.graph.node for a in n.attribute)
    report = Report()
    optimize(model, low_rank=LowRank(rank=4, device="cpu"), report=report)
    assert report.low_rank.factored == 8


def test_cuda_factors_at_fp32_in_the_winning_region(rng):
    """H=512 at B=256 (from LowRank.batches, as the model leaves B open): factored at precision
    fp32; at the default precision (auto, TF32 there) and at B=64, kept whole."""
    spec = LstmSpec(input_size=128, hidden_size=512)
    model = stock_model(spec, random_layers(spec, rng))
    cases = [("fp32", 256, ""), (None, 256, "at B=256 precision auto runs the whole layer in TF32"),
             ("fp32", 64, "at H=512 B=64 the factored path is slower")]
    for precision, B, why in cases:
        report = Report()
        optimize(model, precision=precision, low_rank=LowRank(rank=64, device="cuda", batches=(B,)), report=report)
        matrices = report.low_rank.matrices
        assert len(matrices) == 2 and report.low_rank.factored == (0 if why else 2), (precision, B)
        assert all(why in m.reason if why else m.rank == 64 and not m.reason for m in matrices), (precision, B)


@pytest.fixture
def model_path(tmp_path, spec, rng):
    path = tmp_path / "m.onnx"
    onnx.save(stock_model(spec, random_layers(spec, rng)), str(path))
    return path


def test_cli_default_is_the_devices_this_install_runs(model_path, tmp_path, capsys, monkeypatch):
    """Issue 45: a CPU-only install once factored nothing unless told --low-rank-device cpu."""
    from lstm_ort.runtime import library

    out = tmp_path / "out.onnx"
    monkeypatch.setattr(library, "install_devices", lambda: "cpu")
    assert main(["optimize", str(model_path), "-o", str(out), "--low-rank", "4"]) == EXIT_OK
    assert ("low-rank (rank 4, both weights, for CPU (the devices this install runs)): 8 of 8 matrices factored"
            in capsys.readouterr().out)
    monkeypatch.setattr(library, "install_devices", lambda: "any")
    assert main(["optimize", str(model_path), "-o", str(out), "--low-rank", "4"]) == EXIT_OK
    assert ("low-rank (rank 4, both weights, for CPU and CUDA (the devices this install runs)): 0 of 8"
            in capsys.readouterr().out)


def test_install_devices_is_cpu_without_cuda_kernels():
    import onnxruntime as ort

    from lstm_ort.runtime.library import cuda_status, install_devices

    cuda = "CUDAExecutionProvider" in ort.get_available_providers() and cuda_status()[0]
    assert install_devices() == ("any" if cuda else "cpu")


def test_cli_any_keeps_whole_and_cpu_factors(model_path, tmp_path, capsys):
    out = tmp_path / "out.onnx"
    assert main(["optimize", str(model_path), "-o", str(out), "--low-rank", "4", "--low-rank-device", "any"]) == EXIT_OK
    text = capsys.readouterr().out
    assert "low-rank (rank 4, both weights, for CPU and CUDA): 0 of 8 matrices factored" in text
    assert "kept whole: on CUDA factoring pays only at precision fp32" in text and "--low-rank-device cpu" in text
    assert main(["optimize", str(model_path), "-o", str(out), "--low-rank", "4", "--low-rank-device", "cuda",
                 "--json"]) == EXIT_OK
    doc = json.loads(capsys.readouterr().out)["low_rank"]
    assert not any(m["rank"] for m in doc["matrices"]) and all("unknown" in m["reason"] for m in doc["matrices"])
    assert main(["optimize", str(model_path), "-o", str(out), "--low-rank", "4", "--low-rank-device", "cpu"]) == EXIT_OK
    assert "low-rank (rank 4, both weights, for CPU): 8 of 8 matrices factored" in capsys.readouterr().out


def test_cli_shape_gives_the_batch(tmp_path, rng, capsys):
    """--shape names the batch the CUDA rule needs: H=512, --precision fp32, B=256 factors, B=8 not."""
    spec = LstmSpec(input_size=128, hidden_size=512)
    src, out = tmp_path / "m.onnx", tmp_path / "out.onnx"
    onnx.save(stock_model(spec, random_layers(spec, rng)), str(src))
    common = ["optimize", str(src), "-o", str(out), "--low-rank", "64", "--low-rank-device", "cuda", "--json"]
    assert main([*common, "--precision", "fp32", "--shape", "X=2,256,128"]) == EXIT_OK
    assert {m["rank"] for m in json.loads(capsys.readouterr().out)["low_rank"]["matrices"]} == {64}
    assert main([*common, "--precision", "fp32", "--shape", "X=2,8,128"]) == EXIT_OK
    matrices = json.loads(capsys.readouterr().out)["low_rank"]["matrices"]
    assert all(m["rank"] == 0 and "at H=512 B=8 the factored path is slower" in m["reason"] for m in matrices)
    assert main([*common, "--shape", "X=2,256,128"]) == EXIT_OK  # precision auto: TF32 at B=256
    matrices = json.loads(capsys.readouterr().out)["low_rank"]["matrices"]
    assert all(m["rank"] == 0 and "precision auto runs the whole layer in TF32" in m["reason"] for m in matrices)


def test_cli_device_goes_with_low_rank(model_path, tmp_path, capsys):
    out = tmp_path / "out.onnx"
    assert main(["optimize", str(model_path), "-o", str(out), "--low-rank-device", "cpu"]) == EXIT_USAGE
    assert "--low-rank-device goes with --low-rank, --low-rank-energy" in capsys.readouterr().err
    assert main(["optimize", str(model_path), "-o", str(out), "--low-rank", "4", "--low-rank-device", "gpu"]) == \
        EXIT_USAGE
    assert "invalid choice" in capsys.readouterr().err
