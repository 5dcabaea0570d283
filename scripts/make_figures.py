"""Draw every schematic of the course into notebooks/figures/ (``gpulab.figures.catalog.STATIC``).

    python scripts/make_figures.py            # write notebooks/figures/NAME.svg for every schematic
    python scripts/make_figures.py --check    # say which files differ from what the code draws; exit 1 if any

The files are what the notebooks' markdown embeds, so they are committed; tests/test_figures.py fails
when one is out of date. A file with no schematic behind it is removed.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

FOLDER = ROOT / "notebooks" / "figures"


def draw_all(folder: Path) -> list[Path]:
    """Save every schematic as ``folder/NAME.svg``; the paths written."""
    import matplotlib

    matplotlib.use("Agg")
    from gpulab.figures import has_title, save_svg
    from gpulab.figures.catalog import STATIC

    written = []
    for name, draw in STATIC.items():
        fig = draw()
        if not has_title(fig):
            raise ValueError(f"figure {name!r} has no title")
        written.append(save_svg(fig, folder / f"{name}.svg"))
    return written


def out_of_date(folder: Path = FOLDER) -> list[str]:
    """Names of the files in ``folder`` that differ from what the code draws, are missing, or are left over."""
    with tempfile.TemporaryDirectory() as tmp:
        fresh = {p.name: p.read_bytes() for p in draw_all(Path(tmp))}
    saved = {p.name: p.read_bytes() for p in folder.glob("*.svg")}
    return sorted(n for n in fresh.keys() | saved.keys() if fresh.get(n) != saved.get(n))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare only; exit 1 when a file is out of date")
    args = parser.parse_args(argv)
    if args.check:
        stale = out_of_date()
        for name in stale:
            print(f"out of date: notebooks/figures/{name} (run python scripts/make_figures.py)")
        return 1 if stale else 0
    FOLDER.mkdir(parents=True, exist_ok=True)
    keep = {p.name for p in draw_all(FOLDER)}
    for leftover in FOLDER.glob("*.svg"):
        if leftover.name not in keep:
            leftover.unlink()
    print(f"{len(keep)} schematic(s) in {FOLDER.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
