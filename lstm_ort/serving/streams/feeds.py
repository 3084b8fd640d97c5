"""What a step of a stateful model takes: the model's inputs less the carried ones, their types and
declared dims, one stream's state shapes; and the checks of feeds, stacked feeds and initial
states that raise StreamError before anything is queued (docs/streams.md, *Bad input*)."""

from __future__ import annotations

import numpy as np
import onnx

from lstm_ort.serving.streams.errors import StreamError


class StepInputs:
    def __init__(self, model: onnx.ModelProto, carry):
        self.carry = check_carry(model, carry)
        self.types = tensor_types(model.graph.input, {i.name for i in model.graph.initializer})
        self.needed = [n for n in self.types if n not in self.carry.values()]
        self.needed_dtypes = [self.types[n][0] for n in self.needed]
        self.state_shapes = {inp: state_shape(*self.types[inp]) for inp in self.carry.values()}
        self.state_dtypes = {inp: self.types[inp][0] for inp in self.carry.values()}

    def check(self, feeds) -> dict[str, np.ndarray]:
        """One stream's feeds, checked: exactly the step inputs, of the model's types, ranks and fixed dims."""
        if not isinstance(feeds, dict):
            raise StreamError(f"feeds: a dict of input name -> array, not {type(feeds).__name__}")
        if len(feeds) != len(self.needed) or any(n not in feeds for n in self.needed):
            carried = sorted(n for n in feeds if n in self.carry.values())
            if carried:
                raise StreamError(f"feeds give the carried input(s) {carried}: the batcher supplies them "
                                  "(open(initial=...) sets a stream's first state)")
            missing = [n for n in self.needed if n not in feeds]
            if missing:
                raise StreamError(f"feeds miss input(s) {missing} (a step takes {self.needed})")
            raise StreamError(f"feeds name unknown input(s) {sorted(set(feeds) - set(self.needed), key=str)} "
                              f"(a step takes {self.needed})")
        out = {}
        for name in self.needed:
            dtype, dims = self.types[name]
            value = feeds[name]
            if type(value) is not np.ndarray:
                value = np.asarray(value)
            if value.dtype != dtype:
                raise StreamError(f"input {name!r} is {value.dtype}, the model takes {np.dtype(dtype)}")
            if dims is not None:
                if value.ndim != len(dims) or any(d is not None and d != s for d, s in zip(dims, value.shape)):
                    raise StreamError(f"input {name!r} has shape {value.shape}, the model takes {dims_text(dims)}")
            if 0 in value.shape:  # no stream's step: a batch of none, or a chunk of no time steps
                raise StreamError(f"input {name!r} has shape {value.shape}: a step takes one stream's feeds, "
                                  "none of them empty")
            out[name] = value
        return out

    def check_stacked(self, feeds) -> dict[str, np.ndarray]:
        """step_batch's feeds: exactly the step inputs, of the model's types."""
        if not isinstance(feeds, dict) or set(feeds) != set(self.needed):
            raise StreamError(f"step_batch: feeds must give exactly the step inputs {self.needed}")
        out = {}
        for name, dtype in zip(self.needed, self.needed_dtypes):
            v = feeds[name] if type(feeds[name]) is np.ndarray else np.asarray(feeds[name])
            if v.dtype != dtype:
                raise StreamError(f"input {name!r} is {v.dtype}, the model takes {np.dtype(dtype)}")
            out[name] = v
        return out

    def initial_states(self, initial, shapes: dict | None) -> dict[str, np.ndarray]:
        """A new stream's carried inputs: ``initial``'s (copied, checked), zeros for the others.
        ``shapes``: the streams' state shapes once the first stream fixed them."""
        if not isinstance(initial, dict):
            raise StreamError(f"initial: a dict of carried input -> array, not {type(initial).__name__}")
        unknown = sorted(set(initial) - set(self.carry.values()), key=str)
        if unknown:
            raise StreamError(f"initial names {unknown}, which are not carried inputs ({sorted(self.carry.values())})")
        values = {}
        for name in self.carry.values():
            dtype, _ = self.types[name]
            if name in initial:
                v = np.array(initial[name], copy=True)
                if v.dtype != dtype:
                    raise StreamError(f"initial {name!r} is {v.dtype}, the model takes {np.dtype(dtype)}")
                shape = self.state_shapes[name]
                if shape is not None and v.shape != shape:
                    raise StreamError(f"initial {name!r} has shape {v.shape}, one stream's state is {shape}")
            else:
                shape = shapes[name] if shapes is not None else self.state_shapes[name]
                if shape is None:
                    raise StreamError(f"the shape of carried input {name!r} is not fixed by the model "
                                      f"({dims_text(self.types[name][1])}): give it in open(initial=...)")
                v = np.zeros(shape, dtype)
            if shapes is not None and v.shape != shapes[name]:
                raise StreamError(f"initial {name}: shape {v.shape}, the streams' states have {shapes[name]}")
            values[name] = v
        return values


def check_carry(model: onnx.ModelProto, carry) -> dict[str, str]:
    if not isinstance(carry, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in carry.items()):
        raise ValueError(f"carry: a dict of state output -> input it feeds, not {carry!r}")
    inits = {i.name for i in model.graph.initializer}
    inputs = [i.name for i in model.graph.input if i.name not in inits]
    outputs = [o.name for o in model.graph.output]
    for out, inp in carry.items():
        if out not in outputs:
            raise ValueError(f"carry: the model has no output {out!r} (outputs: {', '.join(outputs)})")
        if inp not in inputs:
            raise ValueError(f"carry: the model has no input {inp!r} (inputs: {', '.join(inputs)})")
    if len(set(carry.values())) != len(carry):
        raise ValueError(f"carry: two outputs feed the same input ({carry})")
    types_in = {i.name: i.type.tensor_type.elem_type for i in model.graph.input}
    types_out = {o.name: o.type.tensor_type.elem_type for o in model.graph.output}
    for out, inp in carry.items():
        if types_in[inp] and types_out[out] and types_in[inp] != types_out[out]:
            raise ValueError(f"carry: output {out!r} is {onnx.helper.tensor_dtype_to_np_dtype(types_out[out])}, "
                             f"input {inp!r} takes {onnx.helper.tensor_dtype_to_np_dtype(types_in[inp])}")
    return dict(carry)


def tensor_types(infos, skip: set[str]) -> dict[str, tuple[np.dtype, list[int | None] | None]]:
    out = {}
    for vi in infos:
        if vi.name in skip:
            continue
        tt = vi.type.tensor_type
        if not vi.type.HasField("tensor_type"):
            raise ValueError(f"{vi.name!r} is not a tensor: StreamBatcher feeds tensors only")
        dims = [d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else None for d in tt.shape.dim] \
            if tt.HasField("shape") else None
        out[vi.name] = (np.dtype(onnx.helper.tensor_dtype_to_np_dtype(tt.elem_type)), dims)
    return out


def state_shape(dtype, dims) -> tuple[int, ...] | None:
    """One stream's state shape from the model's declared dims: the one unknown dim is the batch (1)."""
    if dims is None or sum(d is None for d in dims) > 1:
        return None
    return tuple(1 if d is None else d for d in dims)


def dims_text(dims) -> str:
    return "unknown rank" if dims is None else "[" + ", ".join("?" if d is None else str(d) for d in dims) + "]"
