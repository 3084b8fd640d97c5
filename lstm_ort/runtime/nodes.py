"""The FusedLSTM nodes of a model: finding them, their sizes, and setting their options."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx

from lstm_ort.ops.identity import DEFAULT_PRECISION, ELEMENT_TYPES, INT8_WEIGHT_TYPE, is_fused
from lstm_ort.ops.packing import NO_RANKS, Ranks, input_size_from_weight_count
from lstm_ort.ops.spec import LstmSpec, attribute
from lstm_ort.runtime.model_io import iter_graphs


@dataclass(frozen=True)
class NodeShape:
    """What a FusedLSTM node fixes about its calls; T and B come with each call."""

    layers: int
    directions: int
    input_size: int
    hidden_size: int
    dtype: str  # a name from ELEMENT_TYPES

    @property
    def key(self) -> str:
        return f"L{self.layers} D{self.directions} I{self.input_size} H{self.hidden_size} {self.dtype}"


def fused_nodes(model: onnx.ModelProto) -> list[onnx.NodeProto]:
    return [n for g in iter_graphs(model) for n in g.node if is_fused(n)]


def node_shapes(model: onnx.ModelProto) -> list[tuple[onnx.NodeProto, NodeShape | None]]:
    """Every FusedLSTM node with its sizes, read from its attributes and its packed W initializer;
    None where W is not an initializer (its size is then unknown before a call)."""
    inits = {i.name: i for g in iter_graphs(model) for i in getattr(g, "initializer", [])}
    return [(node, _shape_of(node, inits)) for node in fused_nodes(model)]


def _shape_of(node: onnx.NodeProto, inits: dict[str, onnx.TensorProto]) -> NodeShape | None:
    spec = LstmSpec.from_node(node)
    H, L, D = spec.hidden_size, spec.num_layers, spec.num_directions
    w = inits.get(node.input[1]) if len(node.input) > 1 else None
    if w is None or w.data_type not in ELEMENT_TYPES:
        return None
    ranks = node_ranks(node)
    factors = 0
    if ranks.any:  # factored weights: I is fixed by W and the factors together
        f = inits.get(node.input[7]) if len(node.input) > 7 else None
        if f is None:
            return None
        factors = int(np.prod(f.dims))
    I = input_size_from_weight_count(int(np.prod(w.dims)), L, D, H, ranks, factors)
    return NodeShape(L, D, I, H, ELEMENT_TYPES[w.data_type]) if I is not None else None


def int8_node_names(model: onnx.ModelProto) -> set[str]:
    """Names of the FusedLSTM nodes whose W is an int8 initializer (docs/ops.md, "int8 weights")."""
    inits = {i.name: i for g in iter_graphs(model) for i in getattr(g, "initializer", [])}
    return {n.name for n in fused_nodes(model) if len(n.input) > 1 and n.input[1] in inits
            and inits[n.input[1]].data_type == INT8_WEIGHT_TYPE}


def node_ranks(node: onnx.NodeProto) -> Ranks:
    """The ranks of a FusedLSTM node's factored parts (NO_RANKS when it has none)."""
    ranks = Ranks(tuple(attribute(node, "rank_input", ())), tuple(attribute(node, "rank_recurrent", ())))
    return ranks if ranks.any else NO_RANKS


def node_precision(node: onnx.NodeProto) -> str:
    """The precision mode the node runs in: its ``precision`` attribute, absent meaning fp32."""
    return attribute(node, "precision", DEFAULT_PRECISION)


def set_attribute(node: onnx.NodeProto, name: str, value) -> None:
    """Sets (or replaces) one attribute of a node."""
    kept = [a for a in node.attribute if a.name != name]
    del node.attribute[:]
    node.attribute.extend([*kept, onnx.helper.make_attribute(name, value)])
