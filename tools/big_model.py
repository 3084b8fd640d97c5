#!/usr/bin/env python3
"""A large stacked-LSTM model for measuring `lstm-ort` time and peak memory (issue 11):

    python tools/big_model.py 4096 2 /tmp/big.onnx        # I = H = 4096, 2 layers: 1.07 GB
    /usr/bin/time -v lstm-ort check /tmp/big.onnx
    /usr/bin/time -v lstm-ort optimize /tmp/big.onnx -o /tmp/big.fused.onnx --check
"""

import argparse

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("size", type=int, help="input and hidden size")
    p.add_argument("layers", type=int)
    p.add_argument("out")
    args = p.parse_args()
    I = H = args.size  # noqa: E741
    rng = np.random.default_rng(0)
    nodes, inits, x = [], [], "X"
    for layer in range(args.layers):
        s = 1 / np.sqrt(H)
        for name, shape in ((f"W{layer}", (1, 4 * H, I if layer == 0 else H)), (f"R{layer}", (1, 4 * H, H)),
                            (f"B{layer}", (1, 8 * H))):
            inits.append(numpy_helper.from_array(rng.uniform(-s, s, shape).astype(np.float32), name))
        nodes.append(helper.make_node("LSTM", [x, f"W{layer}", f"R{layer}", f"B{layer}"],
                                      [f"Y{layer}", f"Yh{layer}", f"Yc{layer}"], hidden_size=H, name=f"lstm{layer}"))
        if layer < args.layers - 1:
            inits.append(numpy_helper.from_array(np.array([1], np.int64), f"axis{layer}"))
            nodes.append(helper.make_node("Squeeze", [f"Y{layer}", f"axis{layer}"], [f"X{layer + 1}"]))
            x = f"X{layer + 1}"
    graph = helper.make_graph(nodes, "big", [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["T", "B", I])],
                              [helper.make_tensor_value_info(f"Y{args.layers - 1}", TensorProto.FLOAT, None)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 10
    onnx.save(model, args.out)


if __name__ == "__main__":
    main()
