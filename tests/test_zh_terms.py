"""The Chinese edition renders each unified term one way (notebooks/zh/catalog/*.json).

A reviewer found the same English term translated several ways (epoch as 轮次, 轮 and "epoch"; 拷贝 beside
复制; worker as 工作程序 beside rank 程序, ...). TERMS lists, for each unified term, its one rendering and
the variants that must not come back. Only prose is checked: code spans, fenced code and link targets are
left out, so `num_epochs`, `all_gather_into_tensor` or a link to a file may say what they say. An English
name may stand in the parenthesis right after its Chinese term at first use, as in 轮次（epoch） or
**全收集**（all-gather）. Each failure names the notebook, the cell id and the variant found; fix the
catalogue and run `python scripts/build_zh.py`.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CATALOGS = sorted((ROOT / "notebooks" / "zh" / "catalog").glob("[0-9][0-9]_*.json"))
CODE_OR_TARGET = re.compile(r"```.*?```|`[^`\n]*`|\]\([^)\s]*\)", re.S)


def after_term(zh: str, english: str) -> str:
    """``english`` (a regex) when it is not in the parenthesis that follows ``zh``, bold or not."""
    return rf"(?<!{zh}（)(?<!{zh}\*\*（)(?<![A-Za-z_-])(?:{english})(?![A-Za-z_-])"


# canonical rendering -> forbidden variants (regexes; each is reported by the text it matched)
TERMS: dict[str, list[str]] = {
    "轮次（epoch） at first use, then 轮次": [after_term("轮次", r"[Ee]pochs?")],
    "全收集（all-gather）": [after_term("全收集", r"all-gather|all_gather|allgather")],
    "归约散射（reduce-scatter）": [after_term("归约散射", r"reduce-scatter|reduce_scatter")],
    "复制 (a copy of the model: 副本)": ["拷贝"],
    "rank 程序 (worker)": ["工作程序"],
    "时隙 (time slot)": ["时间槽"],
    "控件 (widget)": ["小部件"],
    "训练步 (training step)": ["训练步骤"],
    "未归一化分数（logits）": ["对数几率", "逻辑值", after_term("未归一化分数", r"logits?")],
}


def prose(markdown: str) -> str:
    """``markdown`` without code (fenced or inline) and without link targets; link texts stay."""
    return CODE_OR_TARGET.sub(" ", markdown)


def drifts(markdown: str) -> list[tuple[str, str]]:
    """(canonical term, variant found) for every forbidden variant in the prose of ``markdown``."""
    text = prose(markdown)
    return [(term, m.group(0)) for term, variants in TERMS.items()
            for variant in variants for m in re.finditer(variant, text)]


def catalogue_drifts(name: str, catalogue: dict) -> list[str]:
    """One line per drift in a catalogue's "zh" texts: notebook, cell id, variant, canonical term."""
    return [f"{name} cell {cell}: {found!r} (write {term})"
            for cell, entry in catalogue["cells"].items() for term, found in drifts(entry["zh"])]


def _load(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


def test_there_are_catalogues():
    assert len(CATALOGS) >= 15, [p.name for p in CATALOGS]


@pytest.mark.parametrize("path", CATALOGS, ids=lambda p: p.stem)
def test_each_term_has_one_rendering(path):
    bad = catalogue_drifts(_load(path)["notebook"], _load(path))
    assert not bad, "terms in another rendering (fix the catalogue, then run `python scripts/build_zh.py`):\n" \
        + "\n".join(bad)


@pytest.mark.parametrize("path", CATALOGS, ids=lambda p: p.stem)
def test_epoch_is_glossed_at_its_first_use(path):
    """A notebook's first 轮次 says what it stands for: 轮次（epoch）, bold or not (GLOSSARY.md)."""
    catalogue = _load(path)
    for cell, entry in catalogue["cells"].items():
        m = re.search(r"轮次(\*\*)?(（epoch)?", prose(entry["zh"]))
        if m:
            assert m.group(2), f"{catalogue['notebook']} cell {cell}: the first 轮次 is not written 轮次（epoch）"
            return


PLANTED = [  # a drift, and the variant the check must report
    ("每个 epoch 4 步", "epoch"),
    ("在每一轮（epoch）开始时", "epoch"),
    ("一次 reduce-scatter 加一次 all-gather", "reduce-scatter"),
    ("把模型拷贝到每个 GPU", "拷贝"),
    ("本项目的工作程序", "工作程序"),
    ("一步持续 8 个时间槽", "时间槽"),
    ("没有小部件（widget）时", "小部件"),
    ("一个训练步骤", "训练步骤"),
    ("最大的对数几率", "对数几率"),
    ("填充的 logits", "logits"),
]


@pytest.mark.parametrize("drift, variant", PLANTED)
def test_a_planted_drift_fails_with_notebook_cell_and_variant(drift, variant):
    path = ROOT / "notebooks" / "zh" / "catalog" / "03_single_device.json"
    catalogue = _load(path)
    cell = next(iter(catalogue["cells"]))
    assert not catalogue_drifts("03_single_device.ipynb", catalogue)
    catalogue["cells"][cell]["zh"] += f"\n{drift}。"  # in memory: the file is not touched
    bad = catalogue_drifts("03_single_device.ipynb", catalogue)
    assert bad and all(line.startswith(f"03_single_device.ipynb cell {cell}: ") for line in bad), bad
    assert any(repr(variant) in line for line in bad), bad


def test_code_link_targets_and_first_use_glosses_are_allowed():
    allowed = ("`num_epochs` 与 `dist.all_gather(out, x)`；[文档](https://x.org/all-gather_拷贝.html)\n"
               "```python\nfor epoch in range(3):  # 拷贝\n```\n"
               "每个**轮次**（epoch，即一遍）；20 个轮次（epoch）；**全收集**（all-gather）；归约散射（reduce-scatter）；"
               "**未归一化分数**（logits）；全归约（all-reduce）")
    assert drifts(allowed) == []
    assert drifts("[每个 epoch](02_x.ipynb)") == [("轮次（epoch） at first use, then 轮次", "epoch")]  # link text is prose


def test_title_cells_say_a_cpu_only_laptop():
    """笔记本 alone is a Jupyter notebook in this edition: a machine is a 笔记本电脑."""
    bad = [p.stem for p in CATALOGS for entry in _load(p)["cells"].values()
           if re.search(r"CPU 笔记本(?!电脑)", prose(entry["zh"]))]
    assert not bad, f"write 在只有 CPU 的笔记本电脑上 in: {bad}"
