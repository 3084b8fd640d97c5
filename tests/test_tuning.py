"""`lstm-ort tune`'s cache and how sessions hand it to the kernel (CPU parts here; the GPU test
at the end measures for real)."""

import json
import warnings

import numpy as np
import onnx
import pytest

from lstm_ort.builders import LstmSpec, fused_model, random_layers
from lstm_ort.cli import EXIT_INPUT, EXIT_USAGE, main, tune_targets
from lstm_ort.ops.identity import PRECISIONS, TUNABLE_STRATEGIES
from lstm_ort.runtime import native, tuned_cache
from lstm_ort.runtime.nodes import NodeShape, fused_nodes, node_shapes
from lstm_ort.runtime.session import with_attributes, with_precision, with_strategy
from lstm_ort.testing import CUDA, make_feeds, max_abs, run, run_fused, run_stock


def tuned_values(model: onnx.ModelProto) -> list[str]:
    return [onnx.helper.get_attribute_value(a).decode() for n in fused_nodes(model) for a in n.attribute
            if a.name == "tuned"]


@pytest.mark.parametrize("L,direction,I,H,dtype", [(1, "forward", 5, 8, np.float32), (3, "bidirectional", 7, 4, np.float32),
                                                   (2, "reverse", 16, 33, np.float16)])
def test_node_shape_reads_the_packed_weights(L, direction, I, H, dtype, rng):
    spec = LstmSpec(input_size=I, hidden_size=H, num_layers=L, direction=direction)
    model = fused_model(spec, random_layers(spec, rng), dtype)
    [(_, shape)] = node_shapes(model)
    D = 2 if direction == "bidirectional" else 1
    assert shape == NodeShape(L, D, I, H, "float16" if dtype == np.float16 else "float32")


def test_record_then_attribute_round_trip():
    shape = NodeShape(4, 1, 512, 512, "float32")
    path = tuned_cache.record("GPU A", shape, 100, 64, "wavefront", {"tiled": 7.6, "wavefront": 4.0})
    tuned_cache.record("GPU A", shape, 100, 1, "persistent", {"persistent": 1.0})
    tuned_cache.record("GPU B", shape, 100, 64, "tiled", {"tiled": 1.0})
    tuned_cache.record("GPU A", NodeShape(1, 1, 8, 8, "float32"), 5, 5, "splitk", {"splitk": 0.1})
    assert path == tuned_cache.cache_file() and path.is_file()
    assert tuned_cache.load_cache()["GPU A"][shape.key]["T100 B64"]["ms"]["wavefront"] == 4.0
    entries = tuned_cache.tuned_entries(tuned_cache.load_cache(), shape)
    assert sorted(entries) == [("GPU A", 100, 1, "persistent"), ("GPU A", 100, 64, "wavefront"),
                               ("GPU B", 100, 64, "tiled")]


def test_session_attaches_winners_only_to_unforced_nodes(rng):
    spec = LstmSpec(input_size=5, hidden_size=8, num_layers=2)
    layers = random_layers(spec, rng)
    model = fused_model(spec, layers)
    [(_, shape)] = node_shapes(model)
    tuned_cache.record("Some GPU", shape, 6, 3, "wavefront", {"wavefront": 1.0})
    cache = tuned_cache.load_cache()
    assert tuned_cache.apply_tuned(model, cache) and tuned_values(model) == ["Some GPU|6|3|wavefront"]
    forced = onnx.load_from_string(with_strategy(fused_model(spec, layers).SerializeToString(), "tiled"))
    assert not tuned_cache.apply_tuned(forced, cache) and tuned_values(forced) == []
    # The CPU kernel reads the attribute and ignores it: same result as without a cache.
    feeds = make_feeds(spec, 6, 3, rng)
    tuned_run = run_fused(spec, layers, feeds)
    tuned_cache.cache_file().unlink()
    assert max_abs(tuned_run, run_fused(spec, layers, feeds)) == 0.0


def test_cache_key_differs_by_precision():
    shape = NodeShape(2, 1, 5, 8, "float32")
    keys = [tuned_cache.cache_key(shape, p) for p in PRECISIONS]
    assert len(set(keys)) == len(PRECISIONS)
    # fp32 keeps the key of caches written before precision modes: the shape alone.
    assert tuned_cache.cache_key(shape) == tuned_cache.cache_key(shape, "fp32") == shape.key
    assert tuned_cache.cache_key(shape, "tf32") == "L2 D1 I5 H8 float32 tf32"
    with pytest.raises(ValueError, match="precision must be one of"):
        tuned_cache.cache_key(shape, "fp64")


def test_winners_are_kept_and_read_per_precision():
    shape = NodeShape(2, 1, 5, 8, "float32")
    tuned_cache.record("GPU A", shape, 10, 4, "persistent", {"persistent": 1.0})
    tuned_cache.record("GPU A", shape, 10, 4, "splitk", {"splitk": 0.5}, precision="tf32")
    tuned_cache.record("GPU A", shape, 10, 4, "tiled", {"tiled": 0.7}, precision="bf16")
    cache = tuned_cache.load_cache()
    assert tuned_cache.tuned_entries(cache, shape) == [("GPU A", 10, 4, "persistent")]
    assert tuned_cache.tuned_entries(cache, shape, "tf32") == [("GPU A", 10, 4, "splitk")]
    assert tuned_cache.tuned_entries(cache, shape, "bf16") == [("GPU A", 10, 4, "tiled")]
    assert tuned_cache.tuned_entries(cache, shape, "fp16") == []


def test_session_attaches_the_winners_of_each_nodes_precision(rng):
    spec = LstmSpec(input_size=5, hidden_size=8, num_layers=2)
    layers = random_layers(spec, rng)
    [(_, shape)] = node_shapes(fused_model(spec, layers))
    tuned_cache.record("GPU A", shape, 6, 3, "wavefront", {"wavefront": 1.0})
    tuned_cache.record("GPU A", shape, 6, 3, "splitk", {"splitk": 1.0}, precision="fp16")
    cache = tuned_cache.load_cache()
    plain = fused_model(spec, layers).SerializeToString()
    assert tuned_values(onnx.load_from_string(with_attributes(plain, {}, cache))) == ["GPU A|6|3|wavefront"]
    # The session's precision is set before the winners are read: fp16's winners for an fp16 session.
    as_fp16 = onnx.load_from_string(with_attributes(plain, {"precision": "fp16"}, cache))
    assert tuned_values(as_fp16) == ["GPU A|6|3|splitk"]
    # A node carrying its own precision gets that precision's winners; one without any cached gets none.
    assert tuned_values(onnx.load_from_string(with_attributes(with_precision(plain, "fp16"), {}, cache))) == [
        "GPU A|6|3|splitk"]
    assert tuned_values(onnx.load_from_string(with_attributes(with_precision(plain, "bf16"), {}, cache))) == []


def test_tune_measures_each_shape_and_precision_once(rng):
    spec = LstmSpec(input_size=5, hidden_size=8)
    model = fused_model(spec, random_layers(spec, rng))
    for name, precision in (("a", None), ("b", "tf32"), ("c", "tf32")):  # three nodes of one shape
        node = onnx.NodeProto()
        node.CopyFrom(model.graph.node[0])
        node.name = name
        del node.output[:]
        node.output.extend(["", f"{name}_Y_h"])
        if precision:
            node.attribute.append(onnx.helper.make_attribute("precision", precision))
        model.graph.node.append(node)
    shape = NodeShape(1, 1, 5, 8, "float32")
    assert tune_targets(model, None) == [(shape, "fp32"), (shape, "tf32")]
    assert tune_targets(model, "bf16") == [(shape, "bf16")]
    model.graph.node[1].attribute.append(onnx.helper.make_attribute("precision", "fp8"))
    with pytest.raises(ValueError, match="node a's precision must be one of"):
        tune_targets(model, None)


def test_tune_refuses_a_bad_precision_as_a_usage_error(tmp_path, capsys, rng):
    spec = LstmSpec(input_size=5, hidden_size=8)
    path = tmp_path / "m.onnx"
    onnx.save(fused_model(spec, random_layers(spec, rng)), path)
    assert main(["tune", str(path), "--seq-len", "10", "--batch", "2", "--precision", "fp64"]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert "invalid choice: 'fp64'" in err and "Traceback" not in err


def test_unreadable_cache_is_a_clear_error(rng):
    tuned_cache.cache_file().parent.mkdir(parents=True)
    tuned_cache.cache_file().write_text("{not json")
    with pytest.raises(tuned_cache.CacheError, match="tuning cache .*strategies.json is unreadable"):
        tuned_cache.read_cache()


# Issue 45 rows 4 and 5: a tuning cache never breaks a session; `tune` refuses what it cannot cache.
SHAPE = NodeShape(2, 1, 5, 8, "float32")
GOOD = {"cpu:Some CPU": {SHAPE.key: {"T8 B3 threads1": {"strategy": "fused", "ms": {}}}}}


@pytest.mark.parametrize("bad", [
    {"gpu": 5},
    {"GPU A": {SHAPE.key: 5}},
    {"GPU A": {SHAPE.key: {"T8 B3": 5}}},
    {"GPU A": {SHAPE.key: {"T8 B3": {"ms": {}}}}},
    {"GPU A": {SHAPE.key: {"T8 B3": {"strategy": "warp"}}}},
    {"GPU A": {SHAPE.key: {"T8 B3": {"strategy": 3}}}},
    {"cpu:Other CPU": {SHAPE.key: {"T8 B3 threads1": {"strategy": "tiled"}}}},
    {"cpu:Other CPU": {SHAPE.key: {"T8 B3 threads-2": {"strategy": "fused"}}}},
    {"GPU A": {SHAPE.key: {"T8": {"strategy": "tiled"}}}},
    {"GPU A": {SHAPE.key: {"T99999999999999999999 B3": {"strategy": "tiled"}}}},
    {"GPU|A": {SHAPE.key: {"T8 B3": {"strategy": "tiled"}}}},
    {"": {SHAPE.key: {"T8 B3": {"strategy": "tiled"}}}},
], ids=lambda bad: json.dumps(bad)[:60])
def test_a_bad_cache_entry_is_ignored_with_a_warning(bad, rng):
    spec = LstmSpec(input_size=5, hidden_size=8, num_layers=2)
    layers = random_layers(spec, rng)
    feeds = make_feeds(spec, 8, 3, rng)
    want = run_fused(spec, layers, feeds)
    tuned_cache.cache_file().parent.mkdir(parents=True)
    tuned_cache.cache_file().write_text(json.dumps({**bad, **GOOD}))
    with pytest.warns(RuntimeWarning, match=r"tuning cache .*strategies.json: 1 entry ignored"):
        got = run_fused(spec, layers, feeds)
    assert max_abs(got, want) == 0.0
    said = []
    cache = tuned_cache.load_cache(warn=said.append)
    assert cache == GOOD and len(said) == 1  # the good entry beside it still serves
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # said once per process: every session reads the cache
        assert max_abs(run_fused(spec, layers, feeds), want) == 0.0
    model = fused_model(spec, layers)
    assert tuned_cache.apply_tuned(model, cache, cpu_threads=1) and tuned_values(model) == ["cpu:Some CPU|8|3|fused"]


@pytest.mark.parametrize("content, says", [("{not json", "is unreadable"), ("", "is unreadable"),
                                            ("[1, 2]", "is not a JSON object")])
def test_an_unreadable_cache_breaks_no_session_and_tune_names_it(content, says, tmp_path, capsys, rng):
    spec = LstmSpec(input_size=5, hidden_size=8)
    layers = random_layers(spec, rng)
    feeds = make_feeds(spec, 4, 2, rng)
    want = run_fused(spec, layers, feeds)
    path = tuned_cache.cache_file()
    path.parent.mkdir(parents=True)
    path.write_text(content)
    with pytest.warns(RuntimeWarning, match=f"tuning cache {path} {says}.*running without tuned winners"):
        assert max_abs(run_fused(spec, layers, feeds), want) == 0.0
    model = tmp_path / "m.onnx"
    onnx.save(fused_model(spec, layers), model)
    assert main(["check", str(model)]) == 0
    assert f"tuning cache {path} {says}" in capsys.readouterr().err
    assert main(["tune", str(model), "--cpu", "--seq-len", "4", "--batch", "2", "--runs", "1"]) == EXIT_INPUT
    err = capsys.readouterr().err
    assert f"lstm-ort: tuning cache {path} {says}" in err and "Traceback" not in err
    assert path.read_text() == content  # the user's file is left as it was


@pytest.mark.parametrize("below", ["", "sub"])
def test_cache_dir_naming_a_file(below, tmp_path, monkeypatch, capsys, rng):
    target = tmp_path / "a-file"
    target.write_text("not a folder")
    monkeypatch.setenv(tuned_cache.CACHE_ENV, str(target / below))
    spec = LstmSpec(input_size=5, hidden_size=8)
    layers = random_layers(spec, rng)
    feeds = make_feeds(spec, 4, 2, rng)
    if not below:
        with pytest.warns(RuntimeWarning, match=f"tuning cache folder {target} .* is not a folder"):
            run_fused(spec, layers, feeds)
    else:  # nothing there to read: the session runs as without a cache
        run_fused(spec, layers, feeds)
    model = tmp_path / "m.onnx"
    onnx.save(fused_model(spec, layers), model)
    assert main(["tune", str(model), "--cpu", "--seq-len", "4", "--batch", "2", "--runs", "1"]) == EXIT_INPUT
    err = capsys.readouterr().err
    assert str(target) in err and "Traceback" not in err
    assert target.read_text() == "not a folder"


def test_tune_replaces_a_bad_level_on_its_way_and_keeps_the_rest(tmp_path, capsys, rng):
    spec = LstmSpec(input_size=5, hidden_size=8)
    model = tmp_path / "m.onnx"
    onnx.save(fused_model(spec, random_layers(spec, rng)), model)
    device = "cpu:" + native.cpu_name()
    tuned_cache.cache_file().parent.mkdir(parents=True)
    tuned_cache.cache_file().write_text(json.dumps({device: 5, "GPU A": {"x": {"T1 B1": {"strategy": "warp"}}}}))
    assert main(["tune", str(model), "--cpu", "--seq-len", "4", "--batch", "2", "--threads", "1", "--runs", "1"]) == 0
    data = tuned_cache.read_cache()
    assert set(data[device]["L1 D1 I5 H8 float32"]) == {"T4 B2 threads1"}
    assert data["GPU A"] == {"x": {"T1 B1": {"strategy": "warp"}}}  # not ours to drop: sessions skip it


def test_tune_threads_without_cpu_is_a_usage_error(tmp_path, capsys, rng):
    spec = LstmSpec(input_size=5, hidden_size=8)
    model = tmp_path / "m.onnx"
    onnx.save(fused_model(spec, random_layers(spec, rng)), model)
    assert main(["tune", str(model), "--seq-len", "4", "--batch", "2", "--threads", "2"]) == EXIT_USAGE
    assert "--threads goes with --cpu" in capsys.readouterr().err


@pytest.mark.parametrize("flag, value", [("--threads", "-2"), ("--threads", "0"), ("--threads", "two"),
                                         ("--threads", "1.5"), ("--seq-len", "0"), ("--batch", "-1"),
                                         ("--runs", "0")])
def test_tune_refuses_bad_counts_naming_the_value(flag, value, tmp_path, capsys, rng):
    spec = LstmSpec(input_size=5, hidden_size=8)
    model = tmp_path / "m.onnx"
    onnx.save(fused_model(spec, random_layers(spec, rng)), model)
    args = {"--seq-len": "4", "--batch": "2", "--runs": "1", "--threads": "1", flag: value}
    assert main(["tune", str(model), "--cpu", *[x for kv in args.items() for x in kv]]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert f"argument {flag}: must be an integer >= 1, not '{value}'" in err
    assert not tuned_cache.cache_file().exists()


def test_bad_tuned_attribute_is_refused(rng):
    spec = LstmSpec(input_size=5, hidden_size=8)
    model = fused_model(spec, random_layers(spec, rng))
    model.graph.node[0].attribute.append(onnx.helper.make_attribute("tuned", "GPU|100|x|wavefront"))
    with pytest.raises(Exception, match=r"attribute tuned must hold 'gpu\|T\|B\|strategy' \(or 'cpu:NAME\|T\|B\|cpu_kernel'\) entries"):
        run(model, make_feeds(spec, 4, 2, rng))


def test_check_reports_each_nodes_strategy(tmp_path, capsys, rng):
    spec = LstmSpec(input_size=5, hidden_size=8, num_layers=2)
    path = tmp_path / "m.onnx"
    onnx.save(fused_model(spec, random_layers(spec, rng)), path)
    assert main(["check", str(path)]) == 0
    assert "[L2 D1 I5 H8 float32]: auto: chosen per call from T and B; precision fp32" in capsys.readouterr().out
    tuned_cache.record("GPU A", NodeShape(2, 1, 5, 8, "float32"), 10, 4, "persistent", {"persistent": 1.0})
    assert main(["check", str(path)]) == 0
    assert "tuned: T=10 B=4 -> persistent on GPU A" in capsys.readouterr().out


@pytest.mark.skipif("CUDAExecutionProvider" in __import__("onnxruntime").get_available_providers(),
                    reason="this machine has a GPU")
def test_tune_without_a_gpu_says_so(tmp_path, capsys, rng):
    spec = LstmSpec(input_size=5, hidden_size=8)
    path = tmp_path / "m.onnx"
    onnx.save(fused_model(spec, random_layers(spec, rng)), path)
    assert main(["tune", str(path), "--seq-len", "10", "--batch", "2"]) == 2
    assert "lstm-ort tune needs a CUDA GPU" in capsys.readouterr().err


@pytest.mark.gpu
def test_tune_caches_winners_that_sessions_then_use(tmp_path, capsys, rng):
    spec = LstmSpec(input_size=16, hidden_size=32, num_layers=3)
    layers = random_layers(spec, rng)
    path = tmp_path / "m.onnx"
    onnx.save(fused_model(spec, layers), path)
    assert main(["tune", str(path), "--seq-len", "20", "--batch", "1", "5", "--runs", "3", "--json"]) == 0
    out = capsys.readouterr().out
    results = json.loads(out[out.index("["):])
    assert {(r["T"], r["B"]) for r in results} == {(20, 1), (20, 5)}
    assert all(r["winner"] in TUNABLE_STRATEGIES and set(r["ms"]) == set(TUNABLE_STRATEGIES) for r in results)
    shape = NodeShape(3, 1, 16, 32, "float32")
    gpu = native.device_name()
    assert set(tuned_cache.load_cache()[gpu][shape.key]) == {"T20 B1", "T20 B5"}
    # A session now carries the winners to the kernel, and the answers stay right.
    for B in (1, 5):
        feeds = make_feeds(spec, 20, B, rng)
        got = run_fused(spec, layers, feeds, providers=CUDA)
        assert max_abs(got, run_stock(spec, layers, feeds)) <= 2e-5


@pytest.mark.gpu
@pytest.mark.parametrize("strategy,words", [("tiled", "v1 tiled"), ("persistent", "persistent ("),
                                            ("wavefront", "layers 0-1: wavefront")])
def test_describe_names_the_plan(strategy, words):
    assert words in native.describe(NodeShape(4, 1, 512, 512, "float32"), 100, 1, strategy)
