"""The Chinese edition stays in step with the English notebooks (scripts/build_zh.py).

It fails when an English markdown cell changed and its translation did not, when a cell has no
translation, when a zh notebook is not what the build writes, or when its code differs from the English
code. Each failure names the notebook and the cell, and the command that rebuilds.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from scripts_loader import load_script

ZH = load_script("build_zh")
ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = ZH.english_notebooks()


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_every_notebook_has_a_current_zh_twin(path):
    built = ZH.dumps(ZH.build_notebook(path))  # raises OutOfStep naming the cell
    target = ZH.ZH / path.name
    assert target.is_file(), f"notebooks/zh/{path.name} is missing: run `{ZH.REBUILD}`"
    have = target.read_text(encoding="utf-8")
    assert have == built, (f"notebooks/zh/{path.name} {ZH.first_difference(have, built)} is not what the build "
                           f"writes: run `{ZH.REBUILD}` (never edit it by hand)")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_zh_code_and_outputs_are_the_english_ones(path):
    """The same code and outputs, but for the feedback lines a zh kernel prints in Chinese."""
    en = json.loads(path.read_text(encoding="utf-8"))["cells"]
    zh = json.loads((ZH.ZH / path.name).read_text(encoding="utf-8"))["cells"]
    assert [c["id"] for c in zh] == [c["id"] for c in en], f"{path.name}: the cells differ: run `{ZH.REBUILD}`"
    for a, b in zip(en, zh):
        if a["cell_type"] == "code":
            outputs = ZH.outputs_in_chinese(a["outputs"]) if "outputs" in a else None
            assert (a["source"], outputs) == (b["source"], b.get("outputs")), \
                f"{path.name} cell {a['id']}: zh code or outputs differ from English: run `{ZH.REBUILD}`"
        else:
            assert any("\u4e00" <= ch <= "\u9fff" for ch in "".join(b["source"])) or not "".join(a["source"]).strip(), \
                f"{path.name} cell {a['id']}: the zh cell holds no Chinese"


def _notebook(tmp_path: Path, markdown: str) -> Path:
    nb = {"cells": [{"cell_type": "markdown", "id": "m1", "metadata": {}, "source": markdown},
                    {"cell_type": "code", "id": "c1", "metadata": {}, "execution_count": 1, "outputs": [],
                     "source": "x = 1"}], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    path = tmp_path / "01_demo.ipynb"
    path.write_text(json.dumps(nb), encoding="utf-8")
    return path


def test_a_changed_english_cell_fails_with_its_name(tmp_path, monkeypatch):
    monkeypatch.setattr(ZH, "CATALOG", tmp_path / "catalog")
    (tmp_path / "catalog").mkdir()
    path = _notebook(tmp_path, "Hello [there](02_next.ipynb) and ![pic](figures/x.svg).")
    entry = {"en": ZH.cell_hash("Hello [there](02_next.ipynb) and ![pic](figures/x.svg)."),
             "zh": "你好 [下一个](02_next.ipynb) 和 ![图](figures/x.svg)。"}
    (tmp_path / "catalog" / "01_demo.json").write_text(json.dumps({"cells": {"m1": entry}}), encoding="utf-8")
    built = ZH.build_notebook(path)
    assert "".join(built["cells"][0]["source"]) == "你好 [下一个](02_next.ipynb) 和 ![图](../figures/x.svg)。"
    assert built["cells"][1]["source"] == "x = 1"
    path.write_text(path.read_text().replace("Hello", "Hi"), encoding="utf-8")  # the English cell changes
    with pytest.raises(ZH.OutOfStep, match=r"01_demo.ipynb cell m1: the English cell changed .* run `python scripts/build_zh.py`"):
        ZH.build_notebook(path)
    (tmp_path / "catalog" / "01_demo.json").write_text(json.dumps({"cells": {}}), encoding="utf-8")
    with pytest.raises(ZH.OutOfStep, match="cell m1: no translation"):
        ZH.build_notebook(path)


def test_a_hand_edited_zh_notebook_is_named_with_its_cell():
    built = ZH.dumps({"cells": [{"id": "a1", "source": "x"}, {"id": "b2", "source": "y"}], "metadata": {}})
    edited = built.replace('"y"', '"y "')
    assert ZH.first_difference(edited, built) == "cell b2"
    assert ZH.first_difference(built.replace('"metadata": {}', '"metadata": {"k": 1}'), built) == "metadata"
    assert ZH.first_difference(built[:-5], built) == "(not valid JSON)"
    shorter = ZH.dumps({"cells": [{"id": "a1", "source": "x"}], "metadata": {}})
    assert ZH.first_difference(shorter, built) == "cell b2"
    assert ZH.first_difference(built, shorter) == "cell b2 (extra)"
    assert ZH.first_difference(built.replace("\n", "\r\n"), built) == "layout"


PUNCT = "：。，；！？、"


def broken_bold(markdown: str) -> list[str]:
    """Bold spans (``**`` paired in order, code left out) whose text ends in full-width punctuation while a
    character other than a space or more punctuation follows: CommonMark does not close those."""
    import re

    text = re.sub(r"`[^`\n]*`", "c", markdown)
    marks = [m.start() for m in re.finditer(r"\*\*", text)]
    bad = []
    for open_at, close_at in zip(marks[::2], marks[1::2]):
        inner, after = text[open_at + 2:close_at], text[close_at + 2:close_at + 3]
        if inner and inner[-1] in PUNCT and after and not (after.isspace() or after in PUNCT + "）)*"):
            bad.append(f"**{inner}**{after}")
    return bad


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_bold_renders_in_chinese(path):
    """CommonMark closes ``**`` after full-width punctuation only before a space or more punctuation:
    ``**修复：**文字`` shows its asterisks, ``**修复**：文字`` is bold. Move the mark outside the bold."""
    bad = [f"cell {c['id']}: {span}" for c in json.loads((ZH.ZH / path.name).read_text(encoding="utf-8"))["cells"]
           if c["cell_type"] == "markdown" for span in broken_bold("".join(c["source"]))]
    assert not bad, f"{path.name}: bold that does not close:\n" + "\n".join(bad)


def test_bold_renders_in_the_chinese_readme():
    text = (ROOT / "README.zh-CN.md").read_text(encoding="utf-8")
    assert not broken_bold(text), f"README.zh-CN.md: bold that does not close: {broken_bold(text)}"


def test_the_bold_check_can_fail():
    assert broken_bold("**修复：**先做这个。") == ["**修复：**先"]
    assert broken_bold("**修复**：先做这个。**全归约**（all-reduce）") == []


def test_section_links_follow_the_zh_headings():
    found = {p.name: {ZH.heading_anchor(h) for c in json.loads(p.read_text(encoding="utf-8"))["cells"]
                      if c["cell_type"] == "markdown" for h in ZH.HEADING.findall("".join(c["source"]))}
             for p in sorted(ZH.ZH.glob("*.ipynb"))}
    broken = []
    for name, cells in ((p.name, json.loads(p.read_text(encoding="utf-8"))["cells"]) for p in sorted(ZH.ZH.glob("*.ipynb"))):
        for c in cells:
            for page, anchor in __import__("re").findall(r"\]\((\d\d_[a-z0-9_]+\.ipynb)?#([^)\s]+)\)", "".join(c["source"])):
                if anchor not in found.get(page or name, set()):
                    broken.append(f"{name} cell {c['id']}: #{anchor}")
    assert not broken, "links to sections that the zh notebooks do not have:\n" + "\n".join(broken)
