"""argparse types the commands share (`lstm-ort` in cli.py, `streams-bench` in serving/streams/cli.py):
a value outside its range is a usage error (exit 2) naming the option and the value, never a
run that measures nothing, hangs, or caches a key no session can read. NaN and infinity are
refused wherever a number is a count, a duration or a bound."""

from __future__ import annotations

import argparse
import math


def integer(at_least: int, meaning: str = ""):
    """An int >= ``at_least``; ``meaning`` says what the smallest value means (e.g. "0: the cores")."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = None
        if value is None or value < at_least:
            raise argparse.ArgumentTypeError(
                f"must be an integer >= {at_least}{f' ({meaning})' if meaning else ''}, not {text!r}")
        return value
    return parse


def number(*, at_least: float | None = None, above: float | None = None):
    """A finite float >= ``at_least`` or > ``above``."""
    bound = f" >= {at_least:g}" if at_least is not None else f" > {above:g}" if above is not None else ""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            value = math.nan
        if not math.isfinite(value) or (at_least is not None and value < at_least) or \
                (above is not None and value <= above):
            raise argparse.ArgumentTypeError(f"must be a finite number{bound}, not {text!r}")
        return value
    return parse


def integers(at_least: int):
    """``N,N,...``: a non-empty list of ints >= ``at_least``."""
    one = integer(at_least)

    def parse(text: str) -> list[int]:
        try:
            return [one(t) for t in text.split(",")]
        except argparse.ArgumentTypeError:
            raise argparse.ArgumentTypeError(f"must be comma-separated integers >= {at_least}, not {text!r}") from None
    return parse


def finite(text: str) -> float:
    """A finite float; a ValueError otherwise (for ``named`` values)."""
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(text)
    return value


def named(flag: str, form: str, convert=None):
    """An argparse type for ``NAME=...`` options: ``convert`` turns the text after ``=`` into the
    value (a ValueError is a usage error naming ``flag`` and ``form``)."""
    def parse(text: str):
        name, _, rest = text.partition("=")
        try:
            value = rest if convert is None else convert(rest)
        except ValueError:
            value = None
        if not name or value is None or value == "":
            raise argparse.ArgumentTypeError(f"{flag} takes {form}, got {text!r}")
        return name, value
    return parse


def dims(text: str) -> list[int]:
    """``D0,D1,...``, each an int >= 0 (empty: a scalar); a ValueError otherwise."""
    values = [int(d) for d in text.split(",")] if text else []
    if any(d < 0 for d in values):
        raise ValueError(text)
    return values
