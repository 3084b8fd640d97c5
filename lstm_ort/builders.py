"""Build matching models: a stack of stock ONNX ``LSTM`` nodes, and one ``FusedLSTM`` node.

Both take the same weights, so running them side by side is the project's parity check; the
demo model, the tests and tools/bench.py all build their models here.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from lstm_ort.ops.identity import DOMAIN, OP_TYPE, OPSET_VERSION, onnx_type
from lstm_ort.ops.packing import NO_RANKS, Int8Layer, LayerWeights, Ranks, pack_int8_layers, pack_layers
from lstm_ort.ops.spec import LstmSpec

IR_VERSION = 10  # onnxruntime >= 1.21 reads it; onnx 1.23 would otherwise write 14
DEFAULT_OPSET = 17

def random_layers(spec: LstmSpec, rng: np.random.Generator, scale: float | None = None) -> list[LayerWeights]:
    """Weights drawn uniformly in +-1/sqrt(H), as torch initialises nn.LSTM."""
    H, D = spec.hidden_size, spec.num_directions
    s = scale if scale is not None else 1.0 / np.sqrt(H)
    u = lambda *shape: rng.uniform(-s, s, shape).astype(np.float32)  # noqa: E731
    return [
        LayerWeights(
            W=u(D, 4 * H, spec.layer_input_size(layer)),
            R=u(D, 4 * H, H),
            B=u(D, 8 * H) if spec.bias else None,
            P=u(D, 3 * H) if spec.peepholes else None,
        )
        for layer in range(spec.num_layers)
    ]


def _io_shapes(spec: LstmSpec):
    LD = spec.num_layers * spec.num_directions
    H, D = spec.hidden_size, spec.num_directions
    if spec.layout == 0:
        return ["T", "B", spec.input_size], [LD, "B", H], ["T", D, "B", H]
    return ["B", "T", spec.input_size], ["B", LD, H], ["B", "T", D, H]


def _graph_io(spec, dtype, seq_lens, initial_states, outputs):
    elem = onnx_type(dtype)
    x_shape, state_shape, y_shape = _io_shapes(spec)
    inputs = [helper.make_tensor_value_info("X", elem, x_shape)]
    if seq_lens:
        inputs.append(helper.make_tensor_value_info("sequence_lens", TensorProto.INT32, ["B"]))
    if initial_states:
        inputs.append(helper.make_tensor_value_info("initial_h", elem, state_shape))
        inputs.append(helper.make_tensor_value_info("initial_c", elem, state_shape))
    shapes = {"Y": y_shape, "Y_h": state_shape, "Y_c": state_shape}
    outs = [helper.make_tensor_value_info(name, elem, shapes[name]) for name in outputs]
    return inputs, outs


def _model(graph, opset: int, extra_opsets=()) -> onnx.ModelProto:
    opsets = [helper.make_opsetid("", opset), *extra_opsets]
    model = helper.make_model(graph, opset_imports=opsets, producer_name="lstm_ort")
    model.ir_version = IR_VERSION
    return model


def stock_model(spec: LstmSpec, layers: list[LayerWeights], dtype=np.float32, *, seq_lens: bool = False,
                initial_states: bool = False, outputs=("Y", "Y_h", "Y_c"), opset: int = DEFAULT_OPSET) -> onnx.ModelProto:
    """A stack of ONNX LSTM nodes chained the way torch's exporter chains nn.LSTM layers."""
    D, L = spec.num_directions, spec.num_layers
    state_axis = 0 if spec.layout == 0 else 1
    inits, nodes = [], []

    def const(name, array):
        inits.append(numpy_helper.from_array(np.asarray(array), name))
        return name

    x, y_hs, y_cs = "X", [], []
    for layer_index, lw in enumerate(layers):
        p = f"l{layer_index}_"
        ins = [x, const(p + "W", lw.W.astype(dtype)), const(p + "R", lw.R.astype(dtype))]
        ins.append(const(p + "B", lw.B.astype(dtype)) if lw.B is not None else "")
        ins.append("sequence_lens" if seq_lens else "")
        for state in ("initial_h", "initial_c"):
            if initial_states:
                sl = [const(p + state + "_" + k, np.array(v, np.int64)) for k, v in
                      (("starts", [layer_index * D]), ("ends", [(layer_index + 1) * D]), ("axes", [state_axis]))]
                nodes.append(helper.make_node("Slice", [state, *sl], [p + state]))
                ins.append(p + state)
            else:
                ins.append("")
        ins.append(const(p + "P", lw.P.astype(dtype)) if lw.P is not None else "")
        while ins and ins[-1] == "":
            ins.pop()
        y, yh, yc = p + "Y", p + "Y_h", p + "Y_c"
        nodes.append(helper.make_node("LSTM", ins, [y, yh, yc], name=p + "lstm", **spec.onnx_attributes()))
        y_hs.append(yh)
        y_cs.append(yc)
        if layer_index < L - 1:
            # Next layer's input: both directions side by side, [T, B, D*H] (or [B, T, D*H]).
            flat = p + "Y_flat"
            if spec.layout == 0:
                nodes.append(helper.make_node("Transpose", [y], [p + "Y_tbdh"], perm=[0, 2, 1, 3]))
                y = p + "Y_tbdh"
            nodes.append(helper.make_node("Reshape", [y, const(p + "flat_shape", np.array([0, 0, -1], np.int64))], [flat]))
            x = flat
    finals = {"Y": f"l{L - 1}_Y", "Y_h": y_hs, "Y_c": y_cs}
    for name in outputs:
        src = finals[name]
        if name == "Y":
            nodes.append(helper.make_node("Identity", [src], ["Y"]))
        else:
            nodes.append(helper.make_node("Concat", src, [name], axis=state_axis))
    inputs, outs = _graph_io(spec, dtype, seq_lens, initial_states, outputs)
    graph = helper.make_graph(nodes, "lstm_stack", inputs, outs, inits)
    return _model(graph, opset)


def random_int8_layers(spec: LstmSpec, rng: np.random.Generator, *, per_channel: bool = False) -> list[Int8Layer]:
    """int8 layers as quantize_dynamic writes them from random_layers' weights: symmetric levels in
    [-127, 127], one scale per direction (or per output row) that maps the largest weight to 127."""
    out = []
    for lw in random_layers(spec, rng):
        parts = []
        for w in (lw.W, lw.R):
            top = np.abs(w).max(axis=2 if per_channel else (1, 2), keepdims=True)
            scale = (top / 127).astype(np.float32)
            parts += [np.clip(np.round(w / scale), -127, 127).astype(np.int8),
                      np.broadcast_to(scale.reshape(scale.shape[0], -1), w.shape[:2]).astype(np.float32)]
        out.append(Int8Layer(W=parts[0], W_scale=parts[1], R=parts[2], R_scale=parts[3], B=lw.B, P=lw.P))
    return out


def dynamic_quantize_model(spec: LstmSpec, layers: list[Int8Layer], *, uint8_zero_point: int | None = None,
                           per_channel: bool = False, **stock_kw) -> onnx.ModelProto:
    """``stock_model``'s stack with each LSTM as onnxruntime's com.microsoft.DynamicQuantizeLSTM on
    the given int8 weights: W [D, I, 4H] and R [D, H, 4H] int8 (zero point 0), or uint8 levels
    shifted by ``uint8_zero_point``; scales and zero points per direction, or per output channel."""
    model = stock_model(spec, [layer.dequantized() for layer in layers], **stock_kw)
    graph, D = model.graph, spec.num_directions
    inits = {i.name: i for i in graph.initializer}
    lstms = [n for n in graph.node if n.op_type == "LSTM"]
    for node, layer in zip(lstms, layers):
        ins = list(node.input) + [""] * (8 - len(node.input))
        for k, (levels, scale) in enumerate(((layer.W, layer.W_scale), (layer.R, layer.R_scale))):
            name = ins[1 + k]
            weights = levels.transpose(0, 2, 1)
            zp = np.zeros(D, np.int8)
            if uint8_zero_point is not None:
                weights = (weights.astype(np.int16) + uint8_zero_point).astype(np.uint8)
                zp = np.full(D, uint8_zero_point, np.uint8)
            scales = scale if per_channel else scale[:, 0]
            zps = np.broadcast_to(zp[:, None], scale.shape).copy() if per_channel else zp
            graph.initializer.remove(inits[name])
            graph.initializer.extend([numpy_helper.from_array(weights, name + "_quantized"),
                                      numpy_helper.from_array(np.ascontiguousarray(scales), name + "_scale"),
                                      numpy_helper.from_array(zps, name + "_zero_point")])
            ins[1 + k] = name + "_quantized"
        ins += [ins[1].replace("_quantized", "_scale"), ins[1].replace("_quantized", "_zero_point"),
                ins[2].replace("_quantized", "_scale"), ins[2].replace("_quantized", "_zero_point")]
        node.op_type, node.domain = "DynamicQuantizeLSTM", "com.microsoft"
        del node.input[:]
        node.input.extend(ins)
    model.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    return model


def fused_node(spec: LstmSpec, inputs: list[str], outputs: list[str], name: str = "fused_lstm",
               ranks: Ranks = NO_RANKS) -> onnx.NodeProto:
    while inputs and inputs[-1] == "":
        inputs = inputs[:-1]
    attrs = spec.fused_attributes()
    if ranks.any:
        attrs.update(rank_input=list(ranks.input or [0] * len(ranks.recurrent)),
                     rank_recurrent=list(ranks.recurrent or [0] * len(ranks.input)))
    return helper.make_node(OP_TYPE, inputs, outputs, name=name, domain=DOMAIN, **attrs)


def fused_model(spec: LstmSpec, layers: list[LayerWeights], dtype=np.float32, *, seq_lens: bool = False,
                initial_states: bool = False, outputs=("Y", "Y_h", "Y_c"), opset: int = DEFAULT_OPSET) -> onnx.ModelProto:
    """The same network as ``stock_model``, as one FusedLSTM node; layers that carry factors
    (LayerWeights.W_factors / R_factors) give it factored weights, Int8Layer layers int8 weights."""
    packed = pack_int8_layers(layers) if isinstance(layers[0], Int8Layer) else pack_layers(layers, dtype)
    inits = [numpy_helper.from_array(packed.W, "W_packed")]
    ins = ["X", "W_packed", "", "", "", "", "", "", ""]
    if packed.B is not None:
        inits.append(numpy_helper.from_array(packed.B, "B_packed"))
        ins[2] = "B_packed"
    if seq_lens:
        ins[3] = "sequence_lens"
    if initial_states:
        ins[4], ins[5] = "initial_h", "initial_c"
    if packed.P is not None:
        inits.append(numpy_helper.from_array(packed.P, "P_packed"))
        ins[6] = "P_packed"
    if packed.factors is not None:
        inits.append(numpy_helper.from_array(packed.factors, "factors_packed"))
        ins[7] = "factors_packed"
    if packed.scales is not None:
        inits.append(numpy_helper.from_array(packed.scales, "W_scale_packed"))
        ins[8] = "W_scale_packed"
    wanted = [name if name in outputs else "" for name in ("Y", "Y_h", "Y_c")]
    while wanted and wanted[-1] == "":
        wanted.pop()
    inputs, outs = _graph_io(spec, dtype, seq_lens, initial_states, outputs)
    graph = helper.make_graph([fused_node(spec, ins, wanted, ranks=packed.ranks)], "fused_lstm", inputs, outs, inits)
    return _model(graph, opset, [helper.make_opsetid(DOMAIN, OPSET_VERSION)])


def cell_nodes(I: int, H: int, rng: np.random.Generator, *, gate_order: str = "ifco", form: str = "matmul",
               bias: bool = True, opset: int = DEFAULT_OPSET, x: str = "x", h: str = "h", c: str = "c",
               h_out: str = "h_out", c_out: str = "c_out", gate_activation: str = "sigmoid",
               peepholes: bool = False) -> tuple[list[onnx.NodeProto], list[onnx.TensorProto]]:
    """The nodes and constants of one LSTM step written out in plain ops, as exporters write cells.

    gate_order: the gates' order along the gate axis, a permutation of "ifco" (torch "ifco",
    Keras "ifco", ONNX "iofc"). form: "matmul" (x@Wx + h@Wh + b), "gemm" (Gemm with transB and
    bias), "concat" (Concat([x, h]) @ W + b), "slices" (as matmul, gates cut by four Slices).
    gate_activation: "sigmoid", "hard_sigmoid" (the HardSigmoid op), "keras2_hard_sigmoid"
    (clip(0.2 x + 0.5, 0, 1)) or "keras3_hard_sigmoid" (relu6(x + 3) / 6, as tf2onnx writes
    them). peepholes: i and f add P * c, o adds P * c' (TensorFlow's use_peepholes).
    """
    s = 1.0 / np.sqrt(H)
    wx = rng.uniform(-s, s, (I, 4 * H)).astype(np.float32)
    wh = rng.uniform(-s, s, (H, 4 * H)).astype(np.float32)
    b = rng.uniform(-s, s, 4 * H).astype(np.float32)
    inits, nodes = [], []

    def const(name, array):
        inits.append(numpy_helper.from_array(np.asarray(array), name))
        return name

    node = lambda *a, **k: nodes.append(helper.make_node(*a, **k))  # noqa: E731
    if form == "concat":
        node("Concat", [x, h], ["xh"], axis=1)
        node("MatMul", ["xh", const("W", np.concatenate([wx, wh]))], ["prod"])
    elif form == "gemm":
        node("Gemm", [x, const("Wx_t", wx.T), const("bx", b if bias else np.zeros_like(b))], ["px"], transB=1)
        # Gemm's C is optional from opset 11.
        node("Gemm", [h, const("Wh_t", wh.T), *([const("zero_bias", np.zeros(4 * H, np.float32))] if opset < 11 else [])],
             ["ph"], transB=1)
        node("Add", ["px", "ph"], ["prod"])
    else:
        node("MatMul", [x, const("Wx", wx)], ["px"])
        node("MatMul", [h, const("Wh", wh)], ["ph"])
        node("Add", ["px", "ph"], ["prod"])
    gates = "prod"
    if bias and form != "gemm":
        node("Add", ["prod", const("b", b)], ["gates"])
        gates = "gates"
    chunk = {g: f"chunk_{g}" for g in gate_order}
    if form == "slices":
        for k, g in enumerate(gate_order):
            node("Slice", [gates, const(f"s{k}", [k * H]), const(f"e{k}", [(k + 1) * H]), const(f"a{k}", [1])],
                 [chunk[g]])
    else:
        node("Split", [gates], [chunk[g] for g in gate_order], axis=1, **({"num_outputs": 4} if opset >= 18 else {}))
    def gate(role: str, state: str) -> None:
        pre = chunk[role]
        if peepholes:
            node("Mul", [const(f"P_{role}", rng.uniform(-s, s, H).astype(np.float32)), state], [f"peep_{role}"])
            node("Add", [pre, f"peep_{role}"], [f"pre_{role}"])
            pre = f"pre_{role}"
        if gate_activation == "sigmoid":
            node("Sigmoid", [pre], [role])
        elif gate_activation == "hard_sigmoid":
            node("HardSigmoid", [pre], [role], alpha=0.25, beta=0.45)
        else:
            keras3 = gate_activation == "keras3_hard_sigmoid"
            scale, shift, hi = (1.0, 3.0, 6.0) if keras3 else (0.2, 0.5, 1.0)
            node("Mul", [pre, const("act_scale", np.array(scale, np.float32))], [f"{role}_scaled"])
            node("Add", [f"{role}_scaled", const("act_shift", np.array(shift, np.float32))], [f"{role}_shifted"])
            bounds = [const("act_lo", np.array(0, np.float32)), const("act_hi", np.array(hi, np.float32))]
            clip = dict(min=0.0, max=hi) if opset < 11 else {}
            node("Clip", [f"{role}_shifted", *(bounds if opset >= 11 else [])], [f"{role}_clipped" if keras3 else role],
                 **clip)
            if keras3:
                node("Mul", [f"{role}_clipped", const("act_recip", np.array(1 / 6, np.float32))], [role])

    gate("i", c)
    gate("f", c)
    node("Tanh", [chunk["c"]], ["g"])
    node("Mul", ["f", c], ["fc"])
    node("Mul", ["i", "g"], ["ig"])
    node("Add", ["fc", "ig"], [c_out])
    gate("o", c_out)
    node("Tanh", [c_out], ["tc"])
    node("Mul", ["o", "tc"], [h_out])
    unique = {t.name: t for t in inits}  # constants shared by the three gates, once
    return nodes, list(unique.values())


def unrolled_cell_model(I: int, H: int, rng: np.random.Generator, *, state: str = "separate",
                        opset: int = DEFAULT_OPSET, **cell) -> onnx.ModelProto:
    """One LSTM step in plain ops (cell_nodes; no LSTM node), its state carried by the caller:
    state "separate" (inputs h, c; outputs h_out, c_out) or "shared" (input state [2, B, H] read
    by Gather; output state_out), as silero-vad carries its state."""
    nodes, inits = cell_nodes(I, H, rng, opset=opset, **cell)
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["B", I])
    if state == "shared":
        inits += [numpy_helper.from_array(np.array(k, np.int64), f"index{k}") for k in (0, 1)]
        inits.append(numpy_helper.from_array(np.array([0], np.int64), "axis0"))
        nodes = [helper.make_node("Gather", ["state", "index0"], ["h"], axis=0),
                 helper.make_node("Gather", ["state", "index1"], ["c"], axis=0), *nodes,
                 helper.make_node("Unsqueeze", ["h_out", "axis0"], ["h_1"]),
                 helper.make_node("Unsqueeze", ["c_out", "axis0"], ["c_1"]),
                 helper.make_node("Concat", ["h_1", "c_1"], ["state_out"], axis=0)]
        inputs = [x, helper.make_tensor_value_info("state", TensorProto.FLOAT, [2, "B", H])]
        outputs = [helper.make_tensor_value_info("state_out", TensorProto.FLOAT, [2, "B", H])]
    else:
        inputs = [x, helper.make_tensor_value_info("h", TensorProto.FLOAT, ["B", H]),
                  helper.make_tensor_value_info("c", TensorProto.FLOAT, ["B", H])]
        outputs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, ["B", H]) for n in ("h_out", "c_out")]
    return _model(helper.make_graph(nodes, "unrolled_cell", inputs, outputs, inits), opset)


def looped_cell_model(I: int, H: int, rng: np.random.Generator, *, loop: str = "scan", reverse: bool = False,
                      layers: int = 1, opset: int = DEFAULT_OPSET, **cell) -> onnx.ModelProto:
    """A cell (cell_nodes) run over a sequence X [T, B, I] by a Scan or a Loop (x_t = Gather(X, t),
    trip count Shape(X)[0]), as exporters write a time loop; outputs Y [T, B, H], h_T, c_T.
    layers > 1 stacks Scans (each reads the one below's Y, with its own initial states h0_k, c0_k)."""
    f = TensorProto.FLOAT
    state = lambda name: helper.make_tensor_value_info(name, f, ["B", H])  # noqa: E731
    outer, inits, states_in, states_out = [], [], [], []
    x = "X"
    for layer in range(layers):
        nodes, body_inits = cell_nodes(I if layer == 0 else H, H, rng, opset=opset, **cell)
        width = I if layer == 0 else H
        sfx = "" if layers == 1 else f"_{layer}"
        h0, c0, hT, cT, y = f"h0{sfx}", f"c0{sfx}", f"h_T{sfx}", f"c_T{sfx}", "Y" if layer == layers - 1 else f"Y{sfx}"
        states_in += [state(h0), state(c0)]
        states_out += [state(hT), state(cT)]
        if loop == "scan":
            body = helper.make_graph([*nodes, helper.make_node("Identity", ["h_out"], ["y_t"])], "scan_body",
                                     [state("h"), state("c"), helper.make_tensor_value_info("x", f, ["B", width])],
                                     [state("h_out"), state("c_out"), state("y_t")], body_inits)
            direction = [1] if reverse else [0]
            outer.append(helper.make_node("Scan", [h0, c0, x], [hT, cT, y], body=body, num_scan_inputs=1,
                                          scan_input_directions=direction, scan_output_directions=direction))
        else:
            body = helper.make_graph(
                [helper.make_node("Gather", [x, "t"], ["x"], axis=0), *nodes,
                 helper.make_node("Identity", ["cond_in"], ["cond_out"]),
                 helper.make_node("Identity", ["h_out"], ["y_t"])],
                "loop_body", [helper.make_tensor_value_info("t", TensorProto.INT64, []),
                              helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []), state("h"), state("c")],
                [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []), state("h_out"), state("c_out"),
                 state("y_t")], body_inits)
            outer += [helper.make_node("Shape", [x], [f"X_shape{sfx}"]),
                      helper.make_node("Gather", [f"X_shape{sfx}", "zero"], [f"T{sfx}"], axis=0),
                      helper.make_node("Loop", [f"T{sfx}", "", h0, c0], [hT, cT, y], body=body)]
            inits = [numpy_helper.from_array(np.array(0, np.int64), "zero")]
        x = y
    graph = helper.make_graph(outer, "looped_cell", [helper.make_tensor_value_info("X", f, ["T", "B", I]), *states_in],
                              [helper.make_tensor_value_info("Y", f, ["T", "B", H]), *states_out], inits)
    return _model(graph, opset)
