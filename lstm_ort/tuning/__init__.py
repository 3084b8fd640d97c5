"""Measuring: timing sessions on their device (timing), and `lstm-ort tune`'s per-shape strategy
measurements (measure). The cache they fill is read at session time by lstm_ort.runtime.tuned_cache."""
