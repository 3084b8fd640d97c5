"""An LSTM stack's attributes in ONNX terms (``LstmSpec``), read from any LSTM or FusedLSTM node.

One reader serves the rules (stock LSTM and DynamicQuantizeLSTM nodes in onnx-ir), the passes after
fusion and the runtime (FusedLSTM nodes in onnx-ir or as protos): ``attribute`` reads either kind
of node, ``LstmSpec.from_node`` makes the spec.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from onnx import helper

from lstm_ort.ops.identity import is_fused, num_directions

# The cell's attributes, shared by ONNX's LSTM and FusedLSTM (FusedLSTM adds num_layers and its options).
CELL_ATTRIBUTES = ("hidden_size", "direction", "layout", "clip", "input_forget", "activations", "activation_alpha",
                   "activation_beta")


def _text(value):
    return value.decode() if isinstance(value, bytes) else value


def attributes(node) -> dict:
    """Every attribute of ``node`` (an onnx.NodeProto or an onnx_ir.Node) by name; strings as str."""
    if hasattr(node, "attributes"):  # onnx_ir
        values = {name: a.value for name, a in node.attributes.items()}
    else:
        values = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    return {name: [_text(v) for v in value] if isinstance(value, list) else _text(value)
            for name, value in values.items()}


def attribute(node, name: str, default=None):
    """One attribute of ``node`` (either kind), ``default`` where it has none; strings as str."""
    if hasattr(node, "attributes"):
        a = node.attributes.get(name)
        value = default if a is None else a.value
    else:
        value = next((helper.get_attribute_value(a) for a in node.attribute if a.name == name), default)
    return [_text(v) for v in value] if isinstance(value, list) else _text(value)


@dataclass
class LstmSpec:
    """Attributes of an LSTM stack, in ONNX terms (every layer shares them)."""

    input_size: int
    hidden_size: int
    num_layers: int = 1
    direction: str = "forward"
    layout: int = 0
    clip: float | None = None
    input_forget: int = 0
    activations: list[str] | None = None
    activation_alpha: list[float] | None = None
    activation_beta: list[float] | None = None
    bias: bool = True
    peepholes: bool = False
    extra: dict = field(default_factory=dict)

    @property
    def num_directions(self) -> int:
        return num_directions(self.direction)

    def layer_input_size(self, layer: int) -> int:
        return self.input_size if layer == 0 else self.num_directions * self.hidden_size

    def onnx_attributes(self) -> dict:
        attrs = {"hidden_size": self.hidden_size, "direction": self.direction}
        if self.layout:
            attrs["layout"] = self.layout
        if self.clip is not None:
            attrs["clip"] = float(self.clip)
        if self.input_forget:
            attrs["input_forget"] = self.input_forget
        if self.activations is not None:
            attrs["activations"] = list(self.activations)
        if self.activation_alpha is not None:
            attrs["activation_alpha"] = [float(a) for a in self.activation_alpha]
        if self.activation_beta is not None:
            attrs["activation_beta"] = [float(b) for b in self.activation_beta]
        return attrs

    def fused_attributes(self) -> dict:
        attrs = self.onnx_attributes()
        attrs["num_layers"] = self.num_layers
        if self.activations is not None:
            attrs["activations"] = ",".join(self.activations)
        return attrs

    @classmethod
    def from_attributes(cls, attrs: dict, input_size: int, num_layers: int = 1) -> LstmSpec:
        """From an ONNX LSTM node's attributes (strings as str or bytes); a ValueError names any
        attribute a FusedLSTM cannot take."""
        unknown = set(attrs) - set(CELL_ATTRIBUTES)
        if unknown:
            raise ValueError(f"unsupported LSTM attributes: {sorted(unknown)}")
        acts = attrs.get("activations")
        if isinstance(acts, (str, bytes)):  # FusedLSTM writes them as one comma-separated string
            acts = _text(acts).split(",")
        return cls(
            input_size=input_size,
            hidden_size=int(attrs["hidden_size"]),
            num_layers=num_layers,
            direction=_text(attrs.get("direction", "forward")),
            layout=int(attrs.get("layout", 0)),
            clip=float(attrs["clip"]) if "clip" in attrs else None,
            # Stock onnxruntime reads any non-zero input_forget as true; FusedLSTM takes 0 or 1.
            input_forget=1 if int(attrs.get("input_forget", 0)) else 0,
            activations=[_text(a) for a in acts] if acts else None,
            activation_alpha=list(attrs["activation_alpha"]) if attrs.get("activation_alpha") else None,
            activation_beta=list(attrs["activation_beta"]) if attrs.get("activation_beta") else None,
        )

    @classmethod
    def from_node(cls, node, input_size: int = 0) -> LstmSpec:
        """From an LSTM, DynamicQuantizeLSTM or FusedLSTM node (onnx.NodeProto or onnx_ir.Node): a
        FusedLSTM's num_layers, its other attributes (how it runs: strategy, precision, ranks, ...) in
        ``extra``. ``input_size``: the node's I where the caller knows it (the attributes do not say)."""
        attrs = attributes(node)
        if not is_fused(node):
            return cls.from_attributes(attrs, input_size)
        cell = {k: v for k, v in attrs.items() if k in CELL_ATTRIBUTES}
        spec = cls.from_attributes(cell, input_size, int(attrs.get("num_layers", 1)))
        spec.extra = {k: v for k, v in attrs.items() if k not in cell and k != "num_layers"}
        return spec
