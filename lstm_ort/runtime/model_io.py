"""Reading ONNX models the way every lstm_ort entry point does, and walking their graphs."""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Iterator
from pathlib import Path

import onnx
from onnx.external_data_helper import load_external_data_for_model, uses_external_data

from lstm_ort.runtime.output_files import Staged

MIN_IR_VERSION = 3


class ModelError(ValueError):
    """The input is not a model lstm_ort can read. The message does not name the file: callers
    that know it say it once."""


@functools.lru_cache(maxsize=None)
def max_ir_version() -> int:
    """The newest IR version the installed onnxruntime reads: asked of onnxruntime itself (it
    names its limit when refusing a newer model), not a table that ages with each release."""
    import onnxruntime as ort

    graph = onnx.helper.make_graph([], "probe", [onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1])],
                                   [onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1])])
    model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 13)])
    options = ort.SessionOptions()
    options.log_severity_level = 4
    model.ir_version = 1 << 20
    try:
        ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    except Exception as e:  # "Unsupported model IR version: N, max supported IR version: M"
        found = re.search(r"max supported IR version: (\d+)", str(e))
        if found:
            return int(found.group(1))
    for version in range(onnx.IR_VERSION + 4, MIN_IR_VERSION - 1, -1):  # a message of another wording
        model.ir_version = version
        try:
            ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
            return version
        except Exception:
            continue
    return onnx.IR_VERSION


def read_model(path: str | os.PathLike) -> tuple[onnx.ModelProto, list[Path]]:
    """The model at `path` with its external data loaded, and the files it was read from (the
    model and each external data file), resolved: what a writer must never overwrite."""
    path = Path(path)
    if path.is_dir():
        raise ModelError("is a directory, not a model file")
    if not path.exists():
        raise ModelError("no such file")
    try:
        proto = onnx.load(str(path), load_external_data=False)
    except OSError as e:
        raise ModelError(f"cannot read: {e.strerror or e}") from e
    except Exception as e:  # protobuf's DecodeError and friends
        raise ModelError(f"not an ONNX model, or a truncated one: {e}") from e
    files = [path.resolve()]
    base = path.parent
    locations = sorted({entry.value for t in _tensors(proto) if uses_external_data(t)
                        for entry in t.external_data if entry.key == "location"})
    files += [(base / location).resolve() for location in locations]
    _validate(proto)
    if locations:
        try:
            load_external_data_for_model(proto, str(base))
        except OSError as e:
            raise ModelError(f"cannot read its external data: {e.strerror or e}"
                             + (f" ({e.filename})" if getattr(e, "filename", None) else "")) from e
        except Exception as e:
            raise ModelError(f"cannot read its external data: {e}") from e
    return proto, files


def load_model(model_or_path: str | os.PathLike | bytes | onnx.ModelProto) -> onnx.ModelProto:
    if isinstance(model_or_path, onnx.ModelProto):
        return model_or_path
    if isinstance(model_or_path, bytes):
        try:
            proto = onnx.load_from_string(model_or_path)
        except Exception as e:
            raise ModelError(f"not an ONNX model, or a truncated one: {e}") from e
        _validate(proto)
        return proto
    return read_model(model_or_path)[0]


def _validate(proto: onnx.ModelProto) -> None:
    if not proto.graph.node and not proto.graph.input:
        raise ModelError("not an ONNX model: the file parsed, but holds no graph")
    newest = max_ir_version()
    if not MIN_IR_VERSION <= proto.ir_version <= newest:
        raise ModelError(f"unsupported IR version {proto.ir_version} (the installed onnxruntime reads "
                         f"{MIN_IR_VERSION}..{newest})")


def _tensors(model: onnx.ModelProto) -> Iterator[onnx.TensorProto]:
    """Every tensor a model stores: initializers and tensor attributes, at any depth."""
    for graph in iter_graphs(model):
        yield from getattr(graph, "initializer", [])
        for node in graph.node:
            for attr in node.attribute:
                if attr.HasField("t"):
                    yield attr.t
                yield from attr.tensors


def iter_graphs(model: onnx.ModelProto) -> Iterator[onnx.GraphProto | onnx.FunctionProto]:
    """The main graph, every function, and every subgraph inside them (If/Loop/Scan bodies)."""
    pending = [model.graph, *model.functions]
    while pending:
        graph = pending.pop()
        yield graph
        for node in graph.node:
            for attr in node.attribute:
                if attr.type == onnx.AttributeProto.GRAPH:
                    pending.append(attr.g)
                elif attr.type == onnx.AttributeProto.GRAPHS:
                    pending.extend(attr.graphs)


def read_names(nodes) -> set[str]:
    """The names these nodes and their subgraphs read."""
    read = set()
    for n in nodes:
        read.update(n.input)
        for a in n.attribute:
            for g in ([a.g] if a.type == onnx.AttributeProto.GRAPH else a.graphs):
                read |= read_names(g.node)
    return read


def producers(graph: onnx.GraphProto) -> dict[str, onnx.NodeProto]:
    """Each value a node of ``graph`` makes -> that node."""
    return {o: n for n in graph.node for o in n.output}


def reader_counts(graph: onnx.GraphProto) -> dict[str, int]:
    """Each value's readers in ``graph``, for rewrites that fuse a value away where one node reads it:
    a node reading it once; the graph's outputs and the values its subgraphs read count two more
    each, so such a value never reads as read by one node alone."""
    readers: dict[str, int] = {}
    for n in graph.node:
        for i in n.input:
            readers[i] = readers.get(i, 0) + 1
        for a in n.attribute:
            for g in ([a.g] if a.type == onnx.AttributeProto.GRAPH else a.graphs):
                for name in read_names(g.node):
                    readers[name] = readers.get(name, 0) + 2
    for o in graph.output:
        readers[o.name] = readers.get(o.name, 0) + 2
    return readers


# A Constant's numeric attributes other than `value`, and the element type each holds.
_CONSTANT_VALUES = {"value_float": onnx.TensorProto.FLOAT, "value_floats": onnx.TensorProto.FLOAT,
                    "value_int": onnx.TensorProto.INT64, "value_ints": onnx.TensorProto.INT64}


def constant_tensors(model: onnx.ModelProto) -> dict[str, onnx.TensorProto]:
    """Initializers and Constant-node tensors of every graph, by name (names are unique model-wide;
    a Constant's tensor is a copy named after its output, an initializer is the model's own). A
    Constant of a string or a sparse tensor is left out."""
    out = {}
    for g in iter_graphs(model):
        for t in getattr(g, "initializer", []):
            out[t.name] = t
        for n in g.node:
            if n.op_type != "Constant" or n.domain not in ("", "ai.onnx") or not n.attribute:
                continue
            a, name = n.attribute[0], n.output[0]
            if a.name == "value" and a.type == onnx.AttributeProto.TENSOR:
                out[name] = onnx.TensorProto()
                out[name].CopyFrom(a.t)
                out[name].name = name
            elif a.name in _CONSTANT_VALUES:
                value = onnx.helper.get_attribute_value(a)
                dims = [] if a.name in ("value_float", "value_int") else [len(value)]
                values = [value] if not dims else list(value)
                out[name] = onnx.helper.make_tensor(name, _CONSTANT_VALUES[a.name], dims, values)
    return out


# Larger models keep their weights in a side file (protobuf cannot serialize 2 GB).
EXTERNAL_DATA_THRESHOLD = 1 << 30


class StagedModel(Staged):
    """A model written beside its destination (lstm_ort.runtime.output_files.Staged): ``commit()``
    moves it into place (its data file first), ``discard()`` or leaving a ``with`` block without a
    commit removes it. ``write(path, data_name)`` writes the model to `path`, its tensors' data to
    the file `data_name` beside it when that is not None."""

    def __init__(self, dst: Path, write, *, external: bool) -> None:
        super().__init__(dst)
        self.data_name = self.dst.name + ".data" if external else None
        if self.data_name:
            self.beside(self.data_name)
        try:
            write(self.path, self.data_name)
        except BaseException:
            self.discard()
            raise

    @classmethod
    def of_proto(cls, model: onnx.ModelProto, dst: Path) -> StagedModel:
        """Writing may turn the proto's tensors into external references."""

        def write(path, data_name):
            if data_name:
                onnx.save(model, str(path), save_as_external_data=True, all_tensors_to_one_file=True,
                          location=data_name)
            else:
                onnx.save(model, str(path))

        return cls(dst, write, external=model.ByteSize() > EXTERNAL_DATA_THRESHOLD)
