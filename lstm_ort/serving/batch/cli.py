"""`lstm-ort batch MODEL INPUT -o OUTPUT`: a ragged dataset through a model with the bucketing batcher.

INPUT / OUTPUT: .npz (one array per sequence; outputs keep the keys, as KEY, or KEY/OUTPUT when
the model has several outputs) or .parquet (a list column of sequences; the other columns are
kept, one list column per model output is added, "_out" appended to a name already taken).
Values are converted to the model's element type only where that changes none (integers to a
float that holds them, float64 within float32's range); anything else is an error naming the
sequence and the value, as is a null inside a sequence. Exit codes: 0 done; 1 the model or the
input could not be read (values included), or the output not written; 2 usage (bad options:
-o naming the input or the model, --outputs, --providers; a model that is not ragged-exact
without --allow-padding); 130 / 143 SIGINT / SIGTERM (lstm_ort.runtime.output_files).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

EXIT_OK, EXIT_INPUT, EXIT_USAGE = 0, 1, 2
FORMATS = (".npz", ".parquet")


class CliError(Exception):
    def __init__(self, message: str, code: int):
        super().__init__(message)
        self.code = code


def add_batch_parser(sub) -> None:
    b = sub.add_parser("batch", help="run a ragged dataset (.npz or .parquet) through a model in length buckets")
    b.add_argument("model", help="an optimized model with a sequence_lens input (lstm-ort optimize --sequence-lens-input)")
    b.add_argument("input", help=".npz (one array per sequence) or .parquet (a list column)")
    b.add_argument("-o", "--output", required=True, help=".npz or .parquet")
    b.add_argument("--input-name", help="the model input that takes the sequences (default: found from the graph)")
    b.add_argument("--column", help=".parquet: the list column holding the sequences (default: the only list column)")
    b.add_argument("--buckets", default="auto", help="auto (from the data), N (N optimal buckets) or L1,L2,...")
    b.add_argument("--max-batch-tokens", type=int, help="at most this many padded time steps per batch")
    b.add_argument("--max-batch-size", type=int, help="at most this many sequences per batch (default 64)")
    b.add_argument("--providers", help="comma-separated: cuda,cpu (default: onnxruntime's)")
    b.add_argument("--outputs", help="comma-separated model outputs to keep (default: all)")
    b.add_argument("--allow-padding", action="store_true", help="run a model that is not ragged-exact anyway")
    b.add_argument("--no-progress", action="store_true", help="no progress bar")
    b.add_argument("--json", action="store_true", help="print the stats as JSON")


def parse_buckets(text: str):
    text = text.strip()
    if text == "auto":
        return "auto"
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise CliError(f"--buckets: expected auto, N or L1,L2,..., got {text!r}", EXIT_USAGE) from None
    if not values or min(values) < 1:
        raise CliError(f"--buckets: values must be >= 1, got {text!r}", EXIT_USAGE)
    return values[0] if len(values) == 1 and "," not in text else values


def cmd_batch(args) -> int:
    try:
        return _batch(args)
    except CliError as e:
        print(f"lstm-ort: {e}", file=sys.stderr)
        return e.code


def _batch(args) -> int:
    from lstm_ort.runtime.output_files import OutputRefused, output_target

    src = Path(args.input)
    for path, what in ((src, "INPUT"), (Path(args.output), "-o")):
        if path.suffix not in FORMATS:
            raise CliError(f"{what} {path}: expected a .npz or .parquet file", EXIT_USAGE)
    buckets = parse_buckets(args.buckets)
    for name in ("max_batch_tokens", "max_batch_size"):
        if getattr(args, name) is not None and getattr(args, name) < 1:
            raise CliError(f"--{name.replace('_', '-')} must be >= 1", EXIT_USAGE)
    providers = _providers(args.providers)
    try:
        dst = output_target(args.output, [(src, "the input"), (args.model, "the model")])
    except OutputRefused as e:
        raise CliError(str(e), EXIT_USAGE) from None
    from lstm_ort.runtime.model_io import ModelError, read_model
    from lstm_ort.serving.batch.batcher import BucketingBatcher, NotRaggedExact, SequenceError
    from lstm_ort.graph.ragged import NoSequenceInput

    try:
        proto, files = read_model(args.model)
        dst = output_target(args.output, [(src, "the input"), (files[0], "the model"),
                                          *((f, f"the model's external data file {f.name}") for f in files[1:])])
    except ModelError as e:
        raise CliError(f"{args.model}: {e}", EXIT_INPUT) from None
    except OutputRefused as e:
        raise CliError(str(e), EXIT_USAGE) from None
    try:
        batcher = BucketingBatcher(proto, providers=providers, buckets=buckets,
                                   max_batch_tokens=args.max_batch_tokens, max_batch_size=args.max_batch_size,
                                   allow_padding=args.allow_padding, input_name=args.input_name)
        layout = batcher.layout()
    except ModelError as e:
        raise CliError(f"{args.model}: {e}", EXIT_INPUT) from None
    except NoSequenceInput as e:
        raise CliError(f"{args.model}: {e}", EXIT_USAGE) from None
    except Exception as e:  # onnxruntime's load errors
        raise CliError(f"{args.model}: cannot load: {_first_line(e)}", EXIT_INPUT) from None
    if not layout.exact and not args.allow_padding:
        raise CliError(f"{args.model}: not ragged-exact, padding would change its results: "
                       f"{'; '.join(layout.reasons)} (--allow-padding runs it anyway)", EXIT_USAGE)
    names = _output_names(args.outputs, [o.name for o in batcher.session.get_outputs()])
    keys, seqs, table, _ = _read(src, args.column)  # after every option is known good
    bar = None if args.no_progress else _progress(len(seqs))
    try:
        results = batcher.run(seqs, output_names=names, progress=bar.update if bar else None)
    except NotRaggedExact as e:
        raise CliError(f"{e} (--allow-padding)", EXIT_USAGE) from None
    except SequenceError as e:
        which = repr(keys[e.index]) if table is None else str(e.index)
        raise CliError(f"{src}: sequence {which}: {e.detail}", EXIT_INPUT) from None
    except (ValueError, TypeError) as e:
        raise CliError(f"{src}: {e}", EXIT_INPUT) from None
    except Exception as e:  # onnxruntime's run errors
        raise CliError(f"run failed: {_first_line(e)}", EXIT_INPUT) from None
    finally:
        if bar:
            bar.close()
    try:
        _write(dst, keys, results, names, table, layout)
    except OSError as e:
        raise CliError(f"cannot write {dst}: {e}", EXIT_INPUT) from None
    stats = batcher.stats
    if args.json:
        print(json.dumps({**stats.as_dict(), "boundaries": [b.boundary for b in stats.buckets],
                          "output": str(dst)}, indent=2))
    else:
        print(stats.table())
        print(f"wrote {dst}")
    return EXIT_OK


def _providers(text: str | None) -> list | None:
    """--providers checked against what onnxruntime offers (a usage error otherwise); one line on
    stderr for each it will skip, not being available here."""
    from lstm_ort.serving.batch.batcher import normalize_providers, unavailable_providers

    try:
        providers = normalize_providers(text)
    except ValueError as e:
        raise CliError(f"--providers: {e}", EXIT_USAGE) from None
    if text is not None and not providers:
        raise CliError("--providers names no provider (cuda, cpu, or onnxruntime's names)", EXIT_USAGE)
    for name in unavailable_providers(providers):
        print(f"lstm-ort: --providers: {name} is not available here; skipped", file=sys.stderr)
    return providers


def _output_names(text: str | None, available: list[str]) -> list[str]:
    if text is None:
        return available
    names = [o.strip() for o in text.split(",") if o.strip()]
    if not names:
        raise CliError(f"--outputs names no output (outputs: {', '.join(available)})", EXIT_USAGE)
    for name in names:
        if name not in available:
            raise CliError(f"--outputs: no model output {name!r} (outputs: {', '.join(available)})", EXIT_USAGE)
    return names


def _first_line(e: Exception) -> str:
    return (str(e).strip().splitlines() or [type(e).__name__])[0]


def _read(src: Path, column: str | None):
    if not src.is_file():
        raise CliError(f"{src}: no such file", EXIT_INPUT)
    if src.suffix == ".npz":
        try:
            with np.load(src, allow_pickle=False) as data:
                keys = list(data.files)
                return keys, [data[k] for k in keys], None, None
        except Exception as e:
            raise CliError(f"{src}: not a readable .npz: {_first_line(e)}", EXIT_INPUT) from None
    pq, pa = _pyarrow()
    try:
        table = pq.read_table(src)
    except Exception as e:
        raise CliError(f"{src}: not a readable .parquet: {_first_line(e)}", EXIT_INPUT) from None
    lists = [f.name for f in table.schema if pa.types.is_list(f.type) or pa.types.is_large_list(f.type)]
    if column is None:
        if len(lists) != 1:
            raise CliError(f"{src}: {len(lists)} list columns ({', '.join(lists) or 'none'}); choose one with --column",
                           EXIT_USAGE)
        column = lists[0]
    elif column not in lists:
        raise CliError(f"{src}: no list column {column!r} (list columns: {', '.join(lists) or 'none'})", EXIT_USAGE)
    from lstm_ort.serving.batch.arrow import sequences_from_arrow

    try:
        seqs = sequences_from_arrow(table.column(column))
    except (TypeError, ValueError) as e:
        raise CliError(f"{src}: column {column!r}: {e}", EXIT_INPUT) from None
    return [str(k) for k in range(len(seqs))], seqs, table, column


def _pyarrow():
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        raise CliError(".parquet needs pyarrow: pip install 'lstm-ort[serving]'", EXIT_USAGE) from None
    return pq, pa


def _write(dst: Path, keys, results, names, table, layout) -> None:
    """The outputs, whole or not at all (lstm_ort.runtime.output_files)."""
    from lstm_ort.runtime.output_files import write_file

    if dst.suffix == ".npz":
        arrays = {(k if len(names) == 1 else f"{k}/{n}"): r[n] for k, r in zip(keys, results) for n in names}
        write_file(dst, lambda path: np.savez(path, **arrays))
        return
    pq, pa = _pyarrow()
    from lstm_ort.serving.batch.arrow import add_output_columns

    out = add_output_columns(table if table is not None else pa.table({"key": keys}), results, names, layout)
    write_file(dst, lambda path: pq.write_table(out, path))


class _TextProgress:
    def __init__(self, total: int):
        self.total, self.last = total, -1

    def update(self, done: int, total: int) -> None:
        pct = int(100 * done / total) if total else 100
        if pct // 10 != self.last // 10:
            print(f"  {done}/{total} sequences ({pct}%)", file=sys.stderr)
            self.last = pct

    def close(self) -> None:
        pass


class _TqdmProgress:
    def __init__(self, total: int, tqdm):
        self.bar = tqdm(total=total, unit="seq", file=sys.stderr, dynamic_ncols=True)
        self.done = 0

    def update(self, done: int, total: int) -> None:
        self.bar.update(done - self.done)
        self.done = done

    def close(self) -> None:
        self.bar.close()


def _progress(total: int):
    try:
        from tqdm import tqdm
    except ImportError:
        return _TextProgress(total)
    return _TqdmProgress(total, tqdm)
