"""Draw every schematic of the course into notebooks/figures/ (``gpulab.figures.catalog.STATIC``).

    python scripts/make_figures.py            # write notebooks/figures/NAME.svg and notebooks/zh/figures/NAME.svg
    python scripts/make_figures.py --check    # say which files differ from what the code draws; exit 1 if any

The files are what the notebooks' markdown embeds, so they are committed; tests/test_figures.py fails
when one is out of date. A file with no schematic behind it is removed. The Chinese edition's copies are the
same drawings with their texts swapped (``gpulab.figures.chinese``); a label without a translation stops the
build, naming the figure and the label.
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
ZH_FOLDER = ROOT / "notebooks" / "zh" / "figures"
FOLDERS = {"en": FOLDER, "zh": ZH_FOLDER}


def draw_all(folder: Path, lang: str = "en") -> list[Path]:
    """Save every schematic as ``folder/NAME.svg`` (``lang="zh"``: in Chinese); the paths written."""
    import warnings

    import matplotlib

    matplotlib.use("Agg")
    from gpulab.figures import chinese, has_title, save_svg
    from gpulab.figures.catalog import STATIC

    written = []
    for name, draw in STATIC.items():
        fig = draw()
        if not has_title(fig):
            raise ValueError(f"figure {name!r} has no title")
        if lang == "zh":
            missing = chinese.translate(fig)
            if missing:
                raise ValueError(f"figure {name!r}: no Chinese for {missing!r} in gpulab/figures/zh_texts.json")
        with warnings.catch_warnings():  # the fonts matplotlib measures with may lack CJK glyphs; the SVG keeps text
            warnings.filterwarnings("ignore", message="Glyph .* missing from font")
            written.append(save_svg(fig, folder / f"{name}.svg"))
    return written


def out_of_date(folder: Path = FOLDER, lang: str = "en") -> list[str]:
    """Names of the files in ``folder`` that differ from what the code draws, are missing, or are left over."""
    with tempfile.TemporaryDirectory() as tmp:
        fresh = {p.name: p.read_bytes() for p in draw_all(Path(tmp), lang)}
    saved = {p.name: p.read_bytes() for p in folder.glob("*.svg")}
    return sorted(n for n in fresh.keys() | saved.keys() if fresh.get(n) != saved.get(n))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare only; exit 1 when a file is out of date")
    args = parser.parse_args(argv)
    if args.check:
        stale = [f"{folder.relative_to(ROOT)}/{name}" for lang, folder in FOLDERS.items()
                 for name in out_of_date(folder, lang)]
        for path in stale:
            print(f"out of date: {path} (run python scripts/make_figures.py)")
        return 1 if stale else 0
    for lang, folder in FOLDERS.items():
        folder.mkdir(parents=True, exist_ok=True)
        keep = {p.name for p in draw_all(folder, lang)}
        for leftover in folder.glob("*.svg"):
            if leftover.name not in keep:
                leftover.unlink()
        print(f"{len(keep)} schematic(s) in {folder.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
