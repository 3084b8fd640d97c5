"""The rewrite rules, in the order the driver runs them. Each rule is one module with its test
beside it (``<rule>_test.py``, whose OPSET_MODELS tests/test_rule_opsets.py runs at every opset);
add a rule by writing those two files and listing the Rule here."""

from lstm_ort.rewriter.rules.bidirectional_pair import BidirectionalPair
from lstm_ort.rewriter.rules.cell_chain import CellChain
from lstm_ort.rewriter.rules.cell_loop import CellLoop
from lstm_ort.rewriter.rules.dynamic_quantize_lstm import DynamicQuantizeLstm
from lstm_ort.rewriter.rules.single_lstm import SingleLstm
from lstm_ort.rewriter.rules.stack_lstm import StackLstm
from lstm_ort.rewriter.rules.unrolled_cell import UnrolledCell

DEFAULT_RULES = [
    SingleLstm(),    # one ONNX LSTM node -> a one-layer FusedLSTM
    DynamicQuantizeLstm(),  # onnxruntime's int8 DynamicQuantizeLSTM -> a one-layer FusedLSTM with int8 weights
    CellLoop(),      # a Scan/Loop over time whose body is one unrolled cell -> FusedLSTM over the sequence
    CellChain(),     # unrolled cells chained over time (a Python loop, Keras unroll=True) -> FusedLSTM over the sequence
    UnrolledCell(),  # one LSTM cell written out in MatMul/Split/Sigmoid/Tanh (streaming) -> a one-step FusedLSTM
    BidirectionalPair(),  # a forward and a reverse FusedLSTM over one sequence -> one bidirectional node
    StackLstm(),     # FusedLSTM layers joined by export glue -> one multi-layer FusedLSTM
]

__all__ = ["DEFAULT_RULES", "BidirectionalPair", "CellChain", "CellLoop", "DynamicQuantizeLstm", "SingleLstm", "StackLstm",
           "UnrolledCell"]
