"""The carried states of every stream on the session's device (CUDA), so a step moves only its
chunk and its outputs between host and device.

Each carried input has one slot array on the device, ``[capacity, *one stream's state]``, and a
spare of the same size. The batcher runs, instead of the model, the model wrapped in a few ONNX
ops on the same execution provider: ``Gather`` picks the batch's rows out of the slot array and
``Squeeze``/``Transpose`` put them in the model's layout (the batch on its axis); after the model,
``Transpose``/``Unsqueeze`` and ``ScatterND`` write the new states into a copy of the slot array,
bound (I/O binding) to the spare, and the two swap. A stream opened (or given ``initial``) has its
state written the same way, by a ``ScatterND`` model, before its first step.

Nothing here needs CUDA to run: on the CPU provider the same model runs on host OrtValues, which
is how the CPU test suite checks this path (tests/test_streams_device.py); the GPU suite runs it
on CUDA.
"""

from __future__ import annotations

import threading

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from lstm_ort.runtime.session import InferenceSession

PREFIX = "__streams_"
SLOTS = PREFIX + "slots"  # int64 [n]: the batch's rows in the slot arrays
_FIRST_CAPACITY = 64


def slots_input(name: str) -> str:
    return f"{PREFIX}{name}_slots"


def new_slots_output(name: str) -> str:
    return f"{PREFIX}{name}_new_slots"


class DeviceStates:
    """The slot arrays (and spares) on one device; the caller holds the batcher's lock around
    allocate/free/write/read, and the runner's device lock around ``swap``."""

    def __init__(self, shapes: dict[str, tuple[int, ...]], dtypes: dict[str, np.dtype], device: str, device_id: int,
                 lock: threading.Lock):
        self.shapes, self.dtypes, self.device, self.device_id = dict(shapes), dict(dtypes), device, device_id
        self.lock = lock  # the runner's: held by a call from binding the slot arrays to swapping them
        self.current = {n: self._zeros(_FIRST_CAPACITY, n) for n in shapes}
        self.spare = {n: self._zeros(_FIRST_CAPACITY, n) for n in shapes}
        self.capacity = _FIRST_CAPACITY
        self._free = list(range(_FIRST_CAPACITY - 1, -1, -1))
        self.pending: dict[int, dict[str, np.ndarray]] = {}  # slot -> state to write before its next step

    def _zeros(self, capacity: int, name: str) -> ort.OrtValue:
        return ort.OrtValue.ortvalue_from_numpy(np.zeros((capacity, *self.shapes[name]), self.dtypes[name]),
                                                self.device, self.device_id)

    def allocate(self) -> int:
        if not self._free:
            with self.lock:  # not while a call has the arrays bound
                old = self.capacity
                for n in self.shapes:  # rare (doubling): through the host
                    grown = np.zeros((2 * old, *self.shapes[n]), self.dtypes[n])
                    grown[:old] = self.current[n].numpy()
                    self.current[n] = ort.OrtValue.ortvalue_from_numpy(grown, self.device, self.device_id)
                    self.spare[n] = self._zeros(2 * old, n)
                self.capacity = 2 * old
            self._free = list(range(2 * old - 1, old - 1, -1))
        return self._free.pop()

    def free(self, slot: int) -> None:
        self.pending.pop(slot, None)
        self._free.append(slot)

    def write(self, slot: int, values: dict[str, np.ndarray]) -> None:
        self.pending[slot] = values

    def read(self, slot: int) -> dict[str, np.ndarray]:
        if slot in self.pending:
            return {n: v.copy() for n, v in self.pending[slot].items()}
        with self.lock:
            return {n: v.numpy()[slot].copy() for n, v in self.current.items()}

    def swap(self) -> None:
        self.current, self.spare = self.spare, self.current


class DeviceRunner:
    """Runs a batcher's calls with the states on the device (see the module docstring)."""

    def __init__(self, batcher):
        self.b = batcher
        providers = batcher.session.get_providers()
        self.device, self.device_id = "cpu", 0
        if "CUDAExecutionProvider" in providers:
            opts = batcher.session.get_provider_options().get("CUDAExecutionProvider", {})
            self.device, self.device_id = "cuda", int(opts.get("device_id", 0))
        self.opset = next((o.version for o in batcher.session_model.opset_import if o.domain in ("", "ai.onnx")), 0)
        if self.opset < 11:
            raise ValueError(f"device states need ScatterND (opset 11), the model imports opset {self.opset}")
        self._sessions: dict[tuple, InferenceSession] = {}
        self._writer: InferenceSession | None = None
        self._lock = threading.Lock()  # one call at a time reads and swaps the slot arrays
        self._making = threading.Lock()
        self.states: DeviceStates | None = None

    def make_states(self, shapes: dict[str, tuple[int, ...]]) -> DeviceStates:
        self.states = DeviceStates(shapes, self.b._state_dtypes, self.device, self.device_id, self._lock)
        return self.states

    # -- one call --------------------------------------------------------------------------------
    def call(self, layout, slots: list[int], feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        """One call of these streams on their stacked feeds; the outputs as the call gives them."""
        b = self.b
        session = self._session(self._axes(layout, len(slots)))
        binding = session.io_binding()
        for name in b._needed:
            binding.bind_cpu_input(name, np.require(feeds[name], requirements="C"))
        binding.bind_cpu_input(SLOTS, np.asarray(slots, np.int64))
        for out in b.output_names:
            binding.bind_output(out, "cpu")
        with self._lock:
            states = self.states
            self._flush([s for s in slots if s in states.pending])
            for name in states.shapes:
                binding.bind_ortvalue_input(slots_input(name), states.current[name])
                binding.bind_ortvalue_output(new_slots_output(name), states.spare[name])
            session.run_with_iobinding(binding)
            states.swap()
        values = binding.get_outputs()
        return [values[k].numpy() for k in range(len(b.output_names))]

    def _axes(self, layout, n: int) -> tuple[int, ...]:
        """Each carried input's batch axis; for a call of one stream any axis of size 1 will do."""
        return state_axes(layout, layout.batched, self.states.shapes)

    def _flush(self, slots: list[int]) -> None:
        """Writes the pending states of these slots (streams opened since) into the slot arrays."""
        if not slots:
            return
        states = self.states
        if self._writer is None:
            options = self.b.session.get_provider_options()
            providers = [(p, options.get(p, {})) for p in self.b.session.get_providers()]
            self._writer = InferenceSession(writer_model(states.shapes, states.dtypes, self.opset).SerializeToString(),
                                            providers=providers)
        binding = self._writer.io_binding()
        binding.bind_cpu_input(SLOTS, np.asarray(slots, np.int64))
        for name in states.shapes:
            updates = np.stack([states.pending[s][name] for s in slots])
            binding.bind_cpu_input(f"{PREFIX}{name}_updates", updates)
            binding.bind_ortvalue_input(slots_input(name), states.current[name])
            binding.bind_ortvalue_output(new_slots_output(name), states.spare[name])
        self._writer.run_with_iobinding(binding)
        states.swap()
        for s in slots:
            del states.pending[s]

    def _session(self, axes: tuple[int, ...]) -> InferenceSession:
        with self._making:  # one session per layout, made once (seconds on a GPU)
            return self._sessions.get(axes) or self._make_session(axes)

    def _make_session(self, axes: tuple[int, ...]) -> InferenceSession:
        if axes not in self._sessions:
            b = self.b
            model = wrapped_model(b.session_model, b.carry, dict(zip(self.states.shapes, axes)), self.states.shapes,
                                  self.opset)
            options = b.session.get_provider_options()
            providers = [(p, options.get(p, {})) for p in b.session.get_providers()]
            self._sessions[axes] = InferenceSession(model.SerializeToString(), b.session_options, providers=providers)
        return self._sessions[axes]


def wrapped_model(model: onnx.ModelProto, carry: dict[str, str], axes: dict[str, int],
                  shapes: dict[str, tuple[int, ...]], opset: int) -> onnx.ModelProto:
    """``model`` reading its carried inputs from slot arrays and writing them back (module docstring)."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    g = out.graph
    carried = set(carry.values())
    inputs = [i for i in g.input if i.name not in carried]
    types = {i.name: i.type.tensor_type.elem_type for i in g.input}
    del g.input[:]
    g.input.extend(inputs)
    g.input.append(helper.make_tensor_value_info(SLOTS, TensorProto.INT64, ["n"]))
    head, tail = [], []
    index = PREFIX + "index"  # [n, 1] for ScatterND
    tail += _unsqueeze(SLOTS, index, [1], opset)
    for out_name, name in carry.items():
        axis, rank = axes[name], len(shapes[name])
        g.input.append(helper.make_tensor_value_info(slots_input(name), types[name], ["capacity", *shapes[name]]))
        g.output.append(helper.make_tensor_value_info(new_slots_output(name), types[name], ["capacity", *shapes[name]]))
        rows, squeezed = f"{PREFIX}{name}_rows", f"{PREFIX}{name}_rows_squeezed"
        head.append(helper.make_node("Gather", [slots_input(name), SLOTS], [rows], axis=0))
        head += _squeeze(rows, squeezed, [axis + 1], opset)
        to_model = [*range(1, axis + 1), 0, *range(axis + 1, rank)]
        head.append(helper.make_node("Transpose", [squeezed], [name], perm=to_model))
        first, updates = f"{PREFIX}{name}_batch_first", f"{PREFIX}{name}_updates"
        tail.append(helper.make_node("Transpose", [out_name], [first], perm=[axis, *range(axis), *range(axis + 1, rank)]))
        tail += _unsqueeze(first, updates, [axis + 1], opset)
        tail.append(helper.make_node("ScatterND", [slots_input(name), index, updates], [new_slots_output(name)]))
    nodes = head + list(g.node) + tail
    del g.node[:]
    g.node.extend(nodes)
    return out


def writer_model(shapes: dict[str, tuple[int, ...]], dtypes: dict[str, np.dtype], opset: int) -> onnx.ModelProto:
    """Writes host rows (``<name>_updates``, [n, *shape]) into the slot arrays."""
    nodes, inputs, outputs = [], [helper.make_tensor_value_info(SLOTS, TensorProto.INT64, ["n"])], []
    index = PREFIX + "index"
    nodes += _unsqueeze(SLOTS, index, [1], opset)
    for name, shape in shapes.items():
        t = helper.np_dtype_to_tensor_dtype(np.dtype(dtypes[name]))
        inputs += [helper.make_tensor_value_info(slots_input(name), t, ["capacity", *shape]),
                   helper.make_tensor_value_info(f"{PREFIX}{name}_updates", t, ["n", *shape])]
        outputs.append(helper.make_tensor_value_info(new_slots_output(name), t, ["capacity", *shape]))
        nodes.append(helper.make_node("ScatterND", [slots_input(name), index, f"{PREFIX}{name}_updates"],
                                      [new_slots_output(name)]))
    graph = helper.make_graph(nodes, "stream_state_writer", inputs, outputs)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)


def reader_model(shapes: dict[str, tuple[int, ...]], dtypes: dict[str, np.dtype], opset: int) -> onnx.ModelProto:
    """Reads rows of the slot arrays (``<name>_rows``, [n, *shape]) back to the host."""
    nodes, inputs, outputs = [], [helper.make_tensor_value_info(SLOTS, TensorProto.INT64, ["n"])], []
    for name, shape in shapes.items():
        t = helper.np_dtype_to_tensor_dtype(np.dtype(dtypes[name]))
        inputs.append(helper.make_tensor_value_info(slots_input(name), t, ["capacity", *shape]))
        outputs.append(helper.make_tensor_value_info(f"{PREFIX}{name}_rows", t, ["n", *shape]))
        nodes.append(helper.make_node("Gather", [slots_input(name), SLOTS], [f"{PREFIX}{name}_rows"], axis=0))
    graph = helper.make_graph(nodes, "stream_state_reader", inputs, outputs)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)


def grow_model(shapes: dict[str, tuple[int, ...]], dtypes: dict[str, np.dtype], opset: int) -> onnx.ModelProto:
    """Pads the slot arrays with zero rows (``<name>_pads``, ONNX Pad's pads): more streams' room."""
    nodes, inputs, outputs = [], [], []
    for name, shape in shapes.items():
        t = helper.np_dtype_to_tensor_dtype(np.dtype(dtypes[name]))
        inputs += [helper.make_tensor_value_info(slots_input(name), t, ["capacity", *shape]),
                   helper.make_tensor_value_info(f"{PREFIX}{name}_pads", TensorProto.INT64, [2 * (len(shape) + 1)])]
        outputs.append(helper.make_tensor_value_info(new_slots_output(name), t, ["grown", *shape]))
        nodes.append(helper.make_node("Pad", [slots_input(name), f"{PREFIX}{name}_pads"], [new_slots_output(name)]))
    graph = helper.make_graph(nodes, "stream_state_grow", inputs, outputs)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", max(opset, 11))], ir_version=8)


def state_axes(layout, batched: bool, shapes: dict[str, tuple[int, ...]]) -> tuple[int, ...]:
    """Each carried input's batch axis in a call (a call of one stream: any axis of size 1 will do)."""
    out = []
    for name, shape in shapes.items():
        axis = layout.inputs.get(name) if batched else None
        if axis is None:
            if 1 not in shape:
                raise ValueError(f"carried input {name!r}: no batch axis to stack the states on")
            axis = shape.index(1)
        out.append(axis)
    return tuple(out)


def _squeeze(x: str, y: str, axes: list[int], opset: int) -> list[onnx.NodeProto]:
    return _axes_node("Squeeze", x, y, axes, opset)


def _unsqueeze(x: str, y: str, axes: list[int], opset: int) -> list[onnx.NodeProto]:
    return _axes_node("Unsqueeze", x, y, axes, opset)


def _axes_node(op: str, x: str, y: str, axes: list[int], opset: int) -> list[onnx.NodeProto]:
    if opset < 13:
        return [helper.make_node(op, [x], [y], axes=axes)]
    name = f"{y}_axes"
    return [helper.make_node("Constant", [], [name], value=numpy_helper.from_array(np.array(axes, np.int64), name)),
            helper.make_node(op, [x, name], [y])]
