"""lstm_ort.serving.batch.ray on a local Ray cluster: the same results as the batcher, rows kept."""

import subprocess
import sys

import numpy as np
import pytest

from lstm_ort.builders import LstmSpec, random_layers, stock_model
from lstm_ort.rewriter import optimize


def test_serving_imports_neither_ray_nor_the_rewriter():
    code = ("import sys, lstm_ort, lstm_ort.serving, lstm_ort.serving.batch.batcher, lstm_ort.serving.batch.cli; "
            "lstm_ort.serving.BucketingBatcher; "
            "print(sorted(m for m in sys.modules if m == 'ray' or m.startswith(('lstm_ort.rewriter', 'onnxscript'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_predict_on_a_local_cluster(tmp_path, rng):
    ray = pytest.importorskip("ray", reason="Ray is not installed (pip install 'lstm-ort[serving]')")
    pytest.importorskip("pyarrow")
    import pyarrow as pa

    from lstm_ort.serving import BucketingBatcher
    from lstm_ort.serving.batch.ray import predict

    spec = LstmSpec(3, 5, direction="bidirectional")
    model = optimize(stock_model(spec, random_layers(spec, rng)), sequence_lens_input=True)
    path = tmp_path / "model.onnx"
    path.write_bytes(model.SerializeToString())
    seqs = [rng.standard_normal((n, 3)).astype(np.float32) for n in rng.integers(1, 12, 40)]
    want = BucketingBatcher(model).run(seqs)
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, ignore_reinit_error=True)
    try:
        table = pa.table({"id": np.arange(len(seqs)),
                          "x": pa.array([s.tolist() for s in seqs], pa.list_(pa.list_(pa.float32(), 3)))})
        ds = ray.data.from_arrow(table)
        out = predict(ds, str(path), "x", concurrency=1, batch_size=16, buckets="auto",
                      output_names=["Y", "Y_h"], output_prefix="out_").to_arrow_refs()
        result = pa.concat_tables(ray.get(out)).sort_by("id")
    finally:
        ray.shutdown()
    assert result.column("id").to_pylist() == list(range(len(seqs)))
    for k, row_y in enumerate(result.column("out_Y").to_pylist()):
        np.testing.assert_allclose(np.array(row_y).reshape(want[k]["Y"].shape), want[k]["Y"], atol=1e-6)
        np.testing.assert_allclose(np.array(result.column("out_Y_h")[k].as_py()), want[k]["Y_h"].reshape(-1), atol=1e-6)
