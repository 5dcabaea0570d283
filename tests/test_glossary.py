"""GLOSSARY.md, English and 中文 (each meaning in both): every term a notebook defines (in bold) is there, and each notebook links it.

A term is defined where a notebook writes it in **bold**. A few bold words are labels, not terms
(``**You will learn:**``, ``**Fix:**``, ``**Verdict: ...**``): bold text ending in a colon, or starting
with one of LABELS, is a label. Everything else bold must be a glossary term (or one of its variants,
singular or plural), and the first markdown cell of a notebook that bolds a glossary term links GLOSSARY.md.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
GLOSSARY = ROOT / "GLOSSARY.md"
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
LABELS = ("verdict", "fix", "you will learn", "runs in", "answer", "note", "step ", "why", "rule")
CJK = re.compile(r"[\u4e00-\u9fff]")
BOLD = re.compile(r"\*\*([^*\n]+?)\*\*")


def glossary_rows() -> list[dict]:
    """The glossary's table rows: terms (with variants), Chinese, meaning, meaning in Chinese, first notebook."""
    rows = []
    for line in GLOSSARY.read_text(encoding="utf-8").splitlines():
        if not line.startswith("| <a id="):
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        assert len(cells) == 5, f"a glossary row needs 5 cells (Term | 中文 | Meaning | 含义 | First in): {line}"
        term, zh, meaning, meaning_zh, first = cells
        rows.append({"terms": [t.lower() for t in BOLD.findall(term)], "zh": zh, "meaning": meaning,
                     "meaning_zh": meaning_zh, "first": first})
    return rows


def _forms(term: str) -> set[str]:
    """A term and the plural or singular forms a sentence may use."""
    t = term.lower().strip().strip("`")
    forms = {t, t + "s", t + "es"}
    if t.endswith("s"):
        forms.add(t[:-1])
    if t.endswith("es"):
        forms.add(t[:-2])
    if t.endswith("ies"):
        forms.add(t[:-3] + "y")
    if t.endswith("y"):
        forms.add(t[:-1] + "ies")
    return forms


def known_terms() -> set[str]:
    return {form for row in glossary_rows() for term in row["terms"] for form in _forms(term)}


def is_label(bold: str) -> bool:
    text = bold.strip().lower()
    return text.endswith(":") or text.startswith(LABELS)


def defined_terms(markdown: str) -> list[str]:
    """The bold terms of a markdown cell (labels left out; headings are not definitions)."""
    body = "\n".join(line for line in markdown.splitlines() if not line.lstrip().startswith("#"))
    return [b.strip() for b in BOLD.findall(body) if not is_label(b)]


def _markdown_cells(path: Path) -> list[tuple[int, str]]:
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    return [(i, "".join(c["source"])) for i, c in enumerate(cells) if c["cell_type"] == "markdown"]


def test_the_glossary_has_enough_terms_each_with_chinese_and_one_line():
    rows = glossary_rows()
    assert len(rows) >= 80, f"{len(rows)} terms: the notebooks define more"
    for row in rows:
        assert row["terms"] and CJK.search(row["zh"]), row
        assert 3 <= len(row["meaning"].split()) <= 40 and "\n" not in row["meaning"], row
        assert CJK.search(row["meaning_zh"]) and "\n" not in row["meaning_zh"], row
        assert row["meaning_zh"] != row["meaning"] and not CJK.search(row["meaning"]), row
        assert re.match(r"^\[\d\d\]\(notebooks/\d\d_\w+\.ipynb\)$", row["first"]), row
        assert (ROOT / re.search(r"\((.+)\)", row["first"]).group(1)).is_file(), row


def test_the_table_header_has_the_chinese_meaning_column():
    lines = GLOSSARY.read_text(encoding="utf-8").splitlines()
    assert "| Term | 中文 | Meaning | 含义 | First in |" in lines
    assert "|---|---|---|---|---|" in lines


def test_no_term_is_listed_twice():
    seen: dict[str, int] = {}
    for row in glossary_rows():
        for term in row["terms"]:
            seen[term] = seen.get(term, 0) + 1
    assert not [t for t, n in seen.items() if n > 1]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_every_bold_term_is_in_the_glossary(path):
    known = known_terms()
    missing = sorted({f"cell {i}: {t}" for i, md in _markdown_cells(path) for t in defined_terms(md)
                      if t.lower().strip("`") not in known})
    assert not missing, "add these to GLOSSARY.md (or write them without bold):\n" + "\n".join(missing)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_the_first_defined_term_links_the_glossary(path):
    known = known_terms()
    first = next(((i, md) for i, md in _markdown_cells(path)
                  if any(t.lower().strip("`") in known for t in defined_terms(md))), None)
    assert first is not None, f"{path.name} defines no glossary term"
    assert "GLOSSARY.md" in first[1], f"{path.name} cell {first[0]}: link ../GLOSSARY.md at the first defined term"


def test_labels_and_forms():
    assert is_label("Fix:") and is_label("Verdict: wrong as general advice.") and not is_label("all-reduce")
    assert "ranks" in _forms("rank") and "batch" in _forms("batches") and "strategies" in _forms("strategy")
    assert defined_terms("## **Heading**\nA **shard** is a slice. **Fix:** do it.") == ["shard"]
