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


def _broken_paths(folder: Path) -> list[str]:
    broken = []
    for path in sorted(folder.glob("*.ipynb")):
        for cell in _cells(path):
            text = source(cell)
            targets = re.findall(r"\]\(([^)\s#]+)", text) if cell["cell_type"] == "markdown" \
                else student.CODE_PATH.findall(text)
            broken += [f"{path.name}: {t}" for t in targets if not re.match(r"[a-z]+:", t) and not (folder / t).is_file()]
    return broken


def test_the_chinese_edition_goes_into_the_student_edition(tmp_path):
    """Built from the repository's own notebooks/ (zh/ included): every zh notebook is there, its paths
    resolve from zh/ (its code is the English code, so a file the code names is copied where that resolves),
    and it holds the same cleared exercises as its English twin, with no solution code."""
    student.build(ROOT / "notebooks", tmp_path / "student")
    out = tmp_path / "student" / "notebooks"
    zh_names = sorted(p.name for p in (ROOT / "notebooks" / "zh").glob("*.ipynb"))
    assert zh_names and sorted(p.name for p in (out / "zh").glob("*.ipynb")) == zh_names
    assert _broken_paths(out / "zh") == [] and _broken_paths(out) == []
    for name in zh_names:
        en_code = [source(c) for c in _cells(out / name) if c["cell_type"] == "code"]
        zh_code = [source(c) for c in _cells(out / "zh" / name) if c["cell_type"] == "code"]
        assert zh_code == en_code, f"zh/{name}: its code cells differ from the English student notebook's"
        cells = _cells(ROOT / "notebooks" / name)
        solutions = {source(c) for c in cells if student.SOLUTION in tags(c)}
        solutions -= {source(c) for c in cells if student.SOLUTION not in tags(c)}  # a check run twice stays
        assert solutions and not solutions & set(zh_code), f"zh/{name}: a solution cell is in the student edition"


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
@pytest.mark.parametrize("name", ["02_detecting_devices.ipynb", "04_data_parallel.ipynb"])
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
             "source": "from gpulab import bench\nbench.parse_sizes('3')"},
            {"cell_type": "code", "id": "a2", "metadata": {}, "execution_count": 2, "outputs": [],
             "source": "from gpulab.exercises.quiz import check, quiz\ncheck('04', 1, 'a')\nquiz('04')"},
        ]

    src = _one_notebook(tmp_path, "04_data_parallel.ipynb", plain)
    student.build(src, tmp_path / "out")
    cells = _cells(tmp_path / "out" / "notebooks" / "04_data_parallel.ipynb")
    assert [c.get("id") for c in cells] == [cells[0].get("id"), student.HEADER_ID, "a1", "a2"]
    assert student.CHECK_CALL.search("check_replica_sizes(answer, 10, 4)")


# ---- the laptop route: the edition is a course folder of its own ---------------------------------------


def test_laptop_edition_holds_what_a_learner_needs_and_installs_its_wheel(tagged, tmp_path):
    import subprocess
    import sys

    wheel = tmp_path / "dist" / "gpulab-0.1.0-py3-none-any.whl"
    wheel.parent.mkdir()
    wheel.write_bytes(b"not a real wheel")
    course = load_course()
    extra = tuple(ROOT / n for n in course.STUDENT_FILES) + (wheel,)
    out = tmp_path / "student"
    student.build(tagged, out, extra)
    names = {p.name for p in out.iterdir()}
    assert names - {"scripts", "GLOSSARY.md"} == {".student-edition", "README.md", "notebooks", "course.py",
                                                  "constraints.txt", "TROUBLESHOOTING.md", "TROUBLESHOOTING.zh-CN.md",
                                                  "LICENSE", wheel.name}
    assert "GLOSSARY.md" in names  # files the notebooks link: scripts/ they cite, the glossary
    readme = (out / "README.md").read_text(encoding="utf-8")
    for words in ("python3 course.py lab", "py course.py lab", "lab --zh", "TROUBLESHOOTING.md"):
        assert words in readme, words
    done = subprocess.run([sys.executable, str(out / "course.py"), "lab", "--dry-run"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=60)
    lines = done.stdout.strip().splitlines()
    assert done.returncode == 0 and lines[2].endswith(f"-m pip install --quiet -c constraints.txt {wheel.name}")
    assert lines[-1].endswith("-m jupyter lab --ServerApp.root_dir=. notebooks/01_why_gpus.ipynb")
    assert (out / "notebooks" / "01_why_gpus.ipynb").is_file()
    with pytest.raises(student.BuildError, match="is not a file"):
        student.build(tagged, tmp_path / "other", (tmp_path / "missing.whl",))


def test_the_wheel_is_the_installed_version_or_a_clear_error(tmp_path):
    from importlib import metadata

    try:
        version = metadata.version("gpulab")
    except metadata.PackageNotFoundError:  # a checkout on PYTHONPATH (a GPU box): the clear error
        with pytest.raises(student.BuildError, match="gpulab is not installed in this Python"):
            student.course_wheel(tmp_path)
        return
    with pytest.raises(student.BuildError, match="python course.py wheel"):
        student.course_wheel(tmp_path)
    wheel = tmp_path / f"gpulab-{version}-py3-none-any.whl"
    wheel.write_bytes(b"")
    (tmp_path / "gpulab-0.0.1-py3-none-any.whl").write_bytes(b"")
    assert student.course_wheel(tmp_path) == wheel


# ---- the answer key ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def key(tagged, tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("key") / "answers.md"
    assert student.main(["--src", str(tagged), "--answers", str(path), "--answers-only"]) == 0
    return path.read_text(encoding="utf-8")


def test_answer_key_has_every_notebook_question_and_solution(tagged, key):
    from gpulab.exercises.quiz import questions

    assert key.startswith("# Answer key")
    assert "not found automatically" not in key
    for path in sorted(tagged.glob("*.ipynb")):
        cells = _cells(path)
        assert f"## {source(cells[0]).splitlines()[0].lstrip('# ')}" in key, path.name
        for cell in cells:
            if cell["cell_type"] == "code" and student.SOLUTION in tags(cell):
                assert source(cell).rstrip() in key, f"{path.name}: a solution cell is missing from the key"
        for q in questions(path.name[:2]):
            assert q.prompt in key
            if q.options:
                right = q.options[q.letters.index(q.answer)]
                assert f"**Answer: {q.answer})** {right.text}" in key


def test_every_value_question_is_answered_with_what_its_check_accepts():
    from gpulab.course.answer_key import solve
    from gpulab.exercises.questions import QUESTIONS

    for notebook, found in QUESTIONS.items():
        for i, q in enumerate(found, start=1):
            answer = solve(q)
            assert answer is not None and q.check(answer).ok, (notebook, i, answer)


def test_the_key_follows_the_questions_it_is_generated_from(monkeypatch):
    from gpulab.exercises import correct, questions, wrong
    from gpulab.course import answer_key
    from gpulab.exercises import Option, Question

    hidden = Question("Which number, between 1 and 5000, times 3 gives 7281?",
                      grade=lambda a: correct("2427") if a == 7281 // 3 else wrong("no"), example="7")
    listed = Question("Split 7 rows over 3 GPUs.", example="[1, 2]",
                      grade=lambda a: correct("chunks") if list(a) == [3, 3, 1] else wrong("no"))
    hopeless = Question("Say the secret word.", grade=lambda a: correct("yes") if a == "xyzzy" else wrong("no"))
    choice = Question("Pick b.", (Option("not me", "no"), Option("me", "that one")), answer="b")
    monkeypatch.setitem(questions.QUESTIONS, "04", (hidden, listed, hopeless, choice))
    lines = "\n".join(answer_key.notebook_lines("04"))
    assert "**Answer: 2427** (2427.)" in lines  # a number the check compares with, not one it says
    assert "**Answer: [3, 3, 1]**" in lines
    assert "**Answer: not found automatically.**" in lines
    assert "**Answer: b)** me That one." in lines and "- a) not me *Wrong:* no." in lines


def test_the_key_is_never_written_into_the_student_edition(tagged, built, tmp_path):
    with pytest.raises(student.BuildError, match="inside the student edition"):
        student.write_answers(tagged, built.parent / "answers.md", built.parent)
    assert not (built.parent / "answers.md").exists()


def test_answers_only_needs_a_file(capsys):
    with pytest.raises(SystemExit) as stop:
        student.main(["--answers-only"])
    assert stop.value.code == 2 and "--answers-only needs --answers FILE" in capsys.readouterr().err


# ---- no exercise can be answered with a function the notebook hands out ----------------------------------


def _imported_callables(code: str) -> dict[str, object]:
    """``name -> object`` of every gpulab function a notebook's code can call: imported, or as ``module.name``."""
    import ast
    import importlib
    import inspect

    tree, found, modules = ast.parse(code), {}, {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("gpulab"):
            for alias in node.names:
                try:
                    obj = importlib.import_module(f"{node.module}.{alias.name}")
                except ImportError:
                    obj = getattr(importlib.import_module(node.module), alias.name)
                (modules if inspect.ismodule(obj) else found)[alias.asname or alias.name] = obj
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("gpulab"):
                    modules[alias.asname or alias.name] = importlib.import_module(alias.name)
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in modules:
            obj = getattr(modules[node.value.id], node.attr, None)
            if obj is not None:
                found[f"{node.value.id}.{node.attr}"] = obj
    return {name: obj for name, obj in found.items() if inspect.isfunction(obj)
            and not obj.__module__.startswith(("gpulab.distributed", "gpulab.course.cli"))  # those start processes
            and not obj.__name__.startswith("check_")}


def _function_checks(cells: list[dict]) -> list[tuple[object, int]]:
    """``(check, number of parameters of the learner's function)`` for each check called with a stub function."""
    import ast
    import importlib

    stubs = {}
    for cell in cells:
        if student.EXERCISE in tags(cell) and cell["cell_type"] == "code":
            for node in ast.walk(ast.parse(source(cell))):
                if isinstance(node, ast.FunctionDef):
                    stubs[node.name] = len(node.args.args)
    checks = []
    for cell in cells:
        if student.EXERCISE not in tags(cell) or cell["cell_type"] != "code":
            continue
        for node in ast.walk(ast.parse(source(cell))):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id.startswith("check_")
                    and len(node.args) == 1 and not node.keywords and isinstance(node.args[0], ast.Name)
                    and node.args[0].id in stubs):
                module = next(m for m in sorted((ROOT / "gpulab" / "exercises").glob("*.py"))
                              if f"def {node.func.id}(" in m.read_text(encoding="utf-8"))
                check = getattr(importlib.import_module(f"gpulab.exercises.{module.stem}"), node.func.id)
                checks.append((check, stubs[node.args[0].id]))
    return checks


def _leaks(cells: list[dict]) -> list[str]:
    """The functions the notebook's own code can reach that pass one of its function exercises."""
    import inspect

    code = "\n".join(source(c) for c in cells if c["cell_type"] == "code" and student.SOLUTION not in tags(c))
    found = []
    for check, arity in _function_checks(cells):
        for name, fn in _imported_callables(code).items():
            try:
                inspect.signature(fn).bind(*range(arity))
            except (TypeError, ValueError):
                continue

            def guarded(*args, _fn=fn):
                try:
                    return _fn(*args)
                except BaseException as exc:  # noqa: BLE001 - a check catches Exception only
                    raise RuntimeError(type(exc).__name__) from None

            if check(guarded).ok:
                found.append(f"{check.__name__}({name}) passes")
    return found


def test_no_notebook_hands_out_the_function_its_check_compares_against(tagged):
    checked = set()
    for path in sorted(tagged.glob("*.ipynb")):
        cells = _cells(path)
        checked |= {check.__name__ for check, _ in _function_checks(cells)}
        assert _leaks(cells) == [], f"{path.name}: the exercise can be answered by calling what the notebook imports"
    assert {"check_matmul_flops", "check_rows_per_gpu", "check_device_picker"} <= checked


def test_an_imported_reference_function_is_caught(tagged):
    cells = _cells(tagged / "04_data_parallel.ipynb")
    leaky = [{"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": 1,
              "source": "from gpulab.data_parallel import replica_batch_sizes\nfrom gpulab import bench"}] + cells
    assert "check_rows_per_gpu(replica_batch_sizes) passes" in _leaks(leaky)
    one = _cells(tagged / "01_why_gpus.ipynb")
    leaky = one + [{"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": 1,
                    "source": "print(bench.matmul_flops(4))"}]
    assert "check_matmul_flops(bench.matmul_flops) passes" in _leaks(leaky)


def load_course():
    """course.py as a module (it is a script at the repository's root)."""
    import importlib.util

    import sys

    spec = importlib.util.spec_from_file_location("gpulab_course", ROOT / "course.py")
    module = sys.modules.setdefault("gpulab_course", importlib.util.module_from_spec(spec))
    spec.loader.exec_module(module)
    return module


def test_the_chinese_edition_has_its_own_key(tmp_path):
    """answers.zh-CN.md beside answers.md: the zh notebooks' titles and every question in Chinese."""
    from gpulab.exercises import chinese
    from gpulab.exercises.questions import QUESTIONS

    student.write_answers(ROOT / "notebooks", tmp_path / "answers.md")
    key = (tmp_path / "answers.zh-CN.md").read_text(encoding="utf-8")
    assert key.startswith("# 参考答案") and "未能自动找到" not in key
    for path in sorted((ROOT / "notebooks" / "zh").glob("*.ipynb")):
        assert f"## {source(_cells(path)[0]).splitlines()[0].lstrip('# ')}" in key, path.name
    for notebook, found in QUESTIONS.items():
        for i, q in enumerate(found, start=1):
            zh = chinese.in_chinese(notebook, i, q)
            assert zh is not q and f"{i}. {zh.prompt}" in key, (notebook, i)
            if q.options:
                assert f"**答案：{q.answer})** {zh.options[q.letters.index(q.answer)].text}" in key, (notebook, i)
