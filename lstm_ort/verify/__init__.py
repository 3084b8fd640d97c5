"""Checking an optimized model against its original, one job a module: inputs for any model
(feeds.py), the form of the original stock onnxruntime runs (stock.py), what the outputs are held
to (tolerance.py), and the run that compares them (compare.py), which `lstm-ort optimize --check`,
the serving checks and the tests share. Their names are importable from here."""

from lstm_ort.runtime.messages import clean_message
from lstm_ort.verify.compare import (
    CPU,
    STOCK_THREADS_INT8,
    CheckFailed,
    CheckUnavailable,
    Comparison,
    ParityResult,
    chained_parity,
    max_abs,
    optimized_session,
    output_names,
    parity,
    require_values,
    run_optimized,
    run_stock,
    stock_session,
    worst_of,
)
from lstm_ort.verify.feeds import cast_exactly, check_carry, check_shapes, fed_inputs, input_batch_axes, random_feeds
from lstm_ort.verify.stock import has_layout1_lstm, stock_equivalent
from lstm_ort.verify.tolerance import (
    FLOAT16_TOLERANCE,
    FLOAT32_TOLERANCE,
    INT8_TOLERANCE,
    PRECISION_TOLERANCES,
    CheckedPrecision,
    Tolerance,
    checked_precision,
    default_tolerance,
    has_dynamic_quantize_lstm,
    looser,
    precision_tolerance,
)

__all__ = [
    "CPU", "FLOAT16_TOLERANCE", "FLOAT32_TOLERANCE", "INT8_TOLERANCE", "PRECISION_TOLERANCES", "STOCK_THREADS_INT8",
    "CheckFailed", "CheckUnavailable", "CheckedPrecision", "Comparison", "ParityResult", "Tolerance", "cast_exactly",
    "chained_parity", "check_carry", "check_shapes", "checked_precision", "fed_inputs",
    "clean_message", "default_tolerance", "has_dynamic_quantize_lstm", "has_layout1_lstm", "input_batch_axes",
    "looser", "max_abs", "optimized_session", "output_names", "parity", "precision_tolerance", "random_feeds",
    "require_values", "run_optimized", "run_stock", "stock_equivalent", "stock_session", "worst_of",
]
