"""lstm-ort: rewrite the LSTMs of an ONNX model into lstm_ort.FusedLSTM, and tune how the CUDA
kernel runs them.

Exit codes: 0 done; 1 the input could not be read or the output not written; 2 usage (or, for
tune, no CUDA device); 3 --check found the optimized model differs from the original (nothing
written).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

import onnx

from lstm_ort.rewriter import Report, optimize
from lstm_ort.runtime.model_io import ModelError, load_model
from lstm_ort.runtime import native
from lstm_ort.runtime.nodes import fused_nodes, node_shapes
from lstm_ort.serving.cli import add_batch_parser, cmd_batch
from lstm_ort.serving.parity import ragged_parity
from lstm_ort.runtime.tuned_cache import load_cache, record, tuned_entries
from lstm_ort.verify import parity

EXIT_OK, EXIT_INPUT, EXIT_USAGE, EXIT_PARITY = 0, 1, 2, 3
EXTERNAL_DATA_THRESHOLD = 1 << 30  # larger models keep their weights in a side file


def write_atomically(model: onnx.ModelProto, out: Path) -> None:
    """Write to a temporary file beside `out`, then rename: a failed write leaves no partial file."""
    out.parent.mkdir(parents=True, exist_ok=True)
    external = model.ByteSize() > EXTERNAL_DATA_THRESHOLD
    fd, tmp = tempfile.mkstemp(prefix=out.name + ".", suffix=".tmp", dir=out.parent)
    os.close(fd)
    data_name = out.name + ".data"
    try:
        if external:
            onnx.save(model, tmp, save_as_external_data=True, all_tensors_to_one_file=True, location=data_name)
        else:
            onnx.save(model, tmp)
        os.replace(tmp, out)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def cmd_optimize(args) -> int:
    src, dst = Path(args.input), Path(args.output)
    if dst.exists() and src.exists() and dst.resolve() == src.resolve():
        print("lstm-ort: refusing to overwrite the input model; choose another -o", file=sys.stderr)
        return EXIT_USAGE
    try:
        original = load_model(src)
        report = Report()
        optimized = optimize(original, fold_constants=not args.no_fold, report=report,
                             sequence_lens_input=args.sequence_lens_input)
    except ModelError as e:
        print(f"lstm-ort: {src}: {e}", file=sys.stderr)
        return EXIT_INPUT
    result = {"report": report}
    if args.check and any(f.rewritten for f in report.findings):
        err = (ragged_parity if args.sequence_lens_input else parity)(original, optimized)
        result["max_abs"] = err
        if not err <= args.atol:
            _print(report, args, f"--check: max-abs {err:.3g} > {args.atol:g}; nothing written")
            return EXIT_PARITY
    try:
        write_atomically(optimized, dst)
    except OSError as e:
        print(f"lstm-ort: cannot write {dst}: {e}", file=sys.stderr)
        return EXIT_INPUT
    extra = f"--check: max-abs {result['max_abs']:.3g} <= {args.atol:g}" if "max_abs" in result else ""
    extra += "\n" + strategy_report(optimized, args.seq_len, args.batch)
    _print(report, args, extra + (f"\nwrote {dst}" if not args.json else ""))
    return EXIT_OK


def cmd_check(args) -> int:
    try:
        report = Report()
        optimized = optimize(args.model, fold_constants=not args.no_fold, report=report)
    except ModelError as e:
        print(f"lstm-ort: {args.model}: {e}", file=sys.stderr)
        return EXIT_INPUT
    _print(report, args, strategy_report(optimized, args.seq_len, args.batch))
    return EXIT_OK


def strategy_report(model: onnx.ModelProto, T: int | None, B: int | None) -> str:
    """Which CUDA strategy each FusedLSTM node will use: forced, tuned, or chosen per call; with
    T and B on a CUDA machine, the plan itself."""
    try:
        cache = load_cache()
    except ValueError as e:
        cache = {}
        print(f"lstm-ort: {e}", file=sys.stderr)
    lines, gpu = [], None
    for node, shape in node_shapes(model):
        attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
        forced = attrs.get("strategy", b"auto").decode()
        if forced != "auto":
            what = f"{forced} (forced by the node's strategy attribute)"
        else:
            tuned = tuned_entries(cache, shape) if shape else []
            what = "auto: chosen per call from T and B"
            if tuned:
                what += "; tuned: " + ", ".join(f"T={e.T} B={e.B} -> {e.strategy} on {e.gpu}" for e in tuned)
        line = f"{node.name or '<unnamed>'} [{shape.key if shape else 'sizes unknown'}]: {what}"
        if shape and T and B:
            try:
                gpu = gpu or native.device_name()
                line += f"\n    at T={T} B={B} on {gpu}: {native.describe(shape, T, B, forced)}"
            except (OSError, RuntimeError) as e:
                line += f"\n    (no plan at T={T} B={B}: {e})"
        lines.append(line)
    return ("FusedLSTM strategies (CUDA):\n  " + "\n  ".join(lines)) if lines else ""


def cmd_tune(args) -> int:
    from lstm_ort.tuning.measure import tune_shape

    try:
        model = load_model(Path(args.model))
        if not fused_nodes(model):
            model = optimize(model)
    except ModelError as e:
        print(f"lstm-ort: {args.model}: {e}", file=sys.stderr)
        return EXIT_INPUT
    try:
        import onnxruntime as ort

        if "CUDAExecutionProvider" not in ort.get_available_providers():
            raise RuntimeError("onnxruntime's CUDA execution provider is not available")
        gpu = native.device_name()
    except (OSError, RuntimeError) as e:
        print(f"lstm-ort tune needs a CUDA GPU: {e}", file=sys.stderr)
        return EXIT_USAGE
    shapes = []
    for node, shape in node_shapes(model):
        if shape is None:
            print(f"lstm-ort: {node.name}: W is not an initializer, sizes unknown; skipped", file=sys.stderr)
        elif shape not in shapes:
            shapes.append(shape)
    if not shapes:
        print("lstm-ort: no FusedLSTM node to tune", file=sys.stderr)
        return EXIT_INPUT
    results = []
    for shape in shapes:
        for T in args.seq_len:
            for B in args.batch:
                r = tune_shape(shape, T, B, runs=args.runs)
                path = record(gpu, shape, T, B, r.winner, r.ms)
                results.append(r)
                timings = "  ".join(f"{k} {v:.3f}" for k, v in r.ms.items())
                print(f"{shape.key} T={T} B={B}: {timings} ms -> {r.winner}\n    {r.plan}", flush=True)
    if args.json:
        print(json.dumps([{"shape": r.shape.key, "T": r.T, "B": r.B, "ms": r.ms, "winner": r.winner, "plan": r.plan}
                          for r in results], indent=2))
    print(f"cached for {gpu} in {path}", file=sys.stderr)
    return EXIT_OK


def _print(report: Report, args, extra: str) -> None:
    if args.json:
        print(report.to_json())
    else:
        print(report.table())
    if extra:
        print(extra.strip(), file=sys.stderr if args.json else sys.stdout)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="lstm-ort", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    o = sub.add_parser("optimize", help="rewrite LSTMs into FusedLSTM and write the result")
    o.add_argument("input")
    o.add_argument("-o", "--output", required=True)
    o.add_argument("--check", action="store_true", help="refuse to write unless outputs match stock onnxruntime")
    o.add_argument("--atol", type=float, default=1e-4, help="--check tolerance (max-abs, default 1e-4)")
    o.add_argument("--sequence-lens-input", action="store_true", help="add a sequence_lens input for ragged batches")
    c = sub.add_parser("check", help="report what would be rewritten, write nothing")
    c.add_argument("model")
    for q in (o, c):
        q.add_argument("--json", action="store_true", help="machine-readable report")
        q.add_argument("--no-fold", action="store_true", help="skip constant folding before matching")
        q.add_argument("--seq-len", type=int, help="with --batch: report the CUDA plan for calls of this T")
        q.add_argument("--batch", type=int, help="with --seq-len: report the CUDA plan for calls of this B")
    t = sub.add_parser("tune", help="measure the CUDA strategies for a model's FusedLSTM nodes on this GPU and "
                                    "cache the winners, which lstm_ort.InferenceSession then uses")
    t.add_argument("model", help="an optimized model (a model with plain LSTMs is optimized in memory first)")
    t.add_argument("--seq-len", type=int, nargs="+", required=True, help="sequence lengths T to tune for")
    t.add_argument("--batch", type=int, nargs="+", required=True, help="batch sizes B to tune for")
    t.add_argument("--runs", type=int, default=20, help="timed runs per strategy (median)")
    t.add_argument("--json", action="store_true", help="also print the measurements as JSON")
    add_batch_parser(sub)
    args = p.parse_args(argv)
    if args.command == "batch":
        return cmd_batch(args)
    if args.command == "tune":
        if min(args.seq_len) < 1 or min(args.batch) < 1 or args.runs < 1:
            p.error("--seq-len, --batch and --runs must be >= 1")
        return cmd_tune(args)
    return cmd_optimize(args) if args.command == "optimize" else cmd_check(args)


if __name__ == "__main__":
    sys.exit(main())
