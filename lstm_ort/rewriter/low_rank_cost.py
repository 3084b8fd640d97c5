"""Whether factoring pays: the one rule by which `optimize --low-rank` keeps a matrix whole for
cost (docs/ops.md, Factored weights). The product rule is "never slower than what it replaces":
a matrix is factored only where the factored layer is expected faster than the whole one at the
node's precision, on the device the model is meant for (`LowRank.device`), at the batch sizes
known for the node (the model's own static dims, --shape, or `LowRank.batches`).

What was measured (tools/bench_low_rank.py, rank H/4, input and recurrent weights, T=100):
- CPU: the factored kernel pays at every measured shape; a rank pays where it saves work
  (ops/factoring.py `saves_work`: r (n + 4H) < n 4H multiply-adds per row).
- CUDA: the factored path computes in FP32 (fp32 FMA kernels, FP32 cuBLAS; the `precision`
  attribute does not apply to it). On an H100, against the same model whole in fp32, it pays
  only from H=1024 at B=64 (1.61-1.68x) and at large batches (H=512 B=256, 1.47x), and loses at
  small ones (H=512 B=64 0.87-0.91x, L1 H1024 B1 0.69x, L2 H2048 B16 0.76x, B=1 0.57x, H=256
  B=8 0.49x). Against the whole layer's TF32 (`tf32`, or `auto` where it resolves to tf32) it
  loses even there: L4 H1024 B64 7.51 ms factored vs ~4.8 ms auto; L4 H512 B256 auto ~4.0 ms vs
  ~11.5 ms fp32, so 1.47x over fp32 still loses. A rank above H/4 only costs more.
So on CUDA a matrix is factored only at rank <= H/4, where the node's precision resolves to fp32
at every known batch, and every known batch lies in the winning region; an unknown batch cannot
show that it pays.
"""

from __future__ import annotations

from typing import NamedTuple

import onnx
from onnx import helper

from lstm_ort.ops.factoring import factored_cost, saves_work
from lstm_ort.ops.identity import DEFAULT_PRECISION, DOMAIN, OP_TYPE, Precision, num_directions
from lstm_ort.ops.spec import attribute as attr
from lstm_ort.runtime.native import decide_precision

DEVICES = ("any", "cpu", "cuda")  # any: factored only where it pays on both

# Where the CUDA factored path (fp32) beat the whole layer in fp32 (H100, rank H/4, T=100):
# H >= 1024 from B = 64 (1.61-1.68x), H >= 512 from B = 256 (1.47x); slower everywhere measured below.
CUDA_WINS = ((1024, 64), (512, 256))  # (min H, min B)
# What the whole layer runs is asked for a sequence of the length the region was measured at: a
# call of one step has rules of its own (custom_ops/precision.h, OneStepRunsAsTf32).
_MEASURED_STEPS = 100
CUDA_MAX_RANK_DIVISOR = 4  # rank <= H/4: the rank measured; more rank, more work

_CUDA_REGION = "H >= 1024 and B >= 64, or H >= 512 and B >= 256"


class Verdict(NamedTuple):
    pays: bool
    reason: str = ""  # why the matrix is kept whole, when it does not pay


def cuda_factored_wins(hidden: int, batch: int) -> bool:
    """Whether the CUDA factored path (fp32) was measured faster than the whole layer in fp32."""
    return any(hidden >= h and batch >= b for h, b in CUDA_WINS)


def factoring_pays(*, rank: int, width: int, hidden: int, precision: str | None, device: str,
                   batches: tuple[int, ...] = ()) -> Verdict:
    """Whether factoring one matrix [4H, width] of a FusedLSTM layer at `rank` is expected to make
    the layer faster than keeping it whole: on `device` ("cpu", "cuda", or "any": both), for a node
    of `precision` (its attribute; None: absent, fp32) called with the batch sizes `batches`
    (empty: unknown). Not paying, the reason says why."""
    if device not in DEVICES:
        raise ValueError(f"low rank: the device must be one of {', '.join(DEVICES)}, got {device!r}")
    rows = 4 * hidden
    if not saves_work(rank, width, rows):
        return Verdict(False, f"rank {rank} saves no work: {rank} x ({width} + {rows}) = "
                              f"{factored_cost(rank, width, rows)} multiply-adds per row >= {width} x {rows} = "
                              f"{width * rows} whole")
    if device == "cpu":
        return Verdict(True)
    why = _cuda_loses(rank, hidden, Precision.parse(precision or DEFAULT_PRECISION), batches)
    if not why:
        return Verdict(True)
    hint = "; --low-rank-device cpu for a model that runs on the CPU only" if device == "any" else ""
    return Verdict(False, f"on CUDA {why}{hint}")


def _cuda_loses(rank: int, hidden: int, precision: Precision, batches: tuple[int, ...]) -> str:
    """Why the factored path (fp32) would lose on CUDA; "" where it pays. What the whole layer runs
    at each batch is the op library's precision decision (decide_precision), as the kernel's."""
    if rank * CUDA_MAX_RANK_DIVISOR > hidden:
        return (f"rank {rank} > H/4 = {hidden / CUDA_MAX_RANK_DIVISOR:g} costs more than the factored path was "
                f"measured to pay at (rank H/4, H100)")
    runs = decide_precision("cuda", precision, hidden, steps=_MEASURED_STEPS).runs
    if precision != Precision.AUTO and runs != Precision.FP32:  # a reduced mode at every size
        return (f"the whole layer runs {runs} on tensor cores, the factored path fp32: slower (H100 L4 H1024 "
                f"B64: 7.51 ms factored vs ~4.8 ms tf32)")
    if not batches:
        return (f"factoring pays only at precision fp32 where {_CUDA_REGION} (H100, rank H/4), and this node's batch "
                f"size is unknown: give it with --shape")
    for b in batches:
        if decide_precision("cuda", precision, hidden, b, steps=_MEASURED_STEPS).runs != Precision.FP32:
            return (f"at B={b} precision auto runs the whole layer in TF32, faster than the factored path's fp32 "
                    f"(H100 L4 H1024 B64: 7.51 ms factored vs ~4.8 ms auto)")
        if not cuda_factored_wins(hidden, b):
            return (f"at H={hidden} B={b} the factored path is slower than the whole layer in fp32; it pays only "
                    f"with {_CUDA_REGION} (H100, rank H/4: H512 B64 0.87-0.91x, B1 0.57x, H256 B8 0.49x)")
    return ""


def node_batches(model: onnx.ModelProto, shapes: dict[str, list[int]] | None = None) -> dict[str, int]:
    """The batch size of each named FusedLSTM node of the main graph where the model fixes it or
    `shapes` (dims by graph input name, as `--shape` gives them) does, by ONNX shape inference.
    FusedLSTM has no ONNX schema: the outputs of a node whose X is known are declared from it and
    inference runs again, so a node fed by another is found too. Nodes not found are left out."""
    g = model.graph
    light = onnx.ModelProto()
    light.ir_version = model.ir_version
    light.opset_import.extend(model.opset_import)
    light.functions.extend(model.functions)
    lg = light.graph
    lg.node.extend(g.node)
    lg.output.extend(g.output)
    shapes = shapes or {}
    for vi in g.input:
        given = shapes.get(vi.name)
        lg.input.append(vi if given is None or not vi.type.HasField("tensor_type") else
                        helper.make_tensor_value_info(vi.name, vi.type.tensor_type.elem_type, given))
    inputs = {vi.name for vi in g.input}
    for init in g.initializer:  # weights leave the copy: only their shapes matter here
        if init.name in inputs:
            continue
        if init.data_type == onnx.TensorProto.INT64 or _nbytes(init) <= 1024:  # shape arithmetic may read it
            lg.initializer.append(init)
        else:
            lg.input.append(helper.make_tensor_value_info(init.name, init.data_type, list(init.dims)))
    fused = [n for n in g.node if n.domain == DOMAIN and n.op_type == OP_TYPE and n.name]
    outputs = {o for n in fused for o in n.output if o}
    lg.value_info.extend(vi for vi in g.value_info if vi.name not in outputs)
    found: dict[str, int] = {}
    declared: set[str] = set()
    for _ in range(len(fused)):
        try:
            inferred = onnx.shape_inference.infer_shapes(light, data_prop=True).graph
        except Exception:  # noqa: BLE001 - inference is a help: what it cannot tell stays unknown
            break
        known = {vi.name: vi.type.tensor_type for vi in [*inferred.input, *inferred.value_info, *inferred.output]
                 if vi.type.tensor_type.HasField("shape")}
        more = False
        for n in fused:
            x = known.get(n.input[0])
            if n.name in declared or x is None or len(x.shape.dim) != 3:
                continue
            layout = int(attr(n, "layout", 0))
            t, b = (x.shape.dim[0], x.shape.dim[1]) if layout == 0 else (x.shape.dim[1], x.shape.dim[0])
            T, B = _dim(t), _dim(b)
            if isinstance(B, int):
                found[n.name] = B
            D, H = num_directions(attr(n, "direction", "forward")), int(attr(n, "hidden_size"))
            rows = int(attr(n, "num_layers", 1)) * D
            y, state = ([T, D, B, H], [rows, B, H]) if layout == 0 else ([B, T, D, H], [B, rows, H])
            for name, shape in zip(n.output, (y, state, state)):
                if name:
                    lg.value_info.append(helper.make_tensor_value_info(name, x.elem_type, shape))
            declared.add(n.name)
            more = True
        if not more:
            break
    return found


def _nbytes(t: onnx.TensorProto) -> int:
    return len(t.raw_data) or 4 * (len(t.float_data) + len(t.int32_data)) + 8 * (len(t.int64_data) + len(t.double_data))


def _dim(d) -> int | str | None:
    if d.HasField("dim_value"):
        return d.dim_value
    return d.dim_param if d.dim_param and not d.dim_param.startswith("unk__") else None
