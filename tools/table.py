"""Fixed-width tables for the tools' reports: a header, a rule, a line per row."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

# (title, width, cell): cell(row) gives the text. The first column is left-aligned, the rest
# right-aligned, unless the width is written "<N" (left).
Column = tuple[str, "int | str", Callable[[object], str]]


def print_table(columns: Sequence[Column], rows: Iterable) -> None:
    specs = [w if isinstance(w, str) else (f"<{w}" if k == 0 else f">{w}") for k, (_, w, _) in enumerate(columns)]

    def line(cells):
        return "".join(format(str(c), spec) for c, spec in zip(cells, specs))

    head = line([title for title, _, _ in columns])
    print(head)
    print("-" * len(head))
    for r in rows:
        print(line([cell(r) for _, _, cell in columns]))


def field(attr: str, spec: str = "") -> Callable[[object], str]:
    """A cell: the row's attribute `attr` formatted by `spec`, "-" where it is None."""
    def cell(r):
        v = getattr(r, attr)
        return "-" if v is None else format(v, spec)
    return cell
