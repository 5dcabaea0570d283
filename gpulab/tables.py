"""Plain-text tables from rows of dicts: what notebooks print for recorded and measured figures."""

from __future__ import annotations

from typing import Sequence


def _cell(value: object) -> str:
    if isinstance(value, bool) or value is None:
        return "-" if value is None else str(value)
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        return f"{value:,.4g}" if abs(value) < 1000 else f"{value:,.0f}"
    return str(value)


def format_rows(rows: Sequence[dict], columns: Sequence[str] | None = None) -> str:
    """One line per row, columns aligned (text left, numbers right; a missing value is ``-``).

    ``columns`` defaults to every key of every row, in order of first appearance.
    """
    if not rows:
        return "(no rows)"
    columns = list(columns) if columns is not None else list(dict.fromkeys(k for row in rows for k in row))
    cells = [[_cell(row.get(c)) for c in columns] for row in rows]
    numeric = [all(row.get(c) is None or (isinstance(row.get(c), (int, float)) and not isinstance(row.get(c), bool))
                   for row in rows) for c in columns]
    widths = [max(len(c), *(len(line[i]) for line in cells)) for i, c in enumerate(columns)]

    def line(values: Sequence[str]) -> str:
        return "  ".join(v.rjust(w) if num else v.ljust(w) for v, w, num in zip(values, widths, numeric)).rstrip()

    return "\n".join([line(columns), line(["-" * w for w in widths])] + [line(c) for c in cells])
