"""Report how nbval treats the notebooks' code cells: compared, ignored, skipped or expected to raise.

    python scripts/nbreport.py notebooks            # a folder, or .ipynb files

The rules mirror nbval 0.11: cell tags first, then whole-line comment markers (``# NBVAL_SKIP``),
which win where both are given. A cell tagged ``skip-execution`` is never run by ``make notebooks``;
it counts as skipped (the hygiene tests require it to carry ``nbval-skip`` as well).
tests/test_hygiene.py imports ``count_cells`` so the report and the test cannot disagree.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

CATEGORIES = ("compared", "ignored", "skipped", "raises")

# nbval's cell tags and comment markers -> (option, value)
_TAGS = {
    "nbval-ignore-output": ("check", False),
    "nbval-check-output": ("check", True),
    "nbval-raises-exception": ("check_exception", True),
    "raises-exception": ("check_exception", True),
    "nbval-skip": ("skip", True),
}
_COMMENTS = {
    "NBVAL_IGNORE_OUTPUT": ("check", False),
    "PYTEST_VALIDATE_IGNORE_OUTPUT": ("check", False),
    "NBVAL_CHECK_OUTPUT": ("check", True),
    "NBVAL_RAISES_EXCEPTION": ("check_exception", True),
    "NBVAL_SKIP": ("skip", True),
}


def cell_source(cell: dict) -> str:
    """The cell's source as one string (notebook JSON may store a list of lines)."""
    src = cell.get("source", "")
    return "".join(src) if isinstance(src, list) else str(src)


def cell_tags(cell: dict) -> list[str]:
    """The cell's tags ([] when it has none)."""
    tags = cell.get("metadata", {}).get("tags", [])
    return list(tags) if isinstance(tags, list) else []


def classify_cell(cell: dict) -> str:
    """One of CATEGORIES for a code cell, as nbval --nbval (strict mode) would treat it."""
    if cell.get("cell_type") != "code":
        raise ValueError(f"classify_cell needs a code cell, got cell_type={cell.get('cell_type')!r}")
    options: dict[str, bool] = {}
    for tag in cell_tags(cell):
        if tag in _TAGS:
            key, value = _TAGS[tag]
            options[key] = value
    for line in cell_source(cell).splitlines():
        line = line.strip()
        if line.startswith("#"):
            marker = line.lstrip("#").strip()
            if marker in _COMMENTS:
                key, value = _COMMENTS[marker]
                options[key] = value
    if options.get("skip") or "skip-execution" in cell_tags(cell):
        return "skipped"
    if options.get("check_exception"):
        return "raises"
    if options.get("check") is False:
        return "ignored"
    return "compared"


def count_cells(notebook: Path) -> dict[str, int]:
    """Counts per category (all of CATEGORIES present) for one notebook file."""
    nb = json.loads(Path(notebook).read_text(encoding="utf-8"))
    counts = dict.fromkeys(CATEGORIES, 0)
    for cell in nb.get("cells", []):
        if cell.get("cell_type") == "code":
            counts[classify_cell(cell)] += 1
    return counts


def notebook_files(paths: list[str]) -> list[Path]:
    """Expand folders to their *.ipynb files (sorted); a missing path or non-notebook is a ValueError."""
    files: list[Path] = []
    for raw in paths:
        p = Path(raw)
        if p.is_dir():
            files.extend(sorted(p.glob("*.ipynb")))
        elif p.is_file() and p.suffix == ".ipynb":
            files.append(p)
        else:
            raise ValueError(f"{raw!r} is neither a folder nor an .ipynb file")
    return files


def format_report(per_notebook: dict[str, dict[str, int]]) -> str:
    """A plain-text table: one row per notebook and a total row with the share of cells compared."""
    total = dict.fromkeys(CATEGORIES, 0)
    width = max([len("notebook")] + [len(n) for n in per_notebook])
    head = f"{'notebook':<{width}}  " + "  ".join(f"{c:>8}" for c in CATEGORIES) + "  compared%"
    lines = [head]
    for name, counts in per_notebook.items():
        for c in CATEGORIES:
            total[c] += counts[c]
        lines.append(_row(name, counts, width))
    lines.append(_row("total", total, width))
    return "\n".join(lines)


def _row(name: str, counts: dict[str, int], width: int) -> str:
    n = sum(counts.values())
    share = f"{100 * counts['compared'] / n:.0f}%" if n else "-"
    return f"{name:<{width}}  " + "  ".join(f"{counts[c]:>8}" for c in CATEGORIES) + f"  {share:>9}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("paths", nargs="+", help="notebook folders or .ipynb files")
    args = parser.parse_args(argv)
    try:
        files = notebook_files(args.paths)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print("nbval code cells: compared (outputs checked) / ignored / skipped / raises")
    print(format_report({f.name: count_cells(f) for f in files}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
