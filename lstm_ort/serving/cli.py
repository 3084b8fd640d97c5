"""`lstm-ort batch MODEL INPUT -o OUTPUT`: a ragged dataset through a model with the bucketing batcher.

INPUT / OUTPUT: .npz (one array per sequence; outputs keep the keys, as KEY, or KEY/OUTPUT when
the model has several outputs) or .parquet (a list column of sequences; the other columns are
kept, one list column per model output is added). Exit codes: 0 done; 1 the model or the input
could not be read, or the output not written; 2 usage (bad options, a model that is not
ragged-exact without --allow-padding).
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
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
    src, dst = Path(args.input), Path(args.output)
    for path, what in ((src, "INPUT"), (dst, "-o")):
        if path.suffix not in FORMATS:
            raise CliError(f"{what} {path}: expected a .npz or .parquet file", EXIT_USAGE)
    buckets = parse_buckets(args.buckets)
    for name in ("max_batch_tokens", "max_batch_size"):
        if getattr(args, name) is not None and getattr(args, name) < 1:
            raise CliError(f"--{name.replace('_', '-')} must be >= 1", EXIT_USAGE)
    keys, seqs, table, column = _read(src, args.column)
    from lstm_ort.runtime.model_io import ModelError
    from lstm_ort.serving.batcher import BucketingBatcher, NotRaggedExact
    from lstm_ort.serving.ragged import NoSequenceInput

    try:
        batcher = BucketingBatcher(args.model, providers=args.providers, buckets=buckets,
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
    outputs = [o for o in args.outputs.split(",") if o] if args.outputs else None
    bar = None if args.no_progress else _progress(len(seqs))
    try:
        results = batcher.run(seqs, output_names=outputs, progress=bar.update if bar else None)
    except NotRaggedExact as e:
        raise CliError(f"{e} (--allow-padding)", EXIT_USAGE) from None
    except (ValueError, TypeError) as e:
        raise CliError(f"{src}: {e}", EXIT_INPUT) from None
    except Exception as e:  # onnxruntime's run errors
        raise CliError(f"run failed: {_first_line(e)}", EXIT_INPUT) from None
    finally:
        if bar:
            bar.close()
    names = outputs or [o.name for o in batcher.session.get_outputs()]
    try:
        _write(dst, keys, results, names, table, column, layout)
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
    from lstm_ort.serving.arrow import sequences_from_arrow

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


def _write(dst: Path, keys, results, names, table, column, layout) -> None:
    dst.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=dst.name + ".", suffix=".tmp" + dst.suffix, dir=dst.parent)
    os.close(fd)
    try:
        if dst.suffix == ".npz":
            arrays = {(k if len(names) == 1 else f"{k}/{n}"): r[n] for k, r in zip(keys, results) for n in names}
            np.savez(tmp, **arrays)
        else:
            pq, pa = _pyarrow()
            from lstm_ort.serving.arrow import arrow_from_arrays

            out = table if table is not None else pa.table({"key": keys})
            for n in names:
                axes = layout.outputs.get(n)
                col = arrow_from_arrays([r[n] for r in results], has_time=axes is not None and axes.time is not None)
                out = out.append_column(n if n not in out.column_names else f"{n}_out", col)
            pq.write_table(out, tmp)
        os.replace(tmp, dst)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


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
