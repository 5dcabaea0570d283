"""scripts/time_sections.py: sections, run times from cell timestamps, and TEACHING.md's block kept in step."""
from __future__ import annotations

import json
from pathlib import Path

import nbformat
import pytest
from scripts_loader import load_script

ROOT = Path(__file__).resolve().parent.parent
ts = load_script("time_sections")


def _code(text: str, seconds: float | None, tags=()) -> dict:
    meta = {"tags": list(tags)}
    if seconds is not None:
        meta["execution"] = {"iopub.status.busy": "2026-01-01T10:00:00.000000Z",
                             "shell.execute_reply": f"2026-01-01T10:00:{seconds:09.6f}Z"}
    return {"cell_type": "code", "source": text, "metadata": meta, "outputs": [], "execution_count": 1}


def _md(text: str) -> dict:
    return {"cell_type": "markdown", "source": text, "metadata": {}}


CELLS = [
    _md("# 99 · Test\nTwo words"),
    _code("import os", 0.5),
    _md("## First part\none two three"),
    _code("x = 1", 1.25),
    _code("print(check_answer(x))", 0.25, tags=["exercise"]),
    _md("closing words\n## Second part\nfour five"),
    _code("quiz('99')", 2.0, tags=["nbval-ignore-output"]),
]


def test_sections_split_at_level_two_headings_anywhere_in_a_cell():
    found = ts.sections("99", CELLS)
    assert [s.title for s in found] == ["Introduction", "First part", "Second part"]
    intro, first, second = found
    assert (intro.prose, intro.code, intro.run_s) == (6, 2, 0.5)
    assert (first.prose, first.code, first.run_s, first.exercise, first.quiz) == (8, 4, 1.5, True, False)
    assert (second.prose, second.code, second.run_s, second.exercise, second.quiz) == (5, 1, 2.0, False, True)
    assert first.read_min == pytest.approx(8 / ts.READ_WPM + 4 / ts.CODE_WPM)
    assert first.minutes == pytest.approx(first.read_min + 1.5 / 60 + ts.EXERCISE_MIN)
    assert second.extra_min == ts.QUIZ_MIN


def test_untimed_cells_are_an_error_unless_timing_is_not_asked():
    cells = CELLS + [_code("y = 2", None)]
    with pytest.raises(ValueError, match="no execution timestamps"):
        ts.sections("99", cells)
    assert all(s.run_s is None for s in ts.sections("99", cells, timed=False))


def _doc(tmp_path: Path, block: str) -> Path:
    doc = tmp_path / "GUIDE.md"
    doc.write_text(f"# Guide\n\nBefore.\n\n{block}\n\nAfter.\n", encoding="utf-8")
    return doc


@pytest.fixture
def one_notebook(tmp_path, monkeypatch):
    path = tmp_path / "99_test.ipynb"
    path.write_text(json.dumps({"cells": CELLS, "metadata": {}, "nbformat": 4, "nbformat_minor": 5}))
    monkeypatch.setattr(ts, "PLAN", {"core": {"99": {"Second": ts.AFTER}}, "full": {"99": {"First": ts.DEMO}}})
    monkeypatch.setattr(ts, "SCOPE", {})
    return path


def test_a_plan_leaves_out_notebooks_outside_its_scope(one_notebook, monkeypatch):
    monkeypatch.setattr(ts, "SCOPE", {"core": ("01", "07")})
    block = ts.render(ts.load([one_notebook], timed=True), "Measured here.")
    assert "| 99 | - | 7 |" in block  # the core plan has no notebook 99; the full plan teaches it
    assert "| 99 | First part | 8 / 4 | 1.5 | 0.1 | 5 | - | demo, 5 min |" in block
    assert "| **total** (target: 120 / 240) | **20** | **37** |" in block  # core: the break and the introduction
    assert "| slack: questions and set-up trouble | 100 | 203 |" in block


def test_block_round_trip_and_check(one_notebook, tmp_path):
    block = ts.render(ts.load([one_notebook], timed=True), "Measured here.")
    doc = _doc(tmp_path, block)
    measured, runs = ts.parse_block(doc.read_text())
    assert measured == "Measured here."
    assert runs == {("99", "Introduction"): 0.5, ("99", "First part"): 1.5, ("99", "Second part"): 2.0}
    assert ts.check(doc, [one_notebook]) == ""
    assert "| 99 | First part | 8 / 4 | 1.5 | 0.1 | 5 | run, 5 min | demo, 5 min |" in block
    assert "| 99 | Second part | 5 / 1 | 2.0 | 0.0 | 2 | after class | run, 2 min |" in block

    doc.write_text(doc.read_text().replace("| 1.5 |", "| 600.0 |"))  # a run time edited by hand: its minutes disagree
    assert "out of step" in ts.check(doc, [one_notebook])

    cells = CELLS[:-2] + [_md("## Renamed part\nfour five"), CELLS[-1]]
    one_notebook.write_text(json.dumps({"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5}))
    assert "sections changed" in ts.check(_doc(tmp_path, block), [one_notebook])


def test_placeholders_say_tbd_and_stay_in_step(one_notebook, tmp_path):
    block = ts.render(ts.load([one_notebook], timed=False), ts.UNMEASURED)
    assert "| **total** (target: 120 / 240) | **TBD** | **TBD** |" in block
    assert "| slack: questions and set-up trouble | TBD | TBD |" in block
    assert ts.check(_doc(tmp_path, block), [one_notebook]) == ""


def test_write_replaces_only_the_block(one_notebook, tmp_path):
    doc = _doc(tmp_path, f"{ts.START}\nold\n{ts.END}")
    assert ts.main([str(one_notebook), "--placeholders", "--write", str(doc)]) == 0
    text = doc.read_text()
    assert text.startswith("# Guide\n\nBefore.\n\n<!-- timings:start -->\nNot measured yet")
    assert text.endswith("<!-- timings:end -->\n\nAfter.\n") and "old" not in text
    assert sorted(p.name for p in tmp_path.iterdir()) == ["99_test.ipynb", "GUIDE.md"]  # no temporary left


def test_a_plan_naming_a_missing_section_is_an_error(one_notebook, monkeypatch, capsys):
    monkeypatch.setattr(ts, "PLAN", {"core": {"99": {"Third": ts.AFTER}}, "full": {}})
    assert ts.main([str(one_notebook), "--placeholders"]) == 2
    assert "names 'Third', which is no section title of 99" in capsys.readouterr().err


def test_teaching_guide_block_is_in_step_with_the_notebooks():
    problem = ts.check(ROOT / "TEACHING.md", sorted((ROOT / "notebooks").glob("*.ipynb")))
    assert problem == "", problem


def test_every_class_plan_fits_its_target_with_time_left_for_questions():
    import re

    block = (ROOT / "TEACHING.md").read_text(encoding="utf-8")
    targets = re.search(r"\| \*\*total\*\* \(target: ([\d / ]+)\) \|", block).group(1).split(" / ")
    slack = re.search(r"\| slack: questions and set-up trouble \|(.*)\|", block).group(1).split("|")
    assert len(slack) == len(targets) == len(ts.TARGET_MIN)
    for plan, left in zip(ts.TARGET_MIN, slack):
        assert int(left) >= 5, f"the {plan} plan leaves {left.strip()} minutes for questions: trim it or raise its target"


@pytest.mark.slow
def test_measure_times_each_cell(tmp_path):
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell("# 98 · Timing"),
                nbformat.v4.new_markdown_cell("## Sleep"), nbformat.v4.new_code_cell("import time\ntime.sleep(0.4)")]
    path = tmp_path / "98_timing.ipynb"
    nbformat.write(nb, path)
    found = ts.sections("98", ts.measure(path, timeout=60))
    assert found[1].title == "Sleep" and 0.4 <= found[1].run_s < 5
