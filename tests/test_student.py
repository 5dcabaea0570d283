"""The student edition (scripts/student.py): no solutions, cleared exercises, working links, reproducible.

The fixture copies the notebooks into a temporary repository. A notebook that has no ``solution`` tag
yet is tagged there the way the sources are meant to be tagged: the "Solution (click to expand)"
heading, the collapsed code under it and a second run of the check after it are ``solution``; the code
cells between the exercise's text and that heading (stub and check) are ``exercise``. Notebooks that are
already tagged are used as they are.
"""
from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
from scripts_loader import load_script

ROOT = Path(__file__).resolve().parent.parent


student = load_script("student")
source, tags = student.source, student.tags


def _add_tag(cell: dict, tag: str) -> None:
    cell.setdefault("metadata", {}).setdefault("tags", []).append(tag)


def tag_exercises(cells: list[dict]) -> None:
    """Tag an untagged notebook's exercise and solution cells (see the module docstring)."""
    if any(student.SOLUTION in tags(c) for c in cells):
        return
    for s, cell in enumerate(cells):
        if cell["cell_type"] != "markdown" or source(cell).strip() != "Solution (click to expand)":
            continue
        _add_tag(cell, student.SOLUTION)
        j = s + 1
        while j < len(cells) and cells[j].get("metadata", {}).get("jupyter", {}).get("source_hidden"):
            _add_tag(cells[j], student.SOLUTION)
            j += 1
        if j < len(cells) and cells[j]["cell_type"] == "code" and student.CHECK_CALL.search(source(cells[j])):
            _add_tag(cells[j], student.SOLUTION)
        i = s - 1
        while i >= 0 and cells[i]["cell_type"] == "code":
            _add_tag(cells[i], student.EXERCISE)
            i -= 1


def _copy_repo(dest: Path) -> Path:
    """notebooks/ (tagged) and every file they refer to with ../, in a fresh folder; returns its notebooks/."""
    nbdir = dest / "notebooks"
    nbdir.mkdir(parents=True)
    for path in sorted((ROOT / "notebooks").glob("*.ipynb")):
        nb = json.loads(path.read_text(encoding="utf-8"))
        tag_exercises(nb["cells"])
        (nbdir / path.name).write_text(student.dumps(nb), encoding="utf-8")
        for ref in student.referenced_files(nb["cells"]):
            target = nbdir / ref
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(ROOT / "notebooks" / ref, target)
    return nbdir


@pytest.fixture(scope="module")
def tagged(tmp_path_factory) -> Path:
    return _copy_repo(tmp_path_factory.mktemp("repo"))


@pytest.fixture(scope="module")
def built(tagged, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("out") / "student"
    student.build(tagged, out)
    return out / "notebooks"


def _cells(path: Path) -> list[dict]:
    return json.loads(path.read_text(encoding="utf-8"))["cells"]


def _output_text(cell: dict) -> str:
    parts = []
    for out in cell.get("outputs", []):
        parts.append("".join(out.get("text", "")))
        parts.append("".join(out.get("data", {}).get("text/plain", "")))
    return "".join(parts)


def test_every_notebook_gets_a_student_edition(tagged, built):
    assert sorted(p.name for p in built.glob("*.ipynb")) == sorted(p.name for p in tagged.glob("*.ipynb"))
    assert (built.parent / student.MARKER).is_file()


def test_no_solution_source_and_exercises_cleared(tagged, built):
    for path in sorted(tagged.glob("*.ipynb")):
        src, out = _cells(path), _cells(built / path.name)
        kept = [c for c in src if student.SOLUTION not in tags(c)]
        solutions = [source(c) for c in src if student.SOLUTION in tags(c)]
        assert solutions, f"{path.name} has no solution cells to leave out"
        assert out[0] == kept[0], path.name  # the title cell, unchanged
        assert out[1]["metadata"]["tags"] == [student.HEADER_ID] and "Student edition" in source(out[1])
        body = out[:1] + out[2:]
        assert len(body) == len(kept), path.name
        allowed = {source(c) for c in kept}
        student_sources = {source(c) for c in body}
        for text in solutions:  # a second run of a check is the same text as the first: that one stays
            assert text not in student_sources or text in allowed, f"{path.name}: solution {text[:40]!r} leaked"
        for before, after in zip(kept, body):
            if student.EXERCISE in tags(before) and before["cell_type"] == "code":
                assert after["outputs"] == [] and after["execution_count"] is None, path.name
                assert "execution" not in after["metadata"]
                assert source(after) == source(before)
            else:
                assert after == before, f"{path.name}: a cell that is no exercise changed"
        assert not any("Correct:" in _output_text(c) for c in body), f"{path.name}: a solved check's verdict leaked"


def test_links_and_relative_paths_still_work(built):
    for path in sorted(built.glob("*.ipynb")):
        for cell in _cells(path):
            text = source(cell)
            targets = re.findall(r"\]\(([^)\s#]+)", text) if cell["cell_type"] == "markdown" \
                else student.CODE_PATH.findall(text)
            for target in targets:
                if re.match(r"[a-z]+:", target):
                    continue
                assert (built / target).is_file(), f"{path.name}: {target} does not resolve in the student edition"


def test_rebuild_is_byte_identical(tagged, built, tmp_path):
    again = tmp_path / "again"
    student.build(tagged, again)
    student.build(tagged, again)  # replacing an earlier build works too

    def files(folder: Path) -> dict[str, bytes]:
        return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}

    first, second = files(built.parent), files(again)
    assert first.keys() == second.keys()
    assert first == second
    assert not [p for p in tmp_path.iterdir() if p.name != "again"], "temporary build folders were left behind"


def _one_notebook(tmp_path: Path, name: str, edit) -> Path:
    src = tmp_path / "src" / "notebooks"
    src.mkdir(parents=True)
    nb = json.loads((ROOT / "notebooks" / name).read_text(encoding="utf-8"))
    edit(nb["cells"])
    (src / name).write_text(student.dumps(nb), encoding="utf-8")
    return src


def test_untagged_exercise_check_stops_the_build(tmp_path, capsys):
    def strip(cells):
        for c in cells:
            c.get("metadata", {}).pop("tags", None)

    src = _one_notebook(tmp_path, "04_data_parallel.ipynb", strip)
    out = tmp_path / "out"
    assert student.main(["--src", str(src), "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    cells = _cells(ROOT / "notebooks" / "04_data_parallel.ipynb")
    first = next(i for i, c in enumerate(cells) if c["cell_type"] == "code" and student.CHECK_CALL.search(source(c)))
    called = student.CHECK_CALL.search(source(cells[first])).group(1)
    assert err.startswith(f"error: 04_data_parallel.ipynb: cell {first} calls {called}()"), err
    assert "'solution'" in err
    assert not out.exists()


def test_exercise_without_solution_cell_stops_the_build(tmp_path):
    def no_solution(cells):
        tag_exercises(cells)
        cells[:] = [c for c in cells if student.SOLUTION not in tags(c)]

    src = _one_notebook(tmp_path, "04_data_parallel.ipynb", no_solution)
    with pytest.raises(student.BuildError, match=r"is an exercise but no cell is tagged 'solution'"):
        student.build(src, tmp_path / "out")


def test_collapsed_cell_without_solution_tag_stops_the_build(tmp_path):
    def untag_hidden(cells):
        tag_exercises(cells)
        for c in cells:
            if c.get("metadata", {}).get("jupyter", {}).get("source_hidden"):
                c["metadata"]["tags"] = []

    src = _one_notebook(tmp_path, "04_data_parallel.ipynb", untag_hidden)
    with pytest.raises(student.BuildError, match=r"collapsed \(source_hidden\) but not tagged 'solution'"):
        student.build(src, tmp_path / "out")


def test_both_tags_on_one_cell_stops_the_build(tmp_path):
    def both(cells):
        tag_exercises(cells)
        _add_tag(next(c for c in cells if student.EXERCISE in tags(c)), student.SOLUTION)

    src = _one_notebook(tmp_path, "04_data_parallel.ipynb", both)
    with pytest.raises(student.BuildError, match="tagged both"):
        student.build(src, tmp_path / "out")


def test_never_replaces_a_folder_it_did_not_build(tagged, tmp_path):
    out = tmp_path / "notes"
    out.mkdir()
    (out / "mine.txt").write_text("keep me")
    with pytest.raises(student.BuildError, match="not an earlier student build"):
        student.build(tagged, out)
    assert (out / "mine.txt").read_text() == "keep me"


@pytest.mark.slow
@pytest.mark.parametrize("name", ["03_single_device.ipynb", "04_data_parallel.ipynb"])
def test_student_edition_runs_and_checks_say_not_yet(built, name):
    nb, problem = student.run_notebook(built / name, timeout=120)
    assert problem == ""
    checks = [c for c in nb.cells if c.cell_type == "code" and student.EXERCISE in tags(c)
              and student.CHECK_CALL.search(source(c))]
    assert checks
    for cell in checks:
        assert "Not yet:" in _output_text(cell), source(cell)
        assert not any(o.get("output_type") == "error" for o in cell.outputs)


@pytest.mark.slow
def test_a_failing_student_notebook_is_reported_in_one_plain_line(tmp_path):
    import nbformat

    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell("# 98 · Broken"), nbformat.v4.new_code_cell("1 / 0")]
    path = tmp_path / "98_broken.ipynb"
    nbformat.write(nb, path)
    _, problem = student.run_notebook(path, timeout=60)
    assert problem == "ZeroDivisionError: division by zero"


def test_other_check_functions_and_the_quiz_are_no_exercise(tmp_path):
    def plain(cells):
        cells[:] = cells[:1] + [
            {"cell_type": "code", "id": "a1", "metadata": {}, "execution_count": 1, "outputs": [],
             "source": "from gpulab import bench\nbench.check_size(3)"},
            {"cell_type": "code", "id": "a2", "metadata": {}, "execution_count": 2, "outputs": [],
             "source": "from gpulab.exercises.quiz import check, quiz\ncheck('04', 1, 'a')\nquiz('04')"},
        ]

    src = _one_notebook(tmp_path, "04_data_parallel.ipynb", plain)
    student.build(src, tmp_path / "out")
    cells = _cells(tmp_path / "out" / "notebooks" / "04_data_parallel.ipynb")
    assert [c.get("id") for c in cells] == [cells[0].get("id"), student.HEADER_ID, "a1", "a2"]
    assert student.CHECK_CALL.search("check_replica_sizes(answer, 10, 4)")
