"""lstm-ort: rewrite the LSTMs of an ONNX model into lstm_ort.FusedLSTM, and tune how the CUDA
kernel runs them.

Exit codes:
  0  done (optimize: the model was written; LSTMs left as they were are listed with the reason)
  1  input or output: the input could not be read (not ONNX, truncated, an IR version the
     installed onnxruntime does not read, missing external data), the output could not be
     written, or --check had nothing to compare (stock onnxruntime cannot run the input, or the
     inputs hold no values); tune: the tuning cache cannot be read or written (named)
  2  usage: bad arguments; -o empty, "-", the input model or one of its external data files, or
     an existing path that is not a regular file (a directory, a device); tune without a CUDA GPU;
     --low-rank R larger than every matrix it targets, a calibration file that cannot feed the model
     (wrong width, values that do not convert exactly, NaN or infinity)
  3  --check: the optimized model does not run, or its outputs differ from stock onnxruntime's on
     the original beyond the tolerance; --max-error: the low-rank model's outputs differ from the
     unfactored model's beyond it, or the low-rank error is not a finite number; nothing written
  130, 143  interrupted by SIGINT, SIGTERM: one line on stderr, partial outputs removed
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import onnx

from lstm_ort import __version__, progress
from lstm_ort.cli_args import dims, integer, named, number
from lstm_ort.ops.identity import INT8, PRECISIONS, Precision
from lstm_ort.rewriter import Report
from lstm_ort.rewriter.driver import rewrite, serialize, skeleton, stage
from lstm_ort.rewriter.low_rank import LowRank
from lstm_ort.rewriter.low_rank_cost import DEVICES as LOW_RANK_DEVICES
from lstm_ort.rewriter.passes import Options, after_rewrite
from lstm_ort.rewriter.passes import run as run_passes
from lstm_ort.runtime import native
from lstm_ort.runtime.model_io import ModelError, StagedModel, load_model, read_model
from lstm_ort.runtime.nodes import NodeShape, fused_nodes, int8_node_names, node_precision, node_ranks, node_shapes
from lstm_ort.runtime.output_files import OutputRefused, output_target, run_command
from lstm_ort.runtime.tuned_cache import CacheError, cache_key, check_writable, load_cache, record, tuned_entries
from lstm_ort.serving.batch.cli import add_batch_parser, cmd_batch
from lstm_ort.serving.streams.cli import add_streams_bench_parser, cmd_streams_bench

EXIT_OK, EXIT_INPUT, EXIT_USAGE, EXIT_PARITY = 0, 1, 2, 3


class Outcome:
    """What one optimize/check run prints: the text report, or one JSON document with everything."""

    def __init__(self, args, command: str) -> None:
        self.args, self.doc = args, {"command": command, "input": getattr(args, "input", None)
                                     or getattr(args, "model", None)}
        self.report: Report | None = None
        self.lines: list[str] = []

    def fail(self, code: int, message: str) -> int:
        print(f"lstm-ort: {message}", file=sys.stderr)
        self.doc["error"] = message
        return self.finish(code)

    def finish(self, code: int) -> int:
        if self.args.json:
            doc = dict(self.doc)
            if self.report is not None:
                doc.update(json.loads(self.report.to_json()))
            doc["exit_code"] = code
            print(json.dumps(doc, indent=2))
        else:
            if self.report is not None:
                print(self.report.table())
            for line in self.lines:
                print(line)
        return code


def cmd_optimize(args) -> int:
    out = Outcome(args, "optimize")
    out.doc.update(output=None, written=False, check=None, strategies=[])
    src = Path(args.input)
    try:
        dst = output_target(args.output, [(src, "the input model")], companions=[".data"])
        with progress.step(f"reading {src}"):
            proto, files = read_model(src)
        dst = output_target(args.output, [(files[0], "the input model"),
                                          *((f, f"the input's external data file {f.name}") for f in files[1:])],
                            companions=[".data"])
    except OutputRefused as e:
        return out.fail(EXIT_USAGE, str(e))
    except ModelError as e:
        return out.fail(EXIT_INPUT, f"{src}: {e}")
    from lstm_ort.verify import (Tolerance, check_carry, check_shapes, checked_precision, default_tolerance,
                                 has_layout1_lstm, random_feeds)

    for flag, check, given in (("--shape", check_shapes, args.shape), ("--carry", check_carry, args.carry)):
        try:  # before any work: a name the model does not have is a usage error, never ignored
            check(proto, given)
        except ValueError as e:
            return out.fail(EXIT_USAGE, f"{flag} {e}")
    # --check runs on the CPU: the bound of what the CPU computes for the nodes' mode.
    tolerance = default_tolerance(proto, checked_precision(args.precision).runs)
    tolerance = Tolerance(tolerance.atol if args.atol is None else args.atol,
                          tolerance.rtol if args.rtol is None else args.rtol, tolerance.of_max)
    feeds, layout1 = None, False
    if args.check:
        import numpy as np

        feeds = random_feeds(proto, np.random.default_rng(0), shapes=args.shape)
        if args.inputs:
            try:
                with np.load(args.inputs) as given:
                    feeds.update({name: given[name] for name in given.files})
            except (OSError, ValueError) as e:
                return out.fail(EXIT_USAGE, f"--inputs {args.inputs}: {e}")
        out.doc["check_feeds"] = {name: list(v.shape) for name, v in feeds.items()}
        layout1 = has_layout1_lstm(proto)
    out.report = report = Report()
    try:
        rewritten = rewrite(proto, fold_constants=not args.no_fold, report=report, freeze_inputs=args.freeze_inputs,
                            precision=args.precision)
    except ModelError as e:
        return out.fail(EXIT_INPUT, f"{src}: {e}")
    except Exception as e:  # a bug of ours: say so plainly, and write nothing
        return out.fail(EXIT_INPUT, f"{src}: internal error while rewriting ({type(e).__name__}: {e}); nothing written")
    out.doc["strategies"] = strategy_entries(skeleton(rewritten), args.seq_len, args.batch)
    after = after_rewrite(_pass_options(args))
    if after or (args.check and (layout1 or (len(files) > 1 and proto.ByteSize() < (1 << 31) - 1))):
        # Layout-1 LSTMs become their layout-0 twins for stock; and onnxruntime reading external
        # data itself cannot fold shape tensors kept there.
        original = proto
    else:
        original = src  # onnxruntime reads the file itself: no serialized copy here
    del proto
    compare = _comparison(args, original, feeds, tolerance, layout1)
    held = [rewritten]  # the tail lets go of it (and of the input's tensors) before the check loads two sessions
    del rewritten
    return _optimize_tail(out, args, held, after, dst, compare, tolerance)


def _pass_options(args) -> Options:
    low_rank = None
    if args.low_rank is not None:
        how = {"rank": args.low_rank} if args.low_rank > 0 else {"energy": args.low_rank_energy}
        low_rank = LowRank(**how, target=args.low_rank_target, device=args.low_rank_device)
    return Options(batchify=args.batchify, sequence_lens_input=args.sequence_lens_input, int8=args.int8,
                   low_rank=low_rank, calibration=args.calibration, shapes=args.shape, max_error=args.max_error)


def _comparison(args, original, feeds, tolerance, layout1: bool):
    """What --check runs, as a function of the report and the optimized model (a proto, or the
    path of the staged file): each batch entry against the original run alone (--sequence-lens-input,
    --batchify), chained calls (--carry), or one call; None without --check."""
    if not args.check:
        return None
    from lstm_ort.serving.batch.parity import ragged_parity
    from lstm_ort.verify import ParityResult, chained_parity, parity, worst_of

    if args.sequence_lens_input:
        return lambda report, optimized: ragged_parity(original, optimized, feeds, tolerance)
    if args.batchify:  # streams run as one batch against each run alone; with --carry, chained calls too
        from lstm_ort.serving.streams.parity import batch_parity

        def batched(report, optimized):
            err = batch_parity(original, optimized, args.shape)
            result = ParityResult(err, err, "stock onnxruntime, each entry run alone")
            if not args.carry:
                return result
            return worst_of(result, chained_parity(original, optimized, feeds, args.carry, args.calls, tolerance,
                                                   stock_threads=_stock_threads(report)))
        return batched
    if args.carry:
        return lambda report, optimized: chained_parity(original, optimized, feeds, args.carry, args.calls, tolerance,
                                                        stock_threads=_stock_threads(report))
    return lambda report, optimized: parity(
        original, optimized, feeds, tolerance, consume=not isinstance(optimized, onnx.ModelProto),
        twin_optimized=layout1 and not report.all_rewritten, stock_threads=_stock_threads(report))


def _optimize_tail(out: Outcome, args, held: list, after: list, dst: Path, compare, tolerance) -> int:
    """The passes after the rewrite (passes.after_rewrite), then verify -> stage -> commit: --check
    holds the model before any lossy pass to stock onnxruntime (the staged file itself where no
    pass came after the rewrite, so the model is never held serialized), and nothing is written
    unless the check passes and the model is whole on disk."""
    from lstm_ort.low_rank_error import CalibrationError, ErrorNotMeasured
    from lstm_ort.rewriter.batchify import BatchifyRefused
    from lstm_ort.rewriter.low_rank import ErrorBoundExceeded, LowRankError
    from lstm_ort.verify import clean_message

    report = out.report
    lossy = [p for p in after if p.lossy]
    unchanged, change = ("float", "quantizing") if args.int8 else ("unfactored", "factoring")
    checks = compare is not None and (args.batchify or any(f.rewritten for f in report.findings))
    step = f"checking the {unchanged} model against stock onnxruntime" if lossy else \
        "checking each batch entry against stock onnxruntime run alone" if args.sequence_lens_input or args.batchify \
        else "checking against stock onnxruntime"
    note = f"the {unchanged} optimized model" if lossy else ""
    model = held.pop()  # the rewritten model (driver.Rewritten), serialized if a pass comes after the rewrite
    if after:
        try:
            model = serialize(model)
        except Exception as e:
            return out.fail(EXIT_INPUT, f"internal error while packing ({type(e).__name__}: {e}); nothing written")
        try:
            model = run_passes([p for p in after if not p.lossy], model, report)
        except BatchifyRefused as e:
            return out.fail(EXIT_INPUT, f"--batchify refused: {e}; nothing written")
    if checks and lossy:  # before a lossy pass changes the results
        code = _check(out, tolerance, args, step, lambda: compare(report, model), note=note)
        if code is not None:
            return code
        checks = False
    if lossy:
        try:
            with progress.step(f"{change} the weights and measuring the error"):
                model = run_passes(lossy, model, report)
        except LowRankError as e:
            return out.fail(EXIT_USAGE, f"--low-rank: {e}; nothing written")
        except CalibrationError as e:
            return out.fail(EXIT_USAGE, f"--{e}; nothing written")
        except (ErrorBoundExceeded, ErrorNotMeasured) as e:
            return out.fail(EXIT_PARITY, f"{e}; nothing written")
        except Exception as e:  # a session that fails on these inputs, or a bug of ours: never a traceback
            return out.fail(EXIT_INPUT, f"measuring the {'int8' if args.int8 else 'low-rank'} error failed "
                                        f"({type(e).__name__}: {clean_message(e)}); nothing written")
        out.doc["strategies"] = strategy_entries(model, args.seq_len, args.batch)
    try:
        staged = StagedModel.of_proto(model, dst) if isinstance(model, onnx.ModelProto) else stage(model, dst)
    except OSError as e:
        return out.fail(EXIT_INPUT, f"cannot write {dst}: {e.strerror or e}")
    except Exception as e:
        return out.fail(EXIT_INPUT, f"{args.input}: internal error while writing ({type(e).__name__}: {e}); "
                                    f"nothing written")
    optimized = model if isinstance(model, onnx.ModelProto) else staged.path
    model = None  # the rewritten model and with it the input's tensors, before two sessions load
    with staged:  # whatever ends this block (a refusal, an error, SIGINT) without a commit removes the file
        if checks:
            code = _check(out, tolerance, args, step, lambda: compare(report, optimized))
            if code is not None:
                return code
        try:
            staged.commit()
        except OSError as e:
            return out.fail(EXIT_INPUT, f"cannot write {dst}: {e.strerror or e}")
    return _written(out, dst)


def _check(out: Outcome, tolerance, args, step: str, run, *, note: str = "") -> int | None:
    """Runs the parity check `run()` (a ParityResult) and records it; None when it passed, else the
    exit code of the refusal, printed: 1 nothing to compare (stock cannot run the original, or no
    values), 3 the optimized model does not run or differs. The caller writes only on None."""
    from lstm_ort.verify import FLOAT16_TOLERANCE, CheckFailed, CheckUnavailable

    try:
        with progress.step(step):
            result = run()
    except CheckUnavailable as e:
        return out.fail(EXIT_INPUT, f"--check: {e}; nothing written")
    except CheckFailed as e:
        out.doc["check"] = {"passed": False, "error": str(e), "tolerance": str(tolerance)}
        return out.fail(EXIT_PARITY, f"--check: {e}; nothing written")
    passed = result.passes(tolerance)
    out.doc["check"] = {"passed": passed, "max_abs": _number(result.max_abs), "tolerance": str(tolerance),
                        "atol": tolerance.atol, "rtol": tolerance.rtol, "compared_with": result.compared_with}
    if note:
        out.doc["check"]["of"] = note
    if not passed:
        hint = ("; in float16, unbounded or discontinuous activations magnify each rounding, and stock and "
                "FusedLSTM round at different points: --atol/--rtol set the tolerance"
                if tolerance.rtol >= FLOAT16_TOLERANCE.rtol and not tolerance.of_max else "")
        return out.fail(EXIT_PARITY, f"--check: max-abs {result.max_abs:.3g} against {result.compared_with}, "
                                     f"beyond the tolerance {tolerance}; nothing written{hint}")
    out.lines.append(f"--check: max-abs {result.max_abs:.3g} against {result.compared_with} "
                     f"(tolerance {tolerance}){', before ' + ('quantizing' if args.int8 else 'factoring') if note else ''}"
                     f"{_cpu_check_note(args.precision, out.report)}")
    return None


def _written(out: Outcome, dst: Path) -> int:
    out.doc.update(output=str(dst), written=True)
    out.lines += [*format_strategies(out.doc["strategies"]), f"wrote {dst}"]
    return out.finish(EXIT_OK)


def _stock_threads(report: Report) -> int | None:
    """Stock's threads for --check: one where int8 nodes were made from DynamicQuantizeLSTM
    (whose result on more threads quantizes h per slice of the batch: verify.STOCK_THREADS_INT8)."""
    from lstm_ort.verify import STOCK_THREADS_INT8

    return STOCK_THREADS_INT8 if any(f.precision == INT8 for f in report.findings if f.rewritten) else None


def _cpu_check_note(precision: Precision, report: Report) -> str:
    """--check runs on the CPU kernel: say what it computed where that is not the mode asked for,
    lest the small difference be read as that mode's on the GPU."""
    from lstm_ort.verify import checked_precision

    if all(f.precision == INT8 for f in report.findings if f.rewritten):
        return ""
    return checked_precision(precision).note


def _number(x: float):
    return x if math.isfinite(x) else str(x)


def cmd_check(args) -> int:
    out = Outcome(args, "check")
    out.report = report = Report()
    try:
        with progress.step(f"reading {args.model}"):
            proto = load_model(args.model)
        rewritten = rewrite(proto, fold_constants=not args.no_fold, report=report, freeze_inputs=args.freeze_inputs,
                            precision=args.precision)
        del proto
    except ModelError as e:
        out.report = None
        return out.fail(EXIT_INPUT, f"{args.model}: {e}")
    except Exception as e:
        out.report = None
        return out.fail(EXIT_INPUT, f"{args.model}: internal error while rewriting ({type(e).__name__}: {e})")
    out.doc["strategies"] = strategy_entries(skeleton(rewritten), args.seq_len, args.batch)
    out.lines += format_strategies(out.doc["strategies"])
    if args.int8:  # a pass after the rewrite, which check does not run: say what it would do
        out.doc["int8"] = INT8_CHECK_NOTE
        out.lines.append(INT8_CHECK_NOTE)
    return out.finish(EXIT_OK)


INT8_CHECK_NOTE = ("--precision int8: optimize makes the float32 weights of each rewritten node int8 per output "
                   "channel, run with DynamicQuantizeLSTM's arithmetic on the CPU kernel (also in CUDA sessions; "
                   "docs/ops.md, 'int8 weights'), and measures the error this costs; check quantizes nothing, so "
                   "the precision and plans above are the float model's it starts from")


def strategy_entries(model: onnx.ModelProto, T: int | None, B: int | None) -> list[dict]:
    """Which CUDA strategy each FusedLSTM node will use: forced, tuned (for the node's precision),
    or chosen per call, and the precision it runs in; with T and B on a CUDA machine, the plan itself."""
    cache = load_cache(warn=lambda message: print(f"lstm-ort: {message}", file=sys.stderr))
    entries, gpu = [], None
    int8 = int8_node_names(model)
    for node, shape in node_shapes(model):
        attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
        if node.name in int8:  # no CUDA kernel: onnxruntime runs it on the CPU kernel
            entries.append({"node": node.name or "<unnamed>", "shape": None, "strategy": INT8, "forced": False,
                            "int8": True, "precision": INT8, "tuned": []})
            continue
        if node_ranks(node).any:  # factored weights run one CUDA path of their own
            entries.append({"node": node.name or "<unnamed>", "shape": shape.key if shape else None,
                            "strategy": "factored", "forced": False, "factored": True, "precision": "fp32",
                            "tuned": []})
            continue
        forced = attrs.get("strategy", b"auto").decode()
        precision = node_precision(node)
        tunable = shape and forced == "auto" and precision in PRECISIONS
        entry = {"node": node.name or "<unnamed>", "shape": shape.key if shape else None, "strategy": forced,
                 "forced": forced != "auto", "precision": precision,
                 "tuned": [e._asdict() for e in tuned_entries(cache, shape, precision)] if tunable else []}
        if shape and T and B:
            entry["cpu_plan"] = _cpu_plan(node, shape, T, B, cache)
        if shape and T and B:
            try:
                gpu = gpu or native.device_name()
                entry["plan"] = {"T": T, "B": B, "gpu": gpu, "plan": native.describe(shape, T, B, forced, precision)}
            except (OSError, RuntimeError) as e:
                entry["plan"] = {"T": T, "B": B, "error": str(e)}
        entries.append(entry)
    return entries


def _cpu_plan(node: onnx.NodeProto, shape: NodeShape, T: int, B: int, cache: dict) -> dict:
    """What the CPU kernel does for a call of T and B (its call plan), in a session of the cores'
    threads, with the node's attributes and this CPU's tuned winners."""
    from lstm_ort.ops.spec import attribute
    from lstm_ort.ops.tuned import format_tuned
    from lstm_ort.runtime.session import session_threads

    threads = session_threads(None)
    tuned = format_tuned(tuned_entries(cache, shape, gpu=False, cpu_threads=threads))
    try:
        text = native.describe_cpu(shape, T, B, precision=node_precision(node),
                                   cpu_kernel=attribute(node, "cpu_kernel", ""), tuned=tuned, threads=threads)
        return {"T": T, "B": B, "threads": threads, "plan": text}
    except RuntimeError as e:
        return {"T": T, "B": B, "threads": threads, "error": str(e)}


def format_strategies(entries: list[dict]) -> list[str]:
    lines = []
    for e in entries:
        if e.get("int8"):
            lines.append(f"  {e['node']}: int8 weights (DynamicQuantizeLSTM's arithmetic): the CPU kernel, also in "
                         f"CUDA sessions; strategies, tuning and precision modes do not apply")
            continue
        if e.get("factored"):
            lines.append(f"  {e['node']} [{e['shape'] or 'sizes unknown'}]: factored weights (--low-rank): the "
                         f"low-rank CUDA path, fp32; strategies, tuning and precision modes do not apply")
            continue
        if e["forced"]:
            what = f"{e['strategy']} (forced by the node's strategy attribute)"
        else:
            what = "auto: chosen per call from T and B"
            if e["tuned"]:
                what += "; tuned: " + ", ".join(f"T={t['T']} B={t['B']} -> {t['strategy']} on {t['gpu']}"
                                                for t in e["tuned"])
        line = f"  {e['node']} [{e['shape'] or 'sizes unknown'}]: {what}; precision {e['precision']}"
        cpu = e.get("cpu_plan")
        if cpu:
            line += (f"\n      on the CPU at T={cpu['T']} B={cpu['B']}, {cpu['threads']} threads: {cpu['plan']}"
                     if "plan" in cpu else f"\n      (no CPU plan at T={cpu['T']} B={cpu['B']}: {cpu['error']})")
        plan = e.get("plan")
        if plan:
            line += (f"\n      at T={plan['T']} B={plan['B']} on {plan['gpu']}: {plan['plan']}" if "plan" in plan
                     else f"\n      (no plan at T={plan['T']} B={plan['B']}: {plan['error']})")
        lines.append(line)
    return ["FusedLSTM strategies (CUDA):", *lines] if lines else []


def cmd_tune(args) -> int:
    from lstm_ort.rewriter import optimize

    try:
        model = load_model(Path(args.model))
        if not fused_nodes(model):
            model = optimize(model)
    except ModelError as e:
        print(f"lstm-ort: {args.model}: {e}", file=sys.stderr)
        return EXIT_INPUT
    try:  # before measuring: a cache that cannot take the winners is said now, not after
        check_writable()
        return tune_cpu(model, args) if args.cpu else _tune_cuda(model, args)
    except CacheError as e:
        print(f"lstm-ort: {e}", file=sys.stderr)
        return EXIT_INPUT


def _tune_cuda(model: onnx.ModelProto, args) -> int:
    from lstm_ort.tuning.measure import tune_shape

    try:
        import onnxruntime as ort

        if "CUDAExecutionProvider" not in ort.get_available_providers():
            raise RuntimeError("onnxruntime's CUDA execution provider is not available")
        gpu = native.device_name()
    except (OSError, RuntimeError) as e:
        print(f"lstm-ort tune needs a CUDA GPU: {e} (--cpu tunes the CPU kernel's choice)", file=sys.stderr)
        return EXIT_USAGE
    try:
        targets = tune_targets(model, args.precision)
    except ValueError as e:
        print(f"lstm-ort: {args.model}: {e}", file=sys.stderr)
        return EXIT_INPUT
    if not targets:
        print("lstm-ort: no FusedLSTM node to tune", file=sys.stderr)
        return EXIT_INPUT
    results = []
    for shape, precision in targets:
        for T in args.seq_len:
            for B in args.batch:
                r = tune_shape(shape, T, B, runs=args.runs, precision=precision)
                path = record(gpu, shape, T, B, r.winner, r.ms, precision=precision)
                results.append(r)
                timings = "  ".join(f"{k} {v:.3f}" for k, v in r.ms.items())
                print(f"{cache_key(shape, precision)} T={T} B={B}: {timings} ms -> {r.winner}\n    {r.plan}",
                      flush=True)
    if args.json:
        print(json.dumps([{"shape": r.shape.key, "precision": r.precision, "T": r.T, "B": r.B, "ms": r.ms,
                           "winner": r.winner, "plan": r.plan} for r in results], indent=2))
    print(f"cached for {gpu} in {path}", file=sys.stderr)
    return EXIT_OK


def tune_cpu(model: onnx.ModelProto, args) -> int:
    """`tune --cpu`: which CPU kernel (FusedLSTM's own or stock's, docs/cpu.md) wins each shape
    class of each float32 node, at each thread count; cached for this CPU."""
    from lstm_ort.ops.identity import TUNED_CPU_PREFIX
    from lstm_ort.runtime.session import session_threads
    from lstm_ort.tuning.measure import tune_cpu_shape

    device = TUNED_CPU_PREFIX + native.cpu_name()
    shapes = []  # (shape, what the CPU computes for the node's mode)
    for node, shape in node_shapes(model):
        why = ("factored weights have no stock kernel" if node_ranks(node).any else
               "W is not an initializer, sizes unknown" if shape is None else
               "onnxruntime's CPU LSTM has no float16 kernel" if shape.dtype != "float32" else None)
        try:
            runs = native.decide_precision("cpu", node_precision(node)).runs
        except ValueError as e:
            why = why or str(e)
        if why:
            print(f"lstm-ort: {node.name}: {why}; skipped", file=sys.stderr)
        elif (shape, runs) not in shapes:
            shapes.append((shape, runs))
    if not shapes:
        print("lstm-ort: no FusedLSTM node whose CPU kernel can be chosen", file=sys.stderr)
        return EXIT_INPUT
    results, path = [], None
    for threads in args.threads or [session_threads(None)]:
        for shape, runs in shapes:
            for T in args.seq_len:
                for B in args.batch:
                    r = tune_cpu_shape(shape, T, B, threads, runs=args.runs, precision=runs)
                    path = record(device, shape, r.T, B, r.winner, r.ms, precision=runs, threads=threads)
                    results.append((threads, r))
                    timings = "  ".join(f"{k} {v:.3f}" for k, v in r.ms.items())
                    print(f"{shape.key} T={T} (class T<={r.T}) B={B} threads={threads}: {timings} ms -> {r.winner}",
                          flush=True)
    if args.json:
        print(json.dumps([{"shape": r.shape.key, "threads": t, "T": r.T, "B": r.B, "ms": r.ms, "winner": r.winner}
                          for t, r in results], indent=2))
    print(f"cached for {device} in {path}", file=sys.stderr)
    return EXIT_OK


def tune_targets(model: onnx.ModelProto, precision: str | None) -> list[tuple[NodeShape, str]]:
    """The distinct (shape, precision) pairs of the model's FusedLSTM nodes that `tune` measures:
    each node's own precision, or ``precision`` for all. Nodes of unknown sizes are skipped with a
    note; an unknown precision attribute is a ValueError."""
    targets = []
    for node, shape in node_shapes(model):
        if node_ranks(node).any:
            print(f"lstm-ort: {node.name}: factored weights run one CUDA path, nothing to tune; skipped",
                  file=sys.stderr)
            continue
        if shape is None:
            print(f"lstm-ort: {node.name}: W is not an initializer, sizes unknown; skipped", file=sys.stderr)
            continue
        mode = Precision.parse(precision or node_precision(node), f"node {node.name or '<unnamed>'}'s precision")
        if (shape, mode) not in targets:
            targets.append((shape, mode))
    return targets


def _versions() -> str:
    import onnxruntime as ort

    return f"lstm-ort {__version__} (onnxruntime {ort.__version__}, onnx {onnx.__version__})"


def _rank(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"a rank is an integer >= 1, not {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"a rank is an integer >= 1, not {text}")
    return value


def _energy(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not 0 < value <= 1:
        raise argparse.ArgumentTypeError(f"the energy is a fraction in (0, 1] of the squared singular values, not {text!r}")
    return value


_tolerance = number(at_least=0)
_shape = named("--shape", "NAME=D0,D1,... with dims >= 0", dims)
_pair = named("--carry", "OUTPUT=INPUT")
_count = integer(1)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="lstm-ort", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--version", action="version", version=_versions())
    sub = p.add_subparsers(dest="command", required=True)
    o = sub.add_parser("optimize", help="rewrite LSTMs into FusedLSTM and write the result")
    o.add_argument("input")
    o.add_argument("-o", "--output", required=True)
    o.add_argument("--check", action="store_true", help="refuse to write unless outputs match stock onnxruntime")
    o.add_argument("--atol", type=_tolerance, default=None,
                   help="--check: outputs match where |ours - stock| <= atol + rtol x |stock|; default by "
                        "element type: float32 1e-4, float16 3.9e-3 (4 float16 steps). --check runs on the CPU, "
                        "which computes every --precision but bf16 in fp32, so these are the bounds there; bf16 "
                        "where the CPU runs it: 5e-2")
    o.add_argument("--rtol", type=_tolerance, default=None,
                   help="--check: the relative part (default float32 1e-5, float16 3.9e-3)")
    o.add_argument("--shape", action="append", type=_shape, default=[], metavar="NAME=D0,D1,...",
                   help="--check: the shape to feed input NAME (repeatable); unknown dims default to 3 "
                        "(the shapes used are in --json's check_feeds)")
    o.add_argument("--inputs", metavar="FILE.npz",
                   help="--check: arrays to feed, by input name (the others are drawn at random)")
    o.add_argument("--carry", action="append", type=_pair, default=[], metavar="OUTPUT=INPUT",
                   help="--check a streaming model over chained calls: OUTPUT of one call feeds INPUT of the "
                        "next (repeatable; e.g. stateN=state)")
    o.add_argument("--calls", type=_count, default=50, help="--check: chained calls with --carry (default 50)")
    o.add_argument("--sequence-lens-input", action="store_true",
                   help="add a sequence_lens input for exact ragged batches (lstm-ort batch; docs/serving.md)")
    o.add_argument("--batchify", action="store_true",
                   help="a model exported for batch 1: make its batch dimension symbolic where every op keeps the "
                        "entries of a batch apart, else refuse naming the op (docs/streams.md)")
    lr = o.add_mutually_exclusive_group()
    lr.add_argument("--low-rank", type=_rank, metavar="R",
                    help="factor each layer's input and recurrent weights at rank R (truncated SVD; lossy: the "
                         "error against the unfactored model is measured and reported)")
    lr.add_argument("--low-rank-energy", type=_energy, metavar="E",
                    help="as --low-rank, with per matrix the smallest rank keeping fraction E of its squared "
                         "singular values")
    o.add_argument("--low-rank-target", choices=("input", "recurrent", "both"), default=None,
                   help="with --low-rank/--low-rank-energy: which weights to factor (default both)")
    o.add_argument("--low-rank-device", choices=LOW_RANK_DEVICES, default=None,
                   help="with --low-rank/--low-rank-energy: where the model will run. A matrix is factored only "
                        "where that is expected faster there, else kept whole with the reason in the report "
                        "(docs/ops.md, 'Factored weights'): on the CPU wherever the rank saves work; on CUDA only "
                        "at precision fp32, rank <= H/4 and a batch the model or --shape gives, with H >= 1024 and "
                        "B >= 64 or H >= 512 and B >= 256; any: only where it pays on both. Default: the devices "
                        "this install runs (any where lstm_ort's CUDA kernels load, else cpu); the report says "
                        "which")
    o.add_argument("--calibration", metavar="FILE.npz",
                   help="with --low-rank: inputs to measure the error on, arrays by input name with a leading "
                        "sample axis (default: seeded random unit-scale inputs)")
    o.add_argument("--max-error", type=_tolerance, metavar="X",
                   help="with --low-rank: refuse to write (exit 3) when the max-abs error of the outputs against "
                        "the unfactored model exceeds X")
    c = sub.add_parser("check", help="report what would be rewritten, write nothing")
    c.add_argument("model")
    for q in (o, c):
        q.add_argument("--json", action="store_true", help="one JSON document with everything (report, --check "
                                                           "result, output, strategies, error)")
        q.add_argument("--no-fold", action="store_true", help="skip constant folding before matching")
        q.add_argument("--freeze-inputs", action="store_true",
                       help="pack LSTM weights that are initializers and graph inputs too (by default such LSTMs "
                            "are left, as a caller may feed other weights); they stop being inputs")
        q.add_argument("--precision", choices=(*PRECISIONS, INT8), default=None,
                       help="the precision mode the FusedLSTM nodes made run in, written as their precision "
                            "attribute (docs/ops.md, 'Precision modes'); default: auto, FP32 accuracy except at "
                            "the large shapes where stock's own TF32 default would be faster (bound 2e-3). int8 "
                            "(optimize): float32 weights become int8 per output channel, with DynamicQuantizeLSTM's "
                            "arithmetic (docs/ops.md, 'int8 weights'), and the error this costs is measured as for "
                            "--low-rank (--calibration, --max-error)")
        q.add_argument("--seq-len", type=int, help="with --batch: report the CUDA plan for calls of this T")
        q.add_argument("--batch", type=int, help="with --seq-len: report the CUDA plan for calls of this B")
    t = sub.add_parser("tune", help="measure the CUDA strategies for a model's FusedLSTM nodes on this GPU and "
                                    "cache the winners, which lstm_ort.InferenceSession then uses")
    t.add_argument("model", help="an optimized model (a model with plain LSTMs is optimized in memory first)")
    t.add_argument("--seq-len", type=_count, nargs="+", required=True, help="sequence lengths T to tune for")
    t.add_argument("--batch", type=_count, nargs="+", required=True, help="batch sizes B to tune for")
    t.add_argument("--runs", type=_count, default=20, help="timed runs per strategy (median)")
    t.add_argument("--precision", choices=PRECISIONS, default=None,
                   help="tune for this precision mode (winners are cached per precision); default: each node's own")
    t.add_argument("--json", action="store_true", help="also print the measurements as JSON")
    t.add_argument("--cpu", action="store_true", help="tune the CPU kernel's choice instead: FusedLSTM's own "
                   "kernel or onnxruntime's, per shape class and thread count (docs/cpu.md, 'The floor')")
    t.add_argument("--threads", type=_count, nargs="+", default=None,
                   help="--cpu: intra-op thread counts to tune for (default: the cores)")
    add_batch_parser(sub)
    add_streams_bench_parser(sub)
    return p


def _optimized_in_memory(model: onnx.ModelProto) -> onnx.ModelProto:
    """streams-bench's optimizer: the rewrite with its default rules and no pass after it."""
    from lstm_ort.rewriter import optimize

    return optimize(model)


def main(argv=None) -> int:
    """The exit code; SIGINT and SIGTERM end with one line and 130 / 143, partial outputs removed."""
    return run_command(lambda: _main(argv))


def _main(argv) -> int:
    p = parser()
    try:
        args = p.parse_args(argv)
        if args.command == "tune" and args.threads is not None and not args.cpu:
            p.error("--threads goes with --cpu (the CUDA tuner measures no thread counts)")
        if args.command == "optimize":
            args.shape, args.carry = dict(args.shape), dict(args.carry)
            low_rank = args.low_rank is not None or args.low_rank_energy is not None
            if args.batchify and low_rank:
                p.error("--batchify does not go with --low-rank (batchify first, then factor the result)")
            if low_rank and args.precision == INT8:
                p.error("--precision int8 and --low-rank: choose one (int8 weights cannot be factored)")
            for flag, given, allowed in (("--low-rank-target", args.low_rank_target, low_rank),
                                         ("--low-rank-device", args.low_rank_device, low_rank),
                                         ("--calibration", args.calibration, low_rank or args.precision == INT8),
                                         ("--max-error", args.max_error, low_rank or args.precision == INT8)):
                if given is not None and not allowed:
                    p.error(f"{flag} goes with --low-rank, --low-rank-energy" +
                            (" or --precision int8" if not flag.startswith("--low-rank-") else ""))
            args.low_rank_target = args.low_rank_target or "both"
            if args.low_rank_energy is not None:
                args.low_rank = 0  # 0: by energy (cmd_optimize reads args.low_rank is not None as "factor")
        if args.command in ("optimize", "check"):
            # int8 is a pass after the rewrite, which writes its default precision on the nodes it makes.
            args.int8 = args.precision == INT8
            args.precision = Precision.written(None if args.int8 else args.precision)
    except SystemExit as e:  # --help, --version, usage errors: argparse has printed why
        return e.code if isinstance(e.code, int) else EXIT_USAGE
    if args.command == "tune":
        return cmd_tune(args)
    if args.command == "batch":
        return cmd_batch(args)
    if args.command == "streams-bench":
        return cmd_streams_bench(args, _optimized_in_memory)
    progress.enable()
    try:
        return cmd_optimize(args) if args.command == "optimize" else cmd_check(args)
    finally:
        progress.disable()


if __name__ == "__main__":
    sys.exit(main())
