"""FusedLSTM's identity in one place: names (identity), the packed weight layout (packing), the
``tuned`` attribute format (tuned) and a readable reference implementation (reference).

The C++ side spells the same things in custom_ops/include/lstm_ort/contract.h; tests/test_op_identity.py
holds the two to each other through the library's C entry points.
"""

from lstm_ort.ops.identity import DOMAIN, ELEMENT_TYPES, INPUTS, OP_TYPE, OPSET_VERSION, OUTPUTS, STRATEGIES

__all__ = ["DOMAIN", "ELEMENT_TYPES", "INPUTS", "OPSET_VERSION", "OP_TYPE", "OUTPUTS", "STRATEGIES"]
