"""The course's pictures: schematics drawn by code are up to date, embedded with alt text, and titled."""

from __future__ import annotations

import json
import re
from pathlib import Path

import matplotlib
import pytest

matplotlib.use("Agg")

from scripts_loader import load_script  # noqa: E402

from gpulab.figures import canvas, has_title, save_svg  # noqa: E402
from gpulab.figures.catalog import STATIC  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
FOLDER = ROOT / "notebooks" / "figures"
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
IMAGE = re.compile(r"!\[([^\]]*)\]\(([^)\s]+)\)")


def _embedded() -> list[tuple[str, int, str, str]]:
    """(notebook, cell, alt text, target) of every image the notebooks' markdown embeds."""
    found = []
    for path in NOTEBOOKS:
        for i, cell in enumerate(json.loads(path.read_text(encoding="utf-8"))["cells"]):
            if cell["cell_type"] == "markdown":
                found += [(path.name, i, alt, target) for alt, target in IMAGE.findall("".join(cell["source"]))]
    return found


def test_every_schematic_file_is_what_the_code_draws():
    stale = load_script("make_figures").out_of_date(FOLDER)
    assert not stale, f"run `python scripts/make_figures.py`: out of date {stale}"


def test_saving_is_repeatable(tmp_path):
    def draw():
        fig, ax = canvas(2, 1, "a title")
        ax.plot([0, 1], [0, 1])
        return fig
    a, b = save_svg(draw(), tmp_path / "a.svg"), save_svg(draw(), tmp_path / "b.svg")
    assert a.read_bytes() == b.read_bytes()


def test_a_figure_needs_a_title():
    with pytest.raises(ValueError, match="needs a title"):
        canvas(2, 1, "")


@pytest.mark.parametrize("name", sorted(STATIC))
def test_every_schematic_has_a_title_and_is_shown(name):
    import matplotlib.pyplot as plt

    fig = STATIC[name]()
    titled = has_title(fig)
    plt.close(fig)
    assert titled, name
    assert any(target.endswith(f"figures/{name}.svg") for _, _, _, target in _embedded()), \
        f"no notebook embeds figures/{name}.svg"


def test_every_embedded_image_exists_and_has_alt_text():
    for notebook, cell, alt, target in _embedded():
        assert len(alt.split()) >= 4, f"{notebook} cell {cell}: say in the alt text what {target} shows"
        assert not target.startswith("http"), f"{notebook} cell {cell}: draw it in gpulab.figures instead"
        assert (ROOT / "notebooks" / target).is_file(), f"{notebook} cell {cell}: {target} does not exist"
