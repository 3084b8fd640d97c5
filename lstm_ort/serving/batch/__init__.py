"""The bucketing batcher: ragged datasets through an optimized model in length buckets
(docs/serving.md): ``BucketingBatcher`` (batcher.py), its plan (plan.py, buckets.py), its runners
(runners.py), Arrow I/O (arrow.py), ``lstm-ort batch`` (cli.py), Ray Data (ray.py)."""
