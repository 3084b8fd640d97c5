"""The lstm_ort.strategy session option: it reaches every FusedLSTM node, the CPU kernel
ignores it, and a bad value is refused before onnxruntime sees the model."""

import onnx
import onnxruntime as ort
import pytest

from lstm_ort.builders import LstmSpec, fused_model, random_layers
from lstm_ort.ops.identity import STRATEGIES
from lstm_ort.runtime.session import STRATEGY_KEY, InferenceSession, with_strategy
from lstm_ort.testing import make_feeds, max_abs, run_fused


def strategies_in(model_bytes: bytes) -> list[str]:
    model = onnx.load_from_string(model_bytes)
    return [onnx.helper.get_attribute_value(a).decode() for n in model.graph.node for a in n.attribute
            if a.name == "strategy"]


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_option_sets_every_node_and_cpu_result_unchanged(strategy, rng):
    spec = LstmSpec(input_size=5, hidden_size=8, num_layers=2)
    layers = random_layers(spec, rng)
    model = fused_model(spec, layers)
    assert strategies_in(with_strategy(model.SerializeToString(), strategy)) == [strategy]
    feeds = make_feeds(spec, 6, 3, rng)
    assert max_abs(run_fused(spec, layers, feeds, strategy=strategy), run_fused(spec, layers, feeds)) == 0.0


def test_option_replaces_an_existing_attribute(rng):
    spec = LstmSpec(input_size=5, hidden_size=8)
    once = with_strategy(fused_model(spec, random_layers(spec, rng)).SerializeToString(), "tiled")
    assert strategies_in(with_strategy(once, "wavefront")) == ["wavefront"]


def test_option_reads_a_model_path(tmp_path, rng):
    spec = LstmSpec(input_size=5, hidden_size=8)
    path = tmp_path / "m.onnx"
    onnx.save(fused_model(spec, random_layers(spec, rng)), path)
    assert strategies_in(with_strategy(str(path), "persistent")) == ["persistent"]


def test_bad_strategy_option(rng):
    spec = LstmSpec(input_size=5, hidden_size=8)
    so = ort.SessionOptions()
    so.add_session_config_entry(STRATEGY_KEY, "fastest")
    with pytest.raises(ValueError, match="lstm_ort.strategy must be one of"):
        InferenceSession(fused_model(spec, random_layers(spec, rng)), so)
