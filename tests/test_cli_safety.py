"""Issue 11: `lstm-ort optimize` never writes a wrong or broken model, never damages a file, never
crashes; its --check feeds what a model's inputs mean; one JSON document; the smaller fixes."""

import json
import os
import stat

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import lstm_ort
from lstm_ort.builders import LstmSpec, fused_model, random_layers, stock_model
from lstm_ort.cli import EXIT_INPUT, EXIT_OK, EXIT_PARITY, EXIT_USAGE, main
from lstm_ort.testing import make_feeds, max_abs, run


def save(model, path, **kw):
    onnx.save(model, str(path), **kw)
    return path


@pytest.fixture
def model_path(tmp_path):
    spec = LstmSpec(input_size=4, hidden_size=5, num_layers=2)
    return save(stock_model(spec, random_layers(spec, np.random.default_rng(0))), tmp_path / "m.onnx")


# --- 3. --check feeds values valid for each integer input's role --------------------------------

def test_check_feeds_distinct_sequence_lengths():
    from lstm_ort.verify import random_feeds

    spec = LstmSpec(input_size=3, hidden_size=4)
    model = stock_model(spec, random_layers(spec, np.random.default_rng(0)), seq_lens=True)
    for T, B in ((7, 5), (None, None)):
        m = onnx.ModelProto()
        m.CopyFrom(model)
        dims = m.graph.input[0].type.tensor_type.shape.dim
        if T:
            dims[0].dim_value, dims[1].dim_value = T, B
            m.graph.input[1].type.tensor_type.shape.dim[0].dim_value = B
        feeds = random_feeds(m, np.random.default_rng(0))
        lens, T = feeds["sequence_lens"], feeds["X"].shape[0]
        assert lens.dtype == np.int32 and lens.min() >= 1 and lens.max() <= T
        assert len(set(lens.tolist())) >= min(3, lens.size) and T in lens and 1 in lens


def test_check_feeds_token_ids_below_the_embedding_size():
    from lstm_ort.verify import random_feeds

    spec = LstmSpec(input_size=8, hidden_size=4)
    model = stock_model(spec, random_layers(spec, np.random.default_rng(0)))
    graph = model.graph
    graph.initializer.append(numpy_helper.from_array(np.ones((50, 8), np.float32), "embedding"))
    graph.node.insert(0, helper.make_node("Gather", ["embedding", "tokens"], ["X"]))
    del graph.input[:]
    graph.input.append(helper.make_tensor_value_info("tokens", TensorProto.INT64, ["T", "B"]))
    feeds = random_feeds(model, np.random.default_rng(0))
    assert feeds["tokens"].max() < 50 and len(set(feeds["tokens"].ravel().tolist())) > 1


def test_check_compares_every_step_with_sequence_lengths(tmp_path, capsys):
    """With lengths of 1 only the first step would ever be compared."""
    spec = LstmSpec(input_size=3, hidden_size=4, direction="bidirectional")
    src = save(stock_model(spec, random_layers(spec, np.random.default_rng(0)), seq_lens=True), tmp_path / "s.onnx")
    assert main(["optimize", str(src), "-o", str(tmp_path / "o.onnx"), "--check", "--atol", "1e-5"]) == EXIT_OK


# --- 6. never replace what is not a regular file, nor anything the input is read from ---------

@pytest.mark.parametrize("output", ["", "-"])
def test_output_empty_or_dash_is_a_usage_error(model_path, output, capsys):
    assert main(["optimize", str(model_path), "-o", output]) == EXIT_USAGE
    assert "-o needs the path of a file" in capsys.readouterr().err


@pytest.mark.parametrize("kind", ["device", "fifo"])
def test_output_device_is_refused(model_path, tmp_path, kind, capsys):
    """`-o /dev/null` run as root replaced the device with a regular file. Tried on a private twin
    of /dev/null (a broken guard must not damage the machine's)."""
    special = tmp_path / kind
    if kind == "fifo":
        os.mkfifo(special)
    else:
        try:
            os.mknod(special, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
        except PermissionError:
            pytest.skip("creating a device node needs root")
    assert main(["optimize", str(model_path), "-o", str(special)]) == EXIT_USAGE
    assert "not a regular file" in capsys.readouterr().err
    mode = os.stat(special).st_mode
    assert stat.S_ISCHR(mode) if kind == "device" else stat.S_ISFIFO(mode)


def test_output_directory_is_refused(model_path, tmp_path, capsys):
    (tmp_path / "adir").mkdir()
    assert main(["optimize", str(model_path), "-o", str(tmp_path / "adir")]) == EXIT_USAGE
    assert "is a directory" in capsys.readouterr().err and (tmp_path / "adir").is_dir()


def test_output_naming_the_input_external_data_is_refused(tmp_path, capsys):
    spec = LstmSpec(input_size=4, hidden_size=5)
    src = save(stock_model(spec, random_layers(spec, np.random.default_rng(0))), tmp_path / "ext.onnx",
               save_as_external_data=True, all_tensors_to_one_file=True, location="weights.bin", size_threshold=0)
    data = tmp_path / "weights.bin"
    before = data.read_bytes()
    assert main(["optimize", str(src), "-o", str(data)]) == EXIT_USAGE
    assert "external data file weights.bin" in capsys.readouterr().err
    assert data.read_bytes() == before


def test_output_through_a_symlink_to_the_input_is_refused(model_path, tmp_path):
    link = tmp_path / "link.onnx"
    link.symlink_to(model_path)
    before = model_path.read_bytes()
    assert main(["optimize", str(model_path), "-o", str(link)]) == EXIT_USAGE
    assert model_path.read_bytes() == before and link.is_symlink()


def test_failed_write_leaves_nothing(model_path, tmp_path):
    out = tmp_path / "o.onnx"
    assert main(["optimize", str(model_path), "-o", str(out)]) == EXIT_OK
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.onnx", "o.onnx"]  # no temporary left behind


# --- 7. written files follow the umask ---------------------------------------------------------

@pytest.mark.parametrize("umask,mode", [(0o022, 0o644), (0o027, 0o640), (0o002, 0o664)])
def test_written_file_mode_follows_umask(model_path, tmp_path, umask, mode):
    old = os.umask(umask)
    try:
        out = tmp_path / "o.onnx"
        assert main(["optimize", str(model_path), "-o", str(out)]) == EXIT_OK
    finally:
        os.umask(old)
    assert stat.S_IMODE(out.stat().st_mode) == mode


def test_rewritten_file_keeps_its_mode(model_path, tmp_path):
    out = tmp_path / "o.onnx"
    out.write_bytes(b"old")
    out.chmod(0o600)
    assert main(["optimize", str(model_path), "-o", str(out)]) == EXIT_OK
    assert stat.S_IMODE(out.stat().st_mode) == 0o600 and onnx.load(str(out)).graph.node


# --- 8. --check never tracebacks ---------------------------------------------------------------

def test_check_layout1_compares_with_the_layout0_equivalent(tmp_path, capsys):
    """Stock's CPU LSTM refuses layout=1: --check runs its layout-0 twin."""
    spec = LstmSpec(input_size=3, hidden_size=4, num_layers=2, direction="bidirectional", layout=1)
    src = save(stock_model(spec, random_layers(spec, np.random.default_rng(0)), initial_states=True),
               tmp_path / "l1.onnx")
    assert main(["optimize", str(src), "-o", str(tmp_path / "o.onnx"), "--check", "--atol", "1e-5", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["check"]["passed"] and "layout-1 LSTMs as layout 0" in doc["check"]["compared_with"]


def test_check_when_stock_rejects_the_input(tmp_path, capsys):
    """One LSTM stock refuses (left, with the reason) beside one rewritten: nothing to compare against."""
    spec = LstmSpec(input_size=3, hidden_size=4, num_layers=2)
    model = stock_model(spec, random_layers(spec, np.random.default_rng(0)))
    for node in model.graph.node:
        if node.name == "l1_lstm":
            node.attribute.append(helper.make_attribute("activations", ["Sigmoid", "Swish", "Tanh"]))
    src = save(model, tmp_path / "bad.onnx")
    out = tmp_path / "o.onnx"
    assert main(["optimize", str(src), "-o", str(out), "--check"]) == EXIT_INPUT
    captured = capsys.readouterr()
    assert "stock onnxruntime cannot run the original model" in captured.err and not out.exists()
    assert "stock rejects this node too" in captured.out
    assert main(["optimize", str(src), "-o", str(out)]) == EXIT_OK  # without --check it is written


@pytest.mark.parametrize("name,shape", [("l0_R", (1, 16, 3)), ("l0_B", (1, 8)), ("l1_B", (32,))])
@pytest.mark.parametrize("command", ["optimize", "check"])
def test_wrong_weight_shapes_are_a_refusal(tmp_path, capsys, name, shape, command):
    spec = LstmSpec(input_size=3, hidden_size=4, num_layers=2)
    model = stock_model(spec, random_layers(spec, np.random.default_rng(0)))
    for k, init in enumerate(model.graph.initializer):
        if init.name == name:
            model.graph.initializer[k].CopyFrom(numpy_helper.from_array(np.zeros(shape, np.float32), name))
    src = save(model, tmp_path / "w.onnx")
    args = [command, str(src)] + (["-o", str(tmp_path / "o.onnx"), "--check"] if command == "optimize" else [])
    code = main(args + ["--json"])
    doc = json.loads(capsys.readouterr().out)
    refused = [f for f in doc["findings"] if not f["rewritten"]]
    assert refused and f"{name[-1]} has shape {list(shape)}" in refused[0]["reason"]
    assert code in (EXIT_OK, EXIT_INPUT)  # optimize --check: stock cannot run the input either


# --- 9. the default tolerance follows the element type ------------------------------------------

def test_float16_check_passes_at_the_default_tolerance(tmp_path, capsys):
    spec = LstmSpec(input_size=16, hidden_size=24, num_layers=2, direction="bidirectional")
    src = save(stock_model(spec, random_layers(spec, np.random.default_rng(0)), np.float16, initial_states=True),
               tmp_path / "h.onnx")
    assert main(["optimize", str(src), "-o", str(tmp_path / "o.onnx"), "--check", "--json"]) == EXIT_OK
    assert json.loads(capsys.readouterr().out)["check"]["rtol"] > 0


@pytest.mark.parametrize("flag", ["--atol", "--rtol"])
@pytest.mark.parametrize("value", ["nan", "-1", "inf", "abc"])
def test_bad_tolerance_is_a_usage_error(model_path, tmp_path, flag, value, capsys):
    assert main(["optimize", str(model_path), "-o", str(tmp_path / "o.onnx"), "--check", flag, value]) == EXIT_USAGE
    assert flag in capsys.readouterr().err and not (tmp_path / "o.onnx").exists()


def test_check_difference_writes_nothing(model_path, tmp_path, monkeypatch, capsys):
    from lstm_ort import verify

    monkeypatch.setattr(verify.compare, "_abs_diff", lambda a, b: np.full(np.shape(a), 1.0))
    out = tmp_path / "o.onnx"
    assert main(["optimize", str(model_path), "-o", str(out), "--check"]) == EXIT_PARITY
    assert not out.exists() and sorted(p.name for p in tmp_path.iterdir()) == ["m.onnx"]


# --- 10. IR versions: what the installed onnxruntime reads, kept -------------------------------

def test_ir_version_14_is_accepted_and_kept(model_path, tmp_path):
    from lstm_ort.runtime.model_io import max_ir_version

    assert max_ir_version() >= 14  # onnxruntime 1.32 reads IR 14
    m = onnx.load(str(model_path))
    m.ir_version = 14
    src = save(m, tmp_path / "ir14.onnx")
    out = tmp_path / "o.onnx"
    assert main(["optimize", str(src), "-o", str(out), "--check"]) == EXIT_OK
    assert onnx.load(str(out)).ir_version == 14


def test_ir_version_beyond_onnxruntime_is_refused(model_path, tmp_path, capsys):
    from lstm_ort.runtime.model_io import max_ir_version

    m = onnx.load(str(model_path))
    m.ir_version = max_ir_version() + 1
    src = save(m, tmp_path / "new.onnx")
    assert main(["check", str(src)]) == EXIT_INPUT
    assert f"the installed onnxruntime reads 3..{max_ir_version()}" in capsys.readouterr().err


# --- 11. --json: one document with everything ---------------------------------------------------

def test_json_is_one_document_with_everything(model_path, tmp_path, capsys):
    out = tmp_path / "o.onnx"
    assert main(["optimize", str(model_path), "-o", str(out), "--check", "--json"]) == EXIT_OK
    captured = capsys.readouterr()
    doc = json.loads(captured.out)
    assert doc["output"] == str(out) and doc["written"] and doc["exit_code"] == 0
    assert doc["check"]["passed"] and doc["check"]["max_abs"] <= 1e-5
    assert doc["strategies"][0]["strategy"] == "auto" and doc["findings"][0]["rewritten"]
    assert captured.err == ""


def test_json_error_is_a_document_too(model_path, capsys):
    assert main(["optimize", str(model_path), "-o", "", "--json"]) == EXIT_USAGE
    doc = json.loads(capsys.readouterr().out)
    assert doc["exit_code"] == EXIT_USAGE and "-o needs" in doc["error"] and not doc["written"]


# --- 12. options that registered the library by hand --------------------------------------------

def test_session_options_with_the_library_registered_already():
    spec = LstmSpec(input_size=3, hidden_size=4)
    model = fused_model(spec, random_layers(spec, np.random.default_rng(0)))
    feeds = make_feeds(spec, 4, 2, np.random.default_rng(1))
    so = ort.SessionOptions()
    so.register_custom_ops_library(lstm_ort.get_library_path())
    got = lstm_ort.InferenceSession(model, so, providers=["CPUExecutionProvider"]).run(None, feeds)
    plain = ort.SessionOptions()
    plain.intra_op_num_threads = 1  # the caller's own options, library not registered
    again = lstm_ort.InferenceSession(model, plain, providers=["CPUExecutionProvider"]).run(None, feeds)
    assert max_abs(got, again) == 0.0
    assert lstm_ort.InferenceSession(model, plain, providers=["CPUExecutionProvider"]).run(None, feeds)


# --- 13. memory stays bounded; check packs nothing; progress on long steps ----------------------

def test_check_packs_no_weights(model_path, monkeypatch, capsys):
    from lstm_ort.ops import packing

    def refuse(*_a, **_k):
        raise AssertionError("check must not pack weights")

    monkeypatch.setattr(packing, "write_weight_rows", refuse)
    monkeypatch.setattr("lstm_ort.rewriter.lazy_weights.write_weight_rows", refuse)
    monkeypatch.setattr("lstm_ort.rewriter.lazy_weights.write_bias", refuse)
    assert main(["check", str(model_path)]) == EXIT_OK
    assert "2 of 2 LSTM nodes rewritten" in capsys.readouterr().out


def test_optimize_holds_one_packed_layer_at_a_time(tmp_path):
    """Peak numpy memory while writing: about one layer's packed weights, not a copy of every weight."""
    import tracemalloc

    from lstm_ort.rewriter.driver import rewrite, write

    spec = LstmSpec(input_size=128, hidden_size=128, num_layers=4)
    model = stock_model(spec, random_layers(spec, np.random.default_rng(0)))
    layer_bytes = (128 + 128) * 4 * 128 * 4
    rewritten = rewrite(model)
    tracemalloc.start()
    write(rewritten, tmp_path / "o.onnx")
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert peak < 3 * layer_bytes, (peak, layer_bytes)  # all four layers' weights: 4x
    feeds = make_feeds(spec, 3, 2, np.random.default_rng(1))
    assert max_abs(run(onnx.load(str(tmp_path / "o.onnx")), feeds), run(model, feeds, fused=False)) <= 1e-5


def test_large_models_keep_their_tensors_beside_them(tmp_path, monkeypatch, capsys):
    """Above EXTERNAL_DATA_THRESHOLD (1 GiB; 0 here) the large tensors go to a data file beside the
    model (onnx-ir's writer), still a packed layer at a time; the model runs as stock's."""
    import tracemalloc

    from lstm_ort.rewriter.driver import rewrite, write
    from lstm_ort.runtime import model_io

    spec = LstmSpec(input_size=128, hidden_size=128, num_layers=4)
    model = stock_model(spec, random_layers(spec, np.random.default_rng(0)))
    src, out = tmp_path / "m.onnx", tmp_path / "o.onnx"
    onnx.save(model, str(src))
    monkeypatch.setattr(model_io, "EXTERNAL_DATA_THRESHOLD", 0)
    assert main(["optimize", str(src), "-o", str(out), "--check"]) == EXIT_OK, capsys.readouterr().err
    layer_bytes = (128 + 128) * 4 * 128 * 4
    assert (tmp_path / "o.onnx.data").stat().st_size >= 4 * layer_bytes and out.stat().st_size < layer_bytes
    feeds = make_feeds(spec, 3, 2, np.random.default_rng(1))
    assert max_abs(run(onnx.load(str(out)), feeds), run(model, feeds, fused=False)) <= 1e-5
    rewritten = rewrite(model)
    tracemalloc.start()
    write(rewritten, tmp_path / "x.onnx", data_name="x.onnx.data")
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert peak < 3 * layer_bytes, (peak, layer_bytes)


def test_long_steps_report_progress(model_path, tmp_path, monkeypatch, capsys):
    from lstm_ort import progress

    monkeypatch.setattr(progress, "enable", lambda after_s=2.0: setattr(progress, "_enabled", True)
                        or setattr(progress, "_after_s", 0.0))
    assert main(["optimize", str(model_path), "-o", str(tmp_path / "o.onnx")]) == EXIT_OK
    err = capsys.readouterr().err
    assert "lstm-ort: rewriting..." in err and "lstm-ort: rewriting: done in" in err
    progress._after_s = 2.0


def test_quick_runs_print_no_progress(model_path, tmp_path, capsys):
    assert main(["optimize", str(model_path), "-o", str(tmp_path / "o.onnx")]) == EXIT_OK
    assert capsys.readouterr().err == ""


# --- 15. --version, directories, each path named once -------------------------------------------

def test_version(capsys):
    assert main(["--version"]) == EXIT_OK
    assert capsys.readouterr().out.startswith(f"lstm-ort {lstm_ort.__version__} (onnxruntime ")


def test_directory_input(tmp_path, capsys):
    (tmp_path / "adir").mkdir()
    assert main(["optimize", str(tmp_path / "adir"), "-o", str(tmp_path / "o.onnx")]) == EXIT_INPUT
    err = capsys.readouterr().err
    assert "is a directory" in err and "no such file" not in err


def test_missing_input_names_the_path_once(tmp_path, capsys):
    missing = tmp_path / "missing.onnx"
    assert main(["check", str(missing)]) == EXIT_INPUT
    err = capsys.readouterr().err
    assert err.count(str(missing)) == 1 and "no such file" in err


def test_missing_external_data_is_an_input_error(tmp_path, capsys):
    spec = LstmSpec(input_size=4, hidden_size=5)
    src = save(stock_model(spec, random_layers(spec, np.random.default_rng(0))), tmp_path / "ext.onnx",
               save_as_external_data=True, all_tensors_to_one_file=True, location="w.bin", size_threshold=0)
    (tmp_path / "w.bin").unlink()
    assert main(["check", str(src)]) == EXIT_INPUT
    assert "cannot read its external data" in capsys.readouterr().err


def test_check_layout1_with_a_layer_left(tmp_path, capsys):
    """A layout-1 stack whose middle layer is left (its W is a graph input): stock refuses the
    left node as it refused the input; both sides run it as its layout-0 twin."""
    spec = LstmSpec(input_size=3, hidden_size=4, num_layers=3, layout=1)
    model = stock_model(spec, random_layers(spec, np.random.default_rng(0)))
    model.graph.input.append(helper.make_tensor_value_info("l1_W", TensorProto.FLOAT, [1, 16, 4]))
    src = save(model, tmp_path / "l1.onnx")
    assert main(["optimize", str(src), "-o", str(tmp_path / "o.onnx"), "--check", "--json"]) == EXIT_OK
    doc = json.loads(capsys.readouterr().out)
    assert doc["check"]["passed"] and [f["rewritten"] for f in doc["findings"]] == [True, False, True]


# --- issue 45 rows 8, 9: --shape and --carry name what the model has, with or without --batchify ----

@pytest.fixture
def stateful_path(tmp_path):
    spec = LstmSpec(input_size=4, hidden_size=5, num_layers=2)
    model = stock_model(spec, random_layers(spec, np.random.default_rng(0)), initial_states=True)
    return save(model, tmp_path / "s.onnx")


@pytest.mark.parametrize("batchify", [[], ["--batchify"]], ids=["plain", "batchify"])
@pytest.mark.parametrize("flags, says", [
    (["--shape", "nosuch=4,1,8"], "--shape 'nosuch' is none of the model's inputs (X, initial_h, initial_c)"),
    (["--shape", "X=4,8"], "--shape input 'X' has rank 3; the shape given, [4, 8], has 2 dims"),
    (["--shape", "X=4,1,4,1"], "--shape input 'X' has rank 3; the shape given, [4, 1, 4, 1], has 4 dims"),
    (["--shape", "l0_W=1,20,4"], "--shape 'l0_W' is none of the model's inputs"),  # an initializer: never fed
    (["--carry", "nope=initial_h"], "--carry nope=initial_h: 'nope' is none of the model's outputs (Y, Y_h, Y_c)"),
    (["--carry", "Y_h=h0"], "--carry Y_h=h0: 'h0' is none of the model's inputs (X, initial_h, initial_c)"),
    (["--carry", "Y_h=initial_h", "--carry", "Y_c=nope"], "--carry Y_c=nope: 'nope' is none of the model's inputs"),
], ids=["unknown-input", "rank-2", "rank-4", "initializer", "carry-output", "carry-input", "second-carry"])
def test_check_names_refused_before_any_work(stateful_path, tmp_path, capsys, batchify, flags, says):
    dst = tmp_path / "o.onnx"
    assert main(["optimize", str(stateful_path), "-o", str(dst), "--check", *batchify, *flags]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert says in err and "Traceback" not in err and not dst.exists()


def test_shape_without_check_is_checked_too(stateful_path, tmp_path, capsys):
    """--shape also gives the batch --low-rank plans for: a name the model lacks is refused there too."""
    args = ["optimize", str(stateful_path), "-o", str(tmp_path / "o.onnx"), "--low-rank", "2", "--shape", "x=4,1,4"]
    assert main(args) == EXIT_USAGE
    assert "--shape 'x' is none of the model's inputs" in capsys.readouterr().err


def test_batchify_check_runs_the_carried_calls(stateful_path, tmp_path, capsys):
    """--carry and --calls under --batchify: the streams as one batch, and chained calls of one."""
    dst = tmp_path / "o.onnx"
    assert main(["optimize", str(stateful_path), "-o", str(dst), "--batchify", "--check", "--carry", "Y_h=initial_h",
                 "--carry", "Y_c=initial_c", "--calls", "7", "--json"]) == EXIT_OK
    check = json.loads(capsys.readouterr().out)["check"]
    assert check["passed"] and check["compared_with"] == ("stock onnxruntime, each entry run alone; "
                                                          "stock onnxruntime over 7 chained calls")
