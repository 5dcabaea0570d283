"""The course's pictures: schematics drawn by code are up to date, embedded with alt text, and titled."""

from __future__ import annotations

import json
import re
from pathlib import Path

import matplotlib
import pytest

matplotlib.use("Agg")

from scripts_loader import load_script  # noqa: E402

import matplotlib.pyplot  # noqa: E402
import matplotlib.text  # noqa: E402

from gpulab.figures import canvas, chinese, has_title, save_svg  # noqa: E402
from gpulab.figures.catalog import STATIC  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
FOLDER = ROOT / "notebooks" / "figures"
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
IMAGE = re.compile(r"!\[([^\]]*)\]\(([^)\s]+)\)")
CJK = re.compile(r"[\u4e00-\u9fff]")


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


def test_every_chinese_schematic_is_what_the_code_draws():
    make = load_script("make_figures")
    stale = make.out_of_date(make.ZH_FOLDER, "zh")
    assert not stale, f"run `python scripts/make_figures.py`: out of date in notebooks/zh/figures/: {stale}"


def test_every_label_has_its_chinese_and_every_chinese_label_is_used():
    missing, used = {}, set()
    for name, draw in STATIC.items():
        fig = draw()
        used |= {t.get_text() for t in fig.findobj(matplotlib.text.Text)}
        missing[name] = chinese.translate(fig)
        matplotlib.pyplot.close(fig)
    missing = {name: labels for name, labels in missing.items() if labels}
    assert not missing, f"add these labels to gpulab/figures/zh_texts.json: {missing}"
    unused = sorted(set(chinese.table()) - used)
    assert not unused, f"labels no schematic draws any more (their English changed?): {unused}"
    assert all(CJK.search(zh) for zh in chinese.table().values())


@pytest.mark.parametrize(("text", "needs"), [("rank 0", False), ("GPU 0 -> GPU 1", False), ("all_reduce", False),
                                             ("`x.to(device)`", False), ("4 GB", False),
                                             ("the CPU copies it", True), ("pinned", True)])
def test_which_labels_need_a_translation(text, needs):
    assert chinese.needs_translation(text) is needs


def test_the_chinese_notebooks_embed_the_chinese_schematics():
    for path in sorted((ROOT / "notebooks" / "zh").glob("*.ipynb")):
        for cell in json.loads(path.read_text(encoding="utf-8"))["cells"]:
            for _, target in IMAGE.findall("".join(cell["source"])) if cell["cell_type"] == "markdown" else []:
                if target.endswith(".svg"):
                    assert target.startswith("figures/"), (path.name, target)
                    drawn = (path.parent / target).read_text(encoding="utf-8")
                    assert CJK.search(drawn), (path.name, target)


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
