"""PipelineSession: one model's FusedLSTM stack split by layers over several GPUs, pipelined."""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass

import numpy as np
import onnx
import onnxruntime as ort

from lstm_ort.ops.identity import ort_type
from lstm_ort.pipeline.executor import Executor, StageRuntime
from lstm_ort.pipeline.partition import (
    PipelineModel,
    analyze,
    balanced_ranges,
    layer_costs,
    ranges_from_counts,
    stage_models,
)
from lstm_ort.pipeline.schedule import CostModel, Plan, choose
from lstm_ort.pipeline.unsupported import Unsupported


@dataclass(frozen=True)
class NodeArgInfo:
    """What onnxruntime's NodeArg gives: name, type string, shape."""

    name: str
    type: str
    shape: list


def _arg_info(vi: onnx.ValueInfoProto) -> NodeArgInfo:
    tt = vi.type.tensor_type
    shape = [d.dim_value if d.HasField("dim_value") else (d.dim_param or None) for d in tt.shape.dim]
    return NodeArgInfo(vi.name, ort_type(tt.elem_type), shape)


class PipelineSession:
    """``run(output_names, feeds)`` as onnxruntime.InferenceSession's, on K = len(devices) stages.

    model: a path, bytes or onnx.ModelProto with one FusedLSTM stack (run ``lstm-ort optimize``
    first) and optional per-time-step ops before and after it. devices: one CUDA device per stage
    (repeats allowed: ``(0, 0)`` puts two stages on one GPU). stages: "auto" (layer ranges
    balanced by modelled FLOPs, docs/pipeline.md) or a list of layers per stage. micro_batch /
    time_chunk: rows per micro-batch and steps per chunk; None lets each call's plan pick (by B
    and T; time chunks only where they are exact: forward stacks without sequence_lens), and with
    both None a call no split plan is modelled faster for runs unsplit on ``devices[0]``.
    providers_options: extra CUDA EP options for every stage. backend: the device layer
    (default: CudaBackend; tests pass lstm_ort.pipeline.fake.FakeBackend). threads: one thread
    enqueueing every stage in a wavefront order (False, the default: Run only enqueues, and one
    thread measured faster than a thread per stage, whose Python work contends for the GIL) or
    one host thread per stage (True). profile: time every
    stage call and copy with events (``last_profile``). transfer: "auto" (peer copies where the
    devices can access each other, else through pinned host memory), "peer" or "staged".
    """

    def __init__(self, model, devices=(0, 1), stages="auto", micro_batch: int | None = None,
                 time_chunk: int | None = None, providers_options: dict | None = None, *, backend=None,
                 sess_options: ort.SessionOptions | None = None, threads: bool = False, profile: bool = False,
                 cost_model: CostModel | None = None, slots: int = 2, transfer: str = "auto"):
        if isinstance(model, os.PathLike):
            model = os.fspath(model)
        self.pm: PipelineModel = analyze(model)
        self.devices = tuple(int(d) for d in devices)
        if not self.devices:
            raise ValueError("devices: at least one")
        if backend is None:
            from lstm_ort.pipeline.backend import CudaBackend

            backend = CudaBackend()
        self.backend = backend
        count = backend.device_count()
        bad = [d for d in self.devices if not 0 <= d < count]
        if bad:
            raise ValueError(f"devices {bad} do not exist: {count} visible")
        pm = self.pm
        self.layer_flops = layer_costs(pm.layers, pm.directions, pm.input_size, pm.hidden)
        extra = (pm.extra_costs["pre"], pm.extra_costs["post"])
        if stages == "auto":
            self.ranges = balanced_ranges(self.layer_flops, len(self.devices), *extra)
            self.stage_reason = "balanced by modelled FLOPs per layer, D*2*(I_l+H)*4H (+ MatMuls before/after)"
        else:
            counts = list(stages)
            if len(counts) != len(self.devices):
                raise ValueError(f"stages={counts} has {len(counts)} entries for {len(self.devices)} devices")
            self.ranges = ranges_from_counts(counts, pm.layers)
            self.stage_reason = "as asked"
        self.set_schedule(micro_batch, time_chunk)
        self.cost_model = cost_model or CostModel()
        self.profile = profile
        self.stage_models = stage_models(pm, self.ranges)
        runtimes = []
        for k, (sm, dev) in enumerate(zip(self.stage_models, self.devices)):
            stream = backend.create_stream(dev, f"stage{k}")
            runner = backend.create_runner(sm.model.SerializeToString(), dev, stream, providers_options, sess_options)
            runner.stage = sm
            runtimes.append(StageRuntime(sm, dev, stream, runner))
        self.executor = Executor(backend, pm, runtimes, slots=slots, threads=threads, transfer=transfer)
        self._providers_options, self._sess_options = providers_options, sess_options
        self._lock = threading.Lock()  # one call at a time: the buffers are shared
        self.last_plan: Plan | None = None
        self._declared = {vi.name: vi for vi in pm.model.graph.input if vi.name not in pm.consts}
        self._inputs = [_arg_info(vi) for vi in self._declared.values()]
        self._outputs = [_arg_info(vi) for vi in pm.model.graph.output]
        self._host_sessions: dict = {}  # "states" / "final": CPU sessions of pm.states.model / pm.final_model
        self._one_gpu = None  # the unsplit model on devices[0], made by the first call planned onto one GPU

    # -- onnxruntime.InferenceSession's interface ----------------------------------------------
    def get_inputs(self) -> list[NodeArgInfo]:
        return list(self._inputs)

    def get_outputs(self) -> list[NodeArgInfo]:
        return list(self._outputs)

    def get_providers(self) -> list[str]:
        return ["CUDAExecutionProvider", "CPUExecutionProvider"]

    def get_provider_options(self) -> dict:
        return {"CUDAExecutionProvider": {"device_id": str(self.devices[0])}}

    def get_modelmeta(self):
        return None

    def io_binding(self) -> PipelineIOBinding:
        """A host-side stand-in for onnxruntime's IOBinding (for callers written against one):
        inputs are read back to the host and fed to ``run``; outputs come back on the host."""
        return PipelineIOBinding()

    def run_with_iobinding(self, binding: PipelineIOBinding, run_options=None) -> None:
        binding.results = self.run(binding.output_names or None, binding.inputs)

    @property
    def _model_bytes(self) -> bytes:  # what lstm_ort.serving reads a session's model from
        return self.pm.model.SerializeToString()

    def set_schedule(self, micro_batch: int | None = None, time_chunk: int | None = None) -> None:
        """Fix (or, with None, leave to each call's plan) the micro-batch rows and chunk steps."""
        if micro_batch is not None and micro_batch < 1:
            raise ValueError(f"micro_batch must be >= 1, got {micro_batch}")
        if time_chunk is not None and time_chunk < 1:
            raise ValueError(f"time_chunk must be >= 1, got {time_chunk}")
        if time_chunk is not None and self.pm.chunk_refusal:
            raise Unsupported(f"time_chunk={time_chunk}: {self.pm.chunk_refusal}")
        self.micro_batch, self.time_chunk = micro_batch, time_chunk
        self._plans = {}  # (B, T, micro_batch) -> Plan: a plan depends on nothing else

    # -- planning ------------------------------------------------------------------------------
    def plan(self, batch: int, steps: int, micro_batch: int | None = None) -> Plan:
        """The plan a call with this batch size and length runs (``micro_batch``: unless the
        session fixes one, rows per micro-batch for this call). With nothing fixed, a call that
        no pipeline plan is modelled faster for runs on one GPU (``Plan.one_gpu``)."""
        pm = self.pm
        key = (batch, steps, self.micro_batch or micro_batch, self.cost_model)
        if key not in self._plans:
            boundary_bytes = pm.directions * pm.hidden * np.dtype(pm.np_dtype).itemsize
            extra = (pm.extra_costs["pre"], pm.extra_costs["post"])
            self._plans[key] = choose(
                self.layer_flops, self.ranges, batch, steps, chunkable=pm.chunk_refusal is None,
                micro_batch=self.micro_batch or micro_batch, time_chunk=self.time_chunk, cost=self.cost_model,
                boundary_bytes_per_row_step=boundary_bytes, extra=extra, chunk_refusal=pm.chunk_refusal,
                one_gpu_ok=len(self.devices) > 1)
        return self._plans[key]

    def _sizes(self, feeds: dict) -> tuple[int, int]:
        """B and T of a call, from the sequence inputs; checks the states' sources agree."""
        pm = self.pm
        B = T = None
        for name, ax in pm.inputs.items():
            v = feeds[name]
            if v.ndim != ax.rank:
                raise ValueError(f"input {name!r} has rank {v.ndim}, the model expects {ax.rank}")
            b = v.shape[ax.batch]
            if B is not None and b != B:
                raise ValueError(f"input {name!r}: batch size {b}, other inputs have {B}")
            B = b
            if ax.time is not None:
                t = v.shape[ax.time]
                if T is not None and t != T:
                    raise ValueError(f"input {name!r}: length {t}, other inputs have {T}")
                T = t
        if T is None:
            raise Unsupported("no input has a time axis")
        for role, got in (("time", T), ("batch", B)):
            if role in pm.pins and pm.pins[role][0] != got:
                size, why = pm.pins[role]
                raise ValueError(f"the model runs only at {role} size {size} ({why}; at another size it fails or "
                                 f"mixes time steps and batch entries); this call has {got}")
        if pm.sequence_lens is not None:
            lens = feeds[pm.sequence_lens]
            if lens.shape != (B,):
                raise ValueError(f"{pm.sequence_lens} has shape {lens.shape}, expected ({B},)")
        for name, rows in pm.states.sizes.items():
            v = feeds[name]
            if rows is None:
                expected = (B, pm.hidden)
            else:
                expected = (rows, B, pm.hidden) if pm.layout == 0 else (B, rows, pm.hidden)
            if v.shape != expected:
                what = "computed in the graph" if name in pm.states.computed else "an initial state"
                raise ValueError(f"{name!r} ({what}) has shape {v.shape}, the stack reads it as {expected}")
        return B, T

    def _checked_feeds(self, output_names, input_feed: dict) -> tuple[list[str], dict]:
        names = [o.name for o in self._outputs] if not output_names else list(output_names)
        known = {o.name for o in self._outputs}
        unknown = [n for n in names if n not in known]
        if unknown:
            raise ValueError(f"unknown outputs {unknown}; the model's are {sorted(known)}")
        needed = [i.name for i in self._inputs]
        missing = [n for n in needed if n not in input_feed]
        if missing:
            raise ValueError(f"missing inputs {missing}")
        feeds = {n: np.asarray(input_feed[n]) for n in needed}
        for name in self.pm.inputs:
            want = self.pm.np_dtype if feeds[name].dtype.kind == "f" else feeds[name].dtype
            feeds[name] = feeds[name].astype(want, copy=False)
        for name, vi in self._declared.items():  # as onnxruntime checks a call's inputs
            dims = vi.type.tensor_type.shape.dim if vi.type.tensor_type.HasField("shape") else None
            v = feeds[name]
            if dims is None:
                continue
            if v.ndim != len(dims):
                raise ValueError(f"input {name!r} has rank {v.ndim}, the model declares {len(dims)}")
            bad = [(k, v.shape[k], d.dim_value) for k, d in enumerate(dims)
                   if d.HasField("dim_value") and d.dim_value > 0 and v.shape[k] != d.dim_value]
            if bad:
                raise ValueError(f"input {name!r} has shape {v.shape}; the model declares size {bad[0][2]} at "
                                 f"axis {bad[0][0]}")
        return names, feeds

    def _host_session(self, which: str):
        """The CPU session of the states' or the final outputs' host model, made once."""
        sess = self._host_sessions.get(which)
        if sess is None:
            model = self.pm.states.model if which == "states" else self.pm.final_model
            sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
            self._host_sessions[which] = sess
        return sess

    def _stage_feeds(self, feeds: dict) -> dict:
        """What the executor reads of a call: the sequence inputs, sequence_lens and every source of
        the initial states (graph inputs, constants, and values the host computes per call)."""
        pm = self.pm
        out = {n: feeds[n] for n in pm.inputs}
        if pm.sequence_lens:
            out[pm.sequence_lens] = feeds[pm.sequence_lens]
        for name in pm.states.sources:
            if name in feeds:
                out[name] = feeds[name]
        out.update(pm.states.constants)
        if pm.states.computed:
            sess = self._host_session("states")
            values = sess.run(pm.states.computed, {n: feeds[n] for n in pm.states.model_inputs})
            for name, v in zip(pm.states.computed, values):
                out[name] = np.asarray(v, pm.np_dtype)
        return out

    def _wanted(self, names: list[str]) -> list:
        """The executor's outputs these graph outputs need."""
        pm = self.pm
        by_name = {o.name: o for o in pm.outputs}
        want, states = [], set()
        for n in names:
            o = by_name[n]
            if o.kind == "post":
                want.append(n)
            elif o.kind == "state":
                states.add(o.state)
            else:
                states.update(which for which, _ in pm.final_inputs.values())
        return want + [("state", s) for s in sorted(states)]

    def _outputs_of(self, names: list[str], out: dict, feeds: dict) -> list[np.ndarray]:
        """The graph outputs from the executor's: Y's descendants as they are, the states' rows,
        and the outputs computed from the final states (on the host, from the whole states)."""
        pm = self.pm
        by_name = {o.name: o for o in pm.outputs}

        def rows(which, span):  # a view: no copy of the states
            return out[("state", which)][(slice(None),) * pm.state_axis + (slice(*span),)]

        final = {}
        if any(by_name[n].kind == "final" for n in names):
            sess = self._host_session("final")
            inputs = {i.name: (rows(*pm.final_inputs[i.name]) if i.name in pm.final_inputs else feeds[i.name])
                      for i in sess.get_inputs()}
            wanted = [n for n in names if by_name[n].kind == "final"]
            final = dict(zip(wanted, sess.run(wanted, inputs)))
        result = []
        for n in names:
            o = by_name[n]
            result.append(out[n] if o.kind == "post" else rows(o.state, o.rows) if o.kind == "state" else final[n])
        return result

    def run(self, output_names, input_feed: dict, run_options=None) -> list[np.ndarray]:
        names, feeds = self._checked_feeds(output_names, input_feed)
        return self._run(names, feeds)

    def _run(self, names: list[str], feeds: dict, micro_batch: int | None = None) -> list[np.ndarray]:
        staged = self._stage_feeds(feeds)
        B, T = self._sizes(staged)
        with self._lock:
            plan = self.plan(B, T, micro_batch)
            self.last_plan = plan
            if plan.one_gpu:
                return self._one_gpu_session().run(names, feeds)
            out = self.executor.run(plan, staged, self._wanted(names), profile=self.profile)
        return self._outputs_of(names, out, feeds)

    def _one_gpu_session(self):
        """The unsplit model on the first device, for calls planned onto one GPU (made once)."""
        if self._one_gpu is None:
            self._one_gpu = self.backend.create_single(self.pm.model.SerializeToString(), self.devices[0],
                                                       self._providers_options, self._sess_options)
        return self._one_gpu
    def run_batches(self, output_names, feeds_list: list[dict], run_options=None) -> list[list[np.ndarray]]:
        """``run`` for each of several calls' feeds, pipelined across them: consecutive calls
        whose inputs agree in all but the batch size go through the stages as one stream of
        items (each call's rows in micro-batches of the largest call's batch size, unless the
        session fixes ``micro_batch``), so the pipeline fills and drains once per group instead of
        once per call. Rows are independent, so every call's outputs equal its own ``run``'s; they
        are views of the group's joined outputs, and the joined inputs are never copied whole (the
        feeder reads each item's rows from the calls that hold them)."""
        checked = []
        for f in feeds_list:
            names, feeds = self._checked_feeds(output_names, f)
            staged = self._stage_feeds(feeds)
            checked.append((names, feeds, staged, self._sizes(staged)[0]))
        results: list[list[np.ndarray]] = []
        i = 0
        while i < len(checked):
            names, feeds, first, _ = checked[i]
            j = i + 1
            while j < len(checked) and checked[j][0] == names and self._same_but_batch(first, checked[j][2]):
                j += 1
            group = checked[i:j]
            if len(group) == 1:
                results.append(self._run(names, feeds))
                i = j
                continue
            sizes = [g[3] for g in group]
            # The sequence inputs are joined lazily (the feeder reads each item's rows from the
            # call that holds them); the small ones (lengths, states) are concatenated.
            merged = {n: RowStack([g[2][n] for g in group], self._batch_axis(n)) if n in self.pm.inputs
                      else np.concatenate([g[2][n] for g in group], axis=self._batch_axis(n)) for n in first}
            B, T = self._sizes(merged)
            with self._lock:
                plan = self.plan(B, T, max(sizes))
                self.last_plan = plan
                out = self.executor.run(plan, merged, self._wanted(names), profile=self.profile)
            bounds = np.cumsum([0] + sizes)
            axes = {o.name: o.axes.batch for o in self.pm.outputs if o.kind == "post"}
            axes.update({key: self.pm.state_batch_axis for key in out if isinstance(key, tuple)})
            for g, (_, feeds_g, _, _) in enumerate(group):
                part = {}
                for key, v in out.items():  # views: each call's rows of the joined outputs
                    index = [slice(None)] * v.ndim
                    index[axes[key]] = slice(int(bounds[g]), int(bounds[g + 1]))
                    part[key] = v[tuple(index)]
                results.append(self._outputs_of(names, part, feeds_g))
            i = j
        return results

    def _batch_axis(self, name: str) -> int:
        """The batch axis of an executor feed: a sequence input's, sequence_lens' or a state source's."""
        pm = self.pm
        if name in pm.inputs:
            return pm.inputs[name].batch
        if name == pm.sequence_lens or pm.states.sizes.get(name, 0) is None:
            return 0  # sequence_lens, or a [B, H] state
        return pm.state_batch_axis

    def _same_but_batch(self, a: dict, b: dict) -> bool:
        if "batch" in self.pm.pins or self.pm.states.constants:
            return False  # the model runs at one batch size only: calls cannot be joined
        for name, v in a.items():
            w = b[name]
            ax = self._batch_axis(name)
            if v.dtype != w.dtype or v.ndim != w.ndim or v.shape[:ax] + v.shape[ax + 1:] != w.shape[:ax] + w.shape[ax + 1:]:
                return False
        return True

    @property
    def last_profile(self):
        return self.executor.last_profile

    def describe(self) -> str:
        lines = [f"{len(self.devices)} stages on devices {list(self.devices)} ({self.stage_reason}):"]
        for sm, dev in zip(self.stage_models, self.devices):
            a, b = sm.layers
            extra = (" + ops before" if sm.index == 0 and self.pm.pre_nodes else "") + \
                    (" + ops after" if sm.index == len(self.devices) - 1 and self.pm.post_nodes else "")
            lines.append(f"  stage {sm.index}: device {dev}, layers {a}..{b - 1}{extra}")
        modes = [bd.mode for bd in self.executor.boundaries]
        if modes:
            lines.append(f"  boundaries: {', '.join(modes)}")
        pm = self.pm
        if len(pm.stack.nodes) > 1:
            lines.append(f"  stack: {len(pm.stack.nodes)} FusedLSTM nodes joined as one ({pm.layers} layers)")
        rows = pm.states.h + pm.states.c
        zero = sum(1 for src, _ in rows if src is None)
        sources = sorted({src for src, _ in rows if src is not None})
        lines.append(f"  initial states: {zero} of {len(rows)} rows zero" + (f", the rest from {sources}" if sources else "")
                     + (f" (computed on the host: {pm.states.computed})" if pm.states.computed else ""))
        finals = [o.name for o in pm.outputs if o.kind == "final"]
        if finals:
            lines.append(f"  computed from the final states on the host: {finals}")
        for role, (size, why) in pm.pins.items():
            lines.append(f"  {role} size fixed at {size} ({why})")
        if pm.chunk_refusal:
            lines.append(f"  time chunks: off ({pm.chunk_refusal})")
        return "\n".join(lines)

    def close(self) -> None:
        self.executor.close()
        self._one_gpu = None
        self._host_sessions.clear()

    def __del__(self):
        try:
            self.close()
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass


class RowStack:
    """Several calls' arrays joined along the batch axis without a copy, for the executor's
    feeder: indexing with slices reads the rows from the arrays that hold them."""

    def __init__(self, parts: list[np.ndarray], axis: int):
        self.parts, self.axis = parts, axis
        self.bounds = np.cumsum([0] + [p.shape[axis] for p in parts])
        shape = list(parts[0].shape)
        shape[axis] = int(self.bounds[-1])
        self.shape, self.dtype, self.ndim = tuple(shape), parts[0].dtype, len(shape)
        self.itemsize = self.dtype.itemsize
        self.nbytes = int(np.prod(shape)) * self.itemsize

    def __getitem__(self, index: tuple) -> np.ndarray:
        rows = index[self.axis]
        pieces = []
        for part, lo, hi in zip(self.parts, self.bounds[:-1], self.bounds[1:]):
            a, b = max(rows.start, lo), min(rows.stop, hi)
            if a < b:
                where = list(index)
                where[self.axis] = slice(int(a - lo), int(b - lo))
                pieces.append(part[tuple(where)])
        return pieces[0] if len(pieces) == 1 else np.concatenate(pieces, axis=self.axis)


class PipelineIOBinding:
    def __init__(self):
        self.inputs: dict = {}
        self.output_names: list = []
        self.results: list = []

    def bind_cpu_input(self, name: str, value) -> None:
        self.inputs[name] = np.asarray(value)

    def bind_ortvalue_input(self, name: str, value) -> None:
        self.inputs[name] = value.numpy()

    def bind_output(self, name: str, *args, **kwargs) -> None:
        self.output_names.append(name)

    def copy_outputs_to_cpu(self) -> list:
        return list(self.results)

    def get_outputs(self) -> list:
        return [ort.OrtValue.ortvalue_from_numpy(np.ascontiguousarray(r)) for r in self.results]
