"""`optimize` as a list of passes, run alike by `lstm_ort.optimize` (driver.py) and `lstm-ort
optimize` (cli.py).

The rewrite itself (driver.rewrite, on onnx-ir with the packed weights lazy) is the first passes:
fold constants, every rule of rules.DEFAULT_RULES (which drop zero initial states as they fuse),
and the precision attribute on the nodes they made. The passes after it take the model as a
ModelProto, in this order (``after_rewrite``):

| pass          | what it does                                                    | lossy |
| ------------- | --------------------------------------------------------------- | ----- |
| batchify      | a model exported for batch 1 gets a symbolic batch (batchify.py) | no    |
| sequence_lens | a sequence_lens input wired into the FusedLSTMs (sequence_lens.py) | no |
| int8          | float32 weights become int8 per output channel (int8_weights.py) | yes   |
| low_rank      | the weights factored by truncated SVD (low_rank.py)             | yes   |

A lossy pass measures the error it costs against the model before it and raises
ErrorBoundExceeded beyond ``max_error``; `lstm-ort optimize --check` holds the model before the
lossy passes to stock onnxruntime. Adding a pass after the rewrite: its function here and a line
in ``after_rewrite`` (and its option in ``Options``, the CLI's flag in cli.py).
"""

from __future__ import annotations

import math
import numbers
import os
from dataclasses import dataclass
from typing import Callable

import onnx

from lstm_ort.rewriter.low_rank import LowRank
from lstm_ort.rewriter.report import Report


@dataclass(frozen=True)
class Options:
    """What the passes after the rewrite are asked to do."""

    batchify: bool = False
    sequence_lens_input: bool = False
    int8: bool = False
    low_rank: LowRank | None = None
    calibration: object = None  # an .npz path or a list of feed dicts (lossy passes measure on it)
    shapes: dict[str, list[int]] | None = None  # feed shapes for dims the model leaves unknown
    max_error: float | None = None  # a lossy pass refuses beyond this max-abs error

    def __post_init__(self) -> None:
        """A ValueError naming the option given a value of the wrong kind, or given without the
        pass it is for (never silently unused)."""
        if self.low_rank is not None and not isinstance(self.low_rank, LowRank):
            raise ValueError(f"low_rank must be a rank (an integer >= 1) or a rewriter.low_rank.LowRank, "
                             f"got {self.low_rank!r}")
        if self.int8 and self.low_rank is not None:
            raise ValueError("precision int8 and low_rank: choose one (int8 weights cannot be factored)")
        lossy = self.int8 or self.low_rank is not None
        if self.max_error is not None and (isinstance(self.max_error, bool) or
                                           not isinstance(self.max_error, numbers.Real) or
                                           not math.isfinite(self.max_error) or self.max_error < 0):
            raise ValueError(f"max_error must be a finite number >= 0, got {self.max_error!r}")
        if self.calibration is not None and not isinstance(self.calibration, (str, os.PathLike, list, tuple)):
            raise ValueError(f"calibration must be an .npz path or a list of feed dicts, got {self.calibration!r}")
        for name in ("max_error", "calibration"):
            if getattr(self, name) is not None and not lossy:
                raise ValueError(f"{name} goes with low_rank or precision='int8', the passes that change results")


@dataclass(frozen=True)
class Pass:
    name: str
    lossy: bool  # changes results: measured against the model before it, bounded by max_error
    run: Callable[[onnx.ModelProto, Report], onnx.ModelProto]  # may change its argument in place


def after_rewrite(options: Options) -> list[Pass]:
    """The passes after the rewrite that ``options`` ask for, in the order they run."""
    passes = []
    if options.batchify:
        passes.append(Pass("batchify", False, lambda model, report: _batchify(model, report, options.shapes)))
    if options.sequence_lens_input:
        passes.append(Pass("sequence_lens", False, _sequence_lens))
    measured = {"calibration": options.calibration, "shapes": options.shapes, "max_error": options.max_error}
    if options.int8:
        passes.append(Pass("int8", True, lambda model, report: _int8(model, report, measured)))
    if options.low_rank is not None:
        passes.append(Pass("low_rank", True, lambda model, report: _low_rank(model, report, options.low_rank, measured)))
    return passes


def run(passes: list[Pass], model: onnx.ModelProto, report: Report) -> onnx.ModelProto:
    for p in passes:
        model = p.run(model, report)
    return model


def _batchify(model: onnx.ModelProto, report: Report, shapes) -> onnx.ModelProto:
    from lstm_ort.rewriter.batchify import batchify  # the analysis runs onnx.reference: loaded when asked for

    batchify(model, report, shapes=shapes)
    return model


def _sequence_lens(model: onnx.ModelProto, report: Report) -> onnx.ModelProto:
    from lstm_ort.rewriter.sequence_lens import add_sequence_lens_input

    add_sequence_lens_input(model, report)
    return model


def _int8(model: onnx.ModelProto, report: Report, measured: dict) -> onnx.ModelProto:
    from lstm_ort.rewriter.int8_weights import quantize_and_measure

    return quantize_and_measure(model, report, **measured)


def _low_rank(model: onnx.ModelProto, report: Report, option: LowRank, measured: dict) -> onnx.ModelProto:
    from lstm_ort.rewriter.low_rank import factor_and_measure

    return factor_and_measure(model, option, report, **measured)
