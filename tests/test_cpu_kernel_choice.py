"""The CPU kernel's floor (docs/cpu.md, "The floor"): a FusedLSTM node runs each call with its own
kernel or with onnxruntime's LSTM kernel on the same weights (`cpu_kernel` stock, stock_split,
stock_threads), chosen per shape class by timing them (auto). Where stock's kernel ran the outputs are stock's own,
bit for bit; auto's choices are visible in the kernel report; the weights of a kernel no class uses
are dropped once the choice has settled; bad requests are clear errors."""

import gc
import itertools

import numpy as np
import onnxruntime as ort
import pytest

from lstm_ort.builders import LstmSpec, fused_model, random_layers
from lstm_ort.runtime import native
from lstm_ort.runtime.session import register, with_attributes
from lstm_ort.testing import factored_layers, make_feeds, run_stock

# (direction, layers, I, H, layout, T, B, features): odd widths and batches, every attribute stock has.
CASES = [
    ("forward", 1, 28, 40, 0, 5, 3, {}),
    ("reverse", 1, 13, 24, 0, 7, 1, {}),
    ("bidirectional", 2, 13, 24, 0, 6, 5, dict(seq_lens=True, initial_states=True)),
    ("bidirectional", 2, 9, 17, 1, 4, 4, dict(initial_states=True)),
    ("forward", 3, 7, 33, 1, 3, 6, dict(seq_lens=True)),
    ("forward", 1, 8, 16, 0, 4, 3, dict(clip=0.7, input_forget=1)),
    ("bidirectional", 1, 8, 16, 0, 4, 3, dict(peepholes=True, activations=["HardSigmoid", "LeakyRelu", "Tanh",
                                                                          "Sigmoid", "Softsign", "ScaledTanh"],
                                              activation_alpha=[0.3, 0.05, 0.9], activation_beta=[0.4, 1.1])),
]


def _case(case, rng):
    direction, L, I, H, layout, T, B, features = case
    model_kw = {k: features[k] for k in ("seq_lens", "initial_states") if k in features}
    spec_kw = {k: v for k, v in features.items() if k not in model_kw}
    spec = LstmSpec(input_size=I, hidden_size=H, num_layers=L, direction=direction, layout=layout, **spec_kw)
    layers = random_layers(spec, rng)
    if spec.peepholes:
        for lw in layers:
            lw.P = rng.uniform(-0.5, 0.5, (spec.num_directions, 3 * H)).astype(np.float32)
    feeds = make_feeds(spec, T, B, rng, **model_kw)
    return spec, layers, model_kw, feeds


def session(model, cpu_kernel: str, threads: int = 2) -> ort.InferenceSession:
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    register(so)
    return ort.InferenceSession(with_attributes(model.SerializeToString(), {"cpu_kernel": cpu_kernel}), so,
                                providers=["CPUExecutionProvider"])


def report_for(node: str = "fused_lstm") -> list[native.CpuChoice]:
    return [c for c in native.cpu_kernel_report() if c.node == node]


# Calls that decide a class: rounds of up to four candidates, each a block of an untimed and two
# timed runs, three rounds at least and eight at most (cpu/kernel_tuner.h).
DECIDED_WITHIN = 8 * 4 * (1 + 2)
# Whose weights each kernel runs on (the report's `held`).
WEIGHTS_OF = {"fused": "fused", "stock": "stock", "stock_split": "stock", "stock_threads": "stock_threads"}


def run_until_decided(sess, feeds, check=None) -> int:
    """Calls until the one class of these feeds is decided; the calls it took."""
    for calls in range(1, DECIDED_WITHIN + 1):
        got = sess.run(None, feeds)
        if check:
            check(got)
        if all(c.chosen != "auto" for c in report_for() if c.B):
            return calls
    raise AssertionError(f"not decided after {DECIDED_WITHIN} calls: {report_for()}")


@pytest.mark.parametrize("kernel", ["stock", "stock_split", "stock_threads"])
@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0]}-L{c[1]}-I{c[2]}-H{c[3]}-layout{c[4]}-B{c[6]}")
def test_stock_kernel_gives_stocks_outputs_bit_for_bit(case, kernel, rng):
    spec, layers, model_kw, feeds = _case(case, rng)
    expected = run_stock(spec, layers, feeds, **model_kw)  # layout 1 through its layout-0 twin
    got = session(fused_model(spec, layers, **model_kw), kernel).run(None, feeds)  # stock_threads: on 2 threads
    for g, e in zip(got, expected):
        np.testing.assert_array_equal(g, e)


@pytest.mark.parametrize("threads", [1, 2])
def test_auto_measures_each_class_then_keeps_the_faster(threads, rng):
    spec, layers, model_kw, feeds = _case(CASES[2], rng)
    expected = run_stock(spec, layers, feeds, **model_kw)
    sess = session(fused_model(spec, layers, **model_kw), "auto", threads)
    # Two candidates on one thread, up to four on two (B = 5 splits over two pieces), two rounds of
    # blocks at least.
    def close_to_stock(got):
        for g, e in zip(got, expected):
            np.testing.assert_allclose(g, e, atol=1e-5)

    assert run_until_decided(sess, feeds, close_to_stock) >= 12
    [choice] = report_for()
    assert (choice.T, choice.B) == (8, 5)  # T = 6 is in the class of 5..8
    # stock_split and stock_threads where the session's pool was found to have more than one
    # thread: never with one, where stock_split's pieces would run in turn (the count may come out
    # low on a loaded machine, never high).
    pooled = {"stock_split", "stock_threads"}
    assert set(choice.median_ms) - pooled == {"fused", "stock"}
    assert set(choice.median_ms) & pooled in (set(), pooled)
    if threads == 1:
        assert not set(choice.median_ms) & pooled
    assert choice.chosen == min(choice.median_ms, key=choice.median_ms.get)
    # Another batch is another class, measured anew.
    sess.run(None, {**feeds, **make_feeds(spec, 6, 2, rng, **model_kw)})
    assert {(c.T, c.B) for c in report_for()} == {(8, 5), (8, 2)}


def test_a_batch_of_one_has_no_split_candidate(rng):
    spec, layers, model_kw, feeds = _case(CASES[1], rng)
    sess = session(fused_model(spec, layers, **model_kw), "auto")
    run_until_decided(sess, feeds)
    [choice] = report_for()
    assert set(choice.median_ms) - {"stock_threads"} == {"fused", "stock"} and choice.chosen != "stock_split"


def test_settled_choice_drops_the_other_kernels_weights(rng):
    spec, layers, model_kw, feeds = _case(CASES[0], rng)
    sess = session(fused_model(spec, layers, **model_kw), "auto")
    first = sess.run(None, feeds)
    assert report_for()[0].held == ("fused", )  # stock's session is made when first needed
    run_until_decided(sess, feeds)
    # Then 64 calls with no new class; a choice other than the floor keeps the floor's weights until
    # its paired rechecks (after 256 and 2048 calls of the class, cpu/kernel_tuner.h) are done.
    for _ in range(64 + 2048):
        out = sess.run(None, feeds)
    [choice] = report_for()
    assert choice.held == (WEIGHTS_OF[choice.chosen], )
    for a, b in zip(out, first):
        np.testing.assert_allclose(a, b, atol=1e-6)
    # A new class needs both kernels again: they come back, and the answer stays right.
    other = make_feeds(spec, 3, 7, rng, **model_kw)
    np.testing.assert_allclose(sess.run(None, other)[0], run_stock(spec, layers, other, **model_kw)[0], atol=1e-5)
    for _ in range(3):
        sess.run(None, other)
    assert {"fused", "stock"} <= set(report_for()[0].held)


def test_fused_names_the_kernel_and_stock_never_runs(rng):
    spec, layers, model_kw, feeds = _case(CASES[0], rng)
    sess = session(fused_model(spec, layers, **model_kw), "fused")
    for _ in range(20):
        sess.run(None, feeds)
    assert report_for()[0].held == ("fused", )
    assert all(c.median_ms == {} for c in report_for())


def test_stock_cannot_run_float16_or_factored_weights(rng):
    spec = LstmSpec(input_size=12, hidden_size=16, num_layers=1)
    layers = random_layers(spec, rng)
    feeds = make_feeds(spec, 4, 3, rng)
    with pytest.raises(Exception, match="cpu_kernel=stock cannot run this call: onnxruntime's CPU LSTM has no float16"):
        session(fused_model(spec, layers, np.float16), "stock").run(None, {"X": feeds["X"].astype(np.float16)})
    factored = fused_model(spec, factored_layers(layers, rank_input=4, rank_recurrent=4))
    with pytest.raises(Exception, match="factored weights"):
        session(factored, "stock_split").run(None, feeds)
    # auto runs both on the fused kernel alone: nothing to measure.
    for model, f in ((fused_model(spec, layers, np.float16), {"X": feeds["X"].astype(np.float16)}), (factored, feeds)):
        sess = session(model, "auto")
        for _ in range(6):
            sess.run(None, f)
        assert all(c.median_ms == {} and c.chosen == "auto" for c in report_for()), report_for()
        del sess
        gc.collect()


def test_weights_fed_at_run_time_run_the_fused_kernel(rng):
    from lstm_ort.testing import weights_as_graph_input

    spec = LstmSpec(input_size=12, hidden_size=16)
    layers = random_layers(spec, rng)
    model, w_feed = weights_as_graph_input(fused_model(spec, layers))
    feeds = {**make_feeds(spec, 4, 3, rng), **w_feed}
    with pytest.raises(Exception, match="not constant initializers"):
        session(model, "stock").run(None, feeds)
    np.testing.assert_allclose(session(model, "auto").run(None, feeds)[0], run_stock(spec, layers, feeds)[0], atol=1e-5)


def test_bad_cpu_kernel_is_refused():
    with pytest.raises(ValueError, match="auto, fused, stock, stock_split, stock_threads"):
        with_attributes(b"", {"cpu_kernel": "mlas"})


@pytest.mark.parametrize("kernel", ["stock", "stock_split", "stock_threads"])
def test_concurrent_runs_of_one_session_agree(kernel, rng):
    from concurrent.futures import ThreadPoolExecutor

    spec, layers, model_kw, feeds = _case(CASES[2], rng)
    sess = session(fused_model(spec, layers, **model_kw), kernel)
    expected = sess.run(None, feeds)
    many = [make_feeds(spec, 6, 5, np.random.default_rng(k), **model_kw) for k in range(8)]
    alone = [sess.run(None, f) for f in many]
    with ThreadPoolExecutor(4) as pool:
        together = list(pool.map(lambda f: sess.run(None, f), many * 3))
    for k, outs in enumerate(together):
        for a, b in zip(outs, alone[k % len(many)]):
            np.testing.assert_array_equal(a, b)
    for a, b in zip(sess.run(None, feeds), expected):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("T,B", list(itertools.product([1, 9], [1, 4])))
def test_tuned_entries_preset_the_choice(T, B, rng):
    spec, layers, model_kw, feeds = _case(CASES[0], rng)
    feeds = make_feeds(spec, T, B, rng)
    model = fused_model(spec, layers)
    bucket = 1 if T == 1 else 16
    entry = f"cpu:{native.cpu_name()}|{bucket}|{B}|stock"
    for node in model.graph.node:
        node.attribute.append(__import__("onnx").helper.make_attribute("tuned", entry))
    sess = session(model, "auto")
    got = sess.run(None, feeds)
    [choice] = report_for()
    assert choice.preset and choice.chosen == "stock" and choice.median_ms == {}
    for g, e in zip(got, run_stock(spec, layers, feeds)):
        np.testing.assert_array_equal(g, e)


def test_tune_cpu_caches_winners_that_sessions_attach(tmp_path, rng, capsys):
    """`lstm-ort tune --cpu` times the CPU kernels per shape class and thread count; a session with
    that thread count gets the winners as presets (nothing measured), one with another does not."""
    import json

    from lstm_ort.cli import main
    from lstm_ort.runtime.session import InferenceSession
    from lstm_ort.runtime.tuned_cache import load_cache

    spec = LstmSpec(input_size=12, hidden_size=16)
    layers = random_layers(spec, rng)
    path = tmp_path / "m.onnx"
    path.write_bytes(fused_model(spec, layers).SerializeToString())
    assert main(["tune", str(path), "--cpu", "--seq-len", "5", "--batch", "3", "--threads", "1", "--runs", "3",
                 "--json"]) == 0
    out = capsys.readouterr().out
    [measured] = json.loads(out[out.index("\n[") + 1:])  # after the line per measurement
    assert (measured["T"], measured["B"], measured["threads"]) == (8, 3, 1)
    assert set(measured["ms"]) == {"fused", "stock"}  # one thread: no pieces side by side
    [(device, shapes)] = load_cache().items()
    assert device == "cpu:" + native.cpu_name()
    assert shapes["L1 D1 I12 H16 float32"]["T8 B3 threads1"]["strategy"] == measured["winner"]

    feeds = make_feeds(spec, 7, 3, rng)  # T = 7 is in the class T <= 8
    for threads, preset in ((1, True), (2, False)):
        so = ort.SessionOptions()
        so.intra_op_num_threads = threads
        so.add_session_config_entry("lstm_ort.cpu_kernel", "auto")
        sess = InferenceSession(fused_model(spec, layers), so, providers=["CPUExecutionProvider"])
        np.testing.assert_allclose(sess.run(None, feeds)[0], run_stock(spec, layers, feeds)[0], atol=1e-5)
        [choice] = report_for()
        assert choice.preset == preset
        if preset:
            assert choice.chosen == measured["winner"]
        del sess
        gc.collect()


def test_tune_cpu_skips_what_stock_cannot_run(tmp_path, rng, capsys):
    from lstm_ort.cli import main

    spec = LstmSpec(input_size=12, hidden_size=16)
    path = tmp_path / "m16.onnx"
    path.write_bytes(fused_model(spec, random_layers(spec, rng), np.float16).SerializeToString())
    assert main(["tune", str(path), "--cpu", "--seq-len", "5", "--batch", "3"]) == 1
    assert "no float16 kernel; skipped" in capsys.readouterr().err
