"""What a model computes along its time and batch axes: one axis analysis (axes.py, a handler per
op) and its three readers: ragged exactness (ragged.py: the bucketing batcher, `optimize
--sequence-lens-input`), the batch axes of many streams (batch_axes.py with trace.py: the
StreamBatcher, `optimize --batchify`), and the pipeline's partitioner (lstm_ort.pipeline).

Plain onnx + numpy (and lstm_ort.ops): serving, the pipeline and the rewriter all read it.
"""
