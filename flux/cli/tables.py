"""Tables sized from their content, and to the terminal they are printed on.

Each column is as wide as its widest cell (header included), two spaces apart;
a header sits where its cells do (left-aligned over text, right-aligned over
numbers), so a glance down from a header finds its values. When the rows are
wider than the terminal, columns the caller marked as expendable are left out,
in the order given, and a note says which; then the columns marked shrinkable
are cut, widest first, with an ellipsis. Output to a pipe or a file is not
narrowed (scripts read whole rows), unless ``COLUMNS`` asks for a width.
"""

from __future__ import annotations

import os
import sys
import textwrap
from collections.abc import Sequence
from typing import TextIO

GAP = "  "
ELLIPSIS = "…"
# A shrinkable column is never cut below this many characters (or its header's width).
MIN_SHRUNK = 8


def terminal_width(stream: TextIO | None = None) -> int | None:
    """``COLUMNS`` when set, else the width of ``stream`` (stdout) when it is a terminal, else None."""
    columns = os.environ.get("COLUMNS", "")
    if columns.isdigit() and int(columns) > 0:
        return int(columns)
    stream = stream or sys.stdout
    try:
        if stream.isatty():
            return os.get_terminal_size(stream.fileno()).columns
    except (OSError, ValueError, AttributeError):
        pass
    return None


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[: max(0, width - 1)] + ELLIPSIS


def render(
    header: Sequence[str],
    rows: Sequence[Sequence[str]],
    right: frozenset[int] = frozenset(),
    width: int | None = None,
    drop: Sequence[int] = (),
    shrink: Sequence[int] = (),
) -> str:
    """The table as lines; within ``width`` columns when ``drop`` and ``shrink`` allow it.

    ``right``: indexes of right-aligned (numeric) columns. ``drop``: indexes that may be left out,
    first to go first. ``shrink``: indexes whose cells may be cut with an ellipsis.
    """
    rows = [tuple(str(cell) for cell in row) for row in rows]
    shown = list(range(len(header)))
    widths = {i: max([len(str(header[i]))] + [len(row[i]) for row in rows]) for i in shown}

    def total() -> int:
        return sum(widths[i] for i in shown) + len(GAP) * (len(shown) - 1)

    hidden: list[str] = []
    if width is not None:
        for i in drop:
            if total() <= width:
                break
            if i in shown and len(shown) > 1:
                shown.remove(i)
                hidden.append(str(header[i]))
        for i in sorted((i for i in shrink if i in shown), key=lambda i: -widths[i]):
            excess = total() - width
            if excess <= 0:
                break
            floor = max(MIN_SHRUNK, len(str(header[i])))
            widths[i] = max(floor, widths[i] - excess)

    def line(cells: Sequence[str]) -> str:
        out = []
        for i in shown:
            cell = _cut(cells[i], widths[i])
            out.append(cell.rjust(widths[i]) if i in right else cell.ljust(widths[i]))
        return GAP.join(out).rstrip()

    lines = [line(tuple(str(h) for h in header)), *(line(row) for row in rows)]
    if hidden:
        note = f"({', '.join(hidden)} left out to fit {width} columns; --json has everything)"
        lines += textwrap.wrap(note, width) if width else [note]
    return "\n".join(lines)
