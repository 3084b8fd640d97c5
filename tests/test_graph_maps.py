"""lstm_ort.runtime.model_io's maps of a model's values: its constants, who makes each value and
how many read it (the rewrites of the stream batcher and the pipeline read them)."""

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from lstm_ort.runtime.model_io import constant_tensors, producers, read_names, reader_counts


def model_with_constants() -> onnx.ModelProto:
    branch = helper.make_graph([helper.make_node("Constant", [], ["inner"], value_float=3.0),
                                helper.make_node("Add", ["a", "inner"], ["seen"])], "branch", [],
                               [helper.make_tensor_value_info("seen", TensorProto.FLOAT, None)])
    nodes = [helper.make_node("Constant", [], ["f"], value_float=1.5),
             helper.make_node("Constant", [], ["fs"], value_floats=[1.0, 2.0]),
             helper.make_node("Constant", [], ["i"], value_int=7),
             helper.make_node("Constant", [], ["is"], value_ints=[1, -1]),
             helper.make_node("Constant", [], ["t"], value=numpy_helper.from_array(np.eye(2, dtype=np.float32))),
             helper.make_node("Constant", [], ["s"], value_string="text"),
             helper.make_node("Add", ["x", "f"], ["a"]),
             helper.make_node("Mul", ["a", "a"], ["b"]),
             helper.make_node("If", ["flag"], ["z"], then_branch=branch, else_branch=branch)]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2]),
                                          helper.make_tensor_value_info("flag", TensorProto.BOOL, [])],
                              [helper.make_tensor_value_info("b", TensorProto.FLOAT, [2]),
                               helper.make_tensor_value_info("z", TensorProto.FLOAT, [2])],
                              [numpy_helper.from_array(np.array([4], np.int64), "init")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_constant_tensors_take_every_numeric_form_at_any_depth():
    got = {k: numpy_helper.to_array(t) for k, t in constant_tensors(model_with_constants()).items()}
    assert sorted(got) == ["f", "fs", "i", "init", "inner", "is", "t"]  # no string
    assert got["f"].dtype == np.float32 and got["f"].shape == () and got["f"] == 1.5
    np.testing.assert_array_equal(got["fs"], np.array([1.0, 2.0], np.float32))
    assert got["i"].dtype == np.int64 and got["i"] == 7
    np.testing.assert_array_equal(got["is"], np.array([1, -1], np.int64))
    np.testing.assert_array_equal(got["t"], np.eye(2))
    assert got["inner"] == 3.0


def test_readers_count_outputs_and_subgraph_reads_as_more_than_one():
    g = model_with_constants().graph
    assert producers(g)["a"].op_type == "Add" and "x" not in producers(g)
    readers = reader_counts(g)
    assert readers["x"] == 1 and readers["f"] == 1
    assert readers["a"] == 2 + 2 * 2  # Mul reads it twice, each If branch once: never "read once"
    assert readers["b"] == 2  # a graph output
    assert "a" in read_names(g.node) and "inner" in read_names(g.node)
