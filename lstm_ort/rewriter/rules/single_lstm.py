"""Rule: one ONNX ``LSTM`` node (opsets 7, 14, 22) -> a one-layer ``lstm_ort.FusedLSTM``.

Pattern: an LSTM of the default domain. Condition: X present, W and R (and B, P where given)
constant and not overridable graph inputs, of the shapes the attributes imply; a node stock
onnxruntime accepts (layout 1 aside, which FusedLSTM runs); zero initial states that are dropped
of the shape stock demands. Replacement: FusedLSTM with the weights packed (lazily, when the
model is written) into the op contract's layout; sequence_lens and initial states pass through.
"""

from __future__ import annotations

import onnx_ir as ir

from lstm_ort.ops.identity import ELEMENT_TYPES
from lstm_ort.ops.spec import LstmSpec, attributes
from lstm_ort.rewriter import shape_expr
from lstm_ort.rewriter.fold_weights import why_not_packable
from lstm_ort.rewriter.fused_node import insert_fused_node
from lstm_ort.rewriter.graph_utils import (const_array, const_shape, const_tensor, default_opset, is_zeros,
                                           replace_outputs)
from lstm_ort.rewriter.lazy_weights import LayerSource, LazyPacked
from lstm_ort.rewriter.rule import OK, CheckResult, Rule
from lstm_ort.rewriter.stock_probe import stock_refusal

_WEIGHTS = ((1, "W"), (2, "R"), (3, "B"), (7, "P"))


def _input(node: ir.Node, i: int) -> ir.Value | None:
    return node.inputs[i] if i < len(node.inputs) else None


def _element_type(node: ir.Node) -> ir.DataType | None:
    """X's element type, else W's."""
    x = _input(node, 0)
    if x is not None and x.dtype is not None:
        return x.dtype
    w = const_tensor(_input(node, 1))
    return w.dtype if w is not None else None


def _dims(value: ir.Value) -> list | None:
    """The value's dimensions: ints, names of symbolic dimensions, None where unknown. A constant's
    are its tensor's (a declaration left from before folding can still say 'unk__0')."""
    tensor = const_tensor(value)
    if tensor is not None:
        return [int(d) for d in tensor.shape]
    shape = value.shape
    if shape is None:
        return None
    return [d if isinstance(d, int) else (d.value if isinstance(d, ir.SymbolicDim) else None) for d in shape]


def state_verdict(node: ir.Node, index: int, D: int, H: int, layout: int) -> str | None:
    """For a zero initial state (input `index`): "drop" when it has the shape stock demands
    ([D, B, H], or [B, D, H] in layout 1, B being X's) so it equals no state; "keep" when that is
    not known (it passes through and the kernel checks it per call, as stock does); else why
    stock refuses it."""
    value = _input(node, index)
    dims = _dims(value)
    if dims is None:
        return "drop" if _built_as_stock_demands(node, value, D, H, layout) else "keep"
    x_dims = _dims(node.inputs[0])
    batch = x_dims[1 - layout] if x_dims is not None and len(x_dims) == 3 else None
    name = "initial_h" if index == 5 else "initial_c"
    want = [D, batch, H] if layout == 0 else [batch, D, H]
    shown = ", ".join("?" if d is None else str(d) for d in dims)
    wanted = ", ".join(str(d) if d is not None else "B" for d in want)
    wrong = f"{name} is zeros of shape [{shown}], not [{wanted}]: stock rejects this node too (at run time)"
    if len(dims) != 3:
        return wrong
    for have, need in zip(dims, want):
        if isinstance(have, int) and isinstance(need, int) and have != need:
            return wrong
    if all(have is not None and have == need for have, need in zip(dims, want)):
        return "drop"
    return "drop" if _built_as_stock_demands(node, value, D, H, layout) else "keep"


def _built_as_stock_demands(node: ir.Node, value: ir.Value, D: int, H: int, layout: int) -> bool:
    """Whether the zero state is made to [D, B, H] (layout 1: [B, D, H]), B being X's batch dimension,
    read symbolically from the shape it is made from (_built_to)."""
    batch = shape_expr.dim(node.inputs[0], 1 - layout)
    directions, hidden = shape_expr.Product(D), shape_expr.Product(H)
    return _built_to(value) == ([directions, batch, hidden] if layout == 0 else [batch, directions, hidden])


def _built_to(value: ir.Value) -> list[shape_expr.Product] | None:
    """The shape a zero state is made to, symbolically, where a ConstantOfShape, or an Expand of a
    constant, makes it from a shape computed in the graph (how exporters size an absent state from
    Shape(X) where shape inference leaves the size unknown); else None."""
    node = value.producer()
    if node is None or node.domain not in ("", "ai.onnx") or not node.inputs:
        return None
    if node.op_type == "ConstantOfShape":
        return shape_expr.elements(node.inputs[0])
    if node.op_type != "Expand" or len(node.inputs) != 2:
        return None
    source, target = const_array(node.inputs[0]), shape_expr.elements(node.inputs[1])
    if source is None or target is None or len(target) < source.ndim:
        return None
    built = list(target)
    for k, d in enumerate(source.shape, start=len(target) - source.ndim):
        if d == 1:
            continue  # broadcast: the target's
        if target[k] not in (shape_expr.Product(1), shape_expr.Product(d)):
            return None  # only known at run time
        built[k] = shape_expr.Product(d)
    return built


class SingleLstm(Rule):
    name = "single_lstm"

    def find(self, graph):
        return [node for node in graph if node.op_type == "LSTM" and node.domain in ("", "ai.onnx")]

    def nodes(self, node: ir.Node) -> list[ir.Node]:
        return [node]

    def describe(self, node: ir.Node) -> str:
        w = _input(node, 1)
        shape = const_shape(w) or (w.shape if w is not None else None)
        attrs = attributes(node)
        layout = attrs.get("layout", 0)
        if shape is not None and len(shape) == 3:
            return f"D={shape[0]} H={attrs.get('hidden_size', '?')} I={shape[2]} layout={layout}"
        return f"H={attrs.get('hidden_size', '?')} layout={layout}"

    def check(self, node: ir.Node) -> CheckResult:
        if _input(node, 0) is None:
            return CheckResult.fail("input X is missing")
        x = node.inputs[0]
        if x.dtype is not None and x.dtype not in ELEMENT_TYPES:
            return CheckResult.fail(f"element type {x.dtype} is not float32/float16")
        for i, name in _WEIGHTS:
            value = _input(node, i)
            if value is None:
                if i in (1, 2):
                    return CheckResult.fail(f"input {name} is missing")
                continue
            refusal = why_not_packable(value, name)
            if refusal:
                return CheckResult.fail(refusal)
        refusal = stock_refusal(node, default_opset(node.graph) if node.graph is not None else None,
                                _element_type(node))
        if refusal:
            return CheckResult.fail(f"stock rejects this node too: {refusal}")
        try:
            spec = LstmSpec.from_node(node, 1)
        except (ValueError, KeyError, TypeError) as e:
            return CheckResult.fail(f"attributes: {e}")
        if spec.layout not in (0, 1):
            return CheckResult.fail(f"layout {spec.layout} is not 0 or 1")
        D, H = spec.num_directions, spec.hidden_size
        w = const_shape(node.inputs[1])
        if len(w) != 3 or w[0] != D or w[1] != 4 * H or w[2] < 1:
            return CheckResult.fail(f"W has shape {list(w)}, not [{D}, {4 * H}, I]")
        x_dims = _dims(x)
        if x_dims is not None and (len(x_dims) != 3 or (isinstance(x_dims[2], int) and x_dims[2] != w[2])):
            return CheckResult.fail(f"X has shape [{', '.join(str(d) for d in x_dims)}], which does not fit W's "
                                    f"input size {w[2]}: stock rejects this node too (at run time)")
        wanted = {"R": [D, 4 * H, H], "B": [D, 8 * H], "P": [D, 3 * H]}
        for i, name in _WEIGHTS[1:]:
            shape = const_shape(_input(node, i))
            if shape is not None and list(shape) != wanted[name]:
                return CheckResult.fail(f"{name} has shape {list(shape)}, not {wanted[name]}: stock rejects this "
                                        "node too (at run time)")
        dtype = _element_type(node)
        if dtype not in ELEMENT_TYPES:
            return CheckResult.fail(f"element type {dtype} is not float32/float16")
        for i, name in _WEIGHTS:
            tensor = const_tensor(_input(node, i))
            if tensor is not None and tensor.dtype != dtype:
                return CheckResult.fail(f"{name} is {tensor.dtype}, X is {dtype}")
        for i in (5, 6):
            if is_zeros(_input(node, i)):
                verdict = state_verdict(node, i, D, H, spec.layout)
                if verdict not in ("drop", "keep"):
                    return CheckResult.fail(verdict)
        return OK

    def rewrite(self, graph, node: ir.Node) -> ir.Node:
        """Inserts the FusedLSTM beside `node`, moves its outputs over, and removes `node`."""
        W, R, B, P = (const_tensor(_input(node, i)) for i, _ in _WEIGHTS)
        spec = LstmSpec.from_node(node, int(W.shape[2]))
        dtype = ELEMENT_TYPES[_element_type(node)]
        layers = [LayerSource(W, R, B, P)]
        # A zero initial state of the right shape (exporters build them with Expand or
        # ConstantOfShape) is the same as none.
        h0, c0 = (None if is_zeros(_input(node, i)) and state_verdict(node, i, spec.num_directions,
                                                                      spec.hidden_size, spec.layout) == "drop"
                  else _input(node, i) for i in (5, 6))
        fused = insert_fused_node(graph, node, name=(node.name or "lstm") + "_fused",
                                  attributes=spec.fused_attributes(), x=node.inputs[0],
                                  w=LazyPacked("W", layers, dtype),
                                  b=LazyPacked("B", layers, dtype) if B is not None else None,
                                  seq_lens=_input(node, 4), initial_h=h0, initial_c=c0,
                                  p=LazyPacked("P", layers, dtype) if P is not None else None)
        replace_outputs(node, fused)
        graph.remove(node, safe=True)
        return fused
