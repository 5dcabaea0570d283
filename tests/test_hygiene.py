"""Repository hygiene: layout, notebook order and shape, committed outputs, README index, CI entry.

Rules enforced here:
- The fixed layout exists and notebooks/ holds at least one notebook.
- Notebooks are named NN_topic.ipynb (lower-case words joined by `_`), NN consecutive from 01.
- Kernelspec `python3`, language python.
- Executed top to bottom: the code cells' execution counts are exactly 1..n. Cells tagged
  `skip-execution` are not run by `make notebooks` (no count, no output) and must also carry `nbval-skip`.
  No empty code cells.
- No machine paths (/tmp/, /work/, /root/, /home/, /opt/, /Users/, C:\\) in any output, tracebacks included.
- First cell: `# NN · Title` / `**You will learn:** ...` / `**Runs in:** about N s on a CPU laptop, ...`.
- Last cell is markdown ending with the navigation line to the previous/next existing notebooks, with
  their real titles (`python scripts/readme_index.py --nav` writes it).
- README's index block equals what scripts/readme_index.py generates.
- At least half of all code cells are compared by nbval (counted by scripts/nbreport.py).
- .ci/run starts with `make test`; every pytest run of course.py with `-n` uses `--dist loadfile`.
- README's quick start: the folder, then `lab` in its make, Windows and conda forms; `test` is for
  teachers and contributors; its plain commands are what `course.py test` runs.
- Every relative link of README.md, TEACHING.md and TROUBLESHOOTING.md reaches a file (and a heading).
- git tracks no virtualenv, checkpoints or caches.
"""
from __future__ import annotations

import importlib.util
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from scripts_loader import load_script

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
LAYOUT = [
    "notebooks", "gpulab", "tests", "binder", "environment.yml", "binder/environment.yml",
    "README.md", "pyproject.toml", "Makefile", ".ci/run", "constraints.txt", ".gitignore",
]
MACHINE_PATHS = ("/tmp/", "/work/", "/root/", "/home/", "/opt/", "/Users/", "C:\\")
JUNK = {".venv", ".ipynb_checkpoints", "__pycache__", ".pytest_cache"}


_spec = importlib.util.spec_from_file_location("gpulab_course", ROOT / "course.py")
course = sys.modules.setdefault("gpulab_course", importlib.util.module_from_spec(_spec))
_spec.loader.exec_module(course)
readme_index = load_script("readme_index")
nbreport = load_script("nbreport")
nb_ids = [p.name for p in NOTEBOOKS]


def _nb(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


def _code_cells(nb: dict) -> list[dict]:
    return [c for c in nb["cells"] if c["cell_type"] == "code"]


# ---- layout ---------------------------------------------------------------------------------------


def test_layout_exists():
    missing = [p for p in LAYOUT if not (ROOT / p).exists()]
    assert not missing, f"missing from the repository root: {missing}"
    assert NOTEBOOKS, "notebooks/ holds no .ipynb file"


def test_notebook_names_are_numbered_in_order():
    bad = [p.name for p in NOTEBOOKS if not readme_index.NAME_RE.match(p.name)]
    assert not bad, f"notebook names must look like NN_topic.ipynb (e.g. 01_why_gpus.ipynb): {bad}"
    numbers = [int(readme_index.NAME_RE.match(p.name).group(1)) for p in NOTEBOOKS]
    assert numbers == list(range(1, len(NOTEBOOKS) + 1)), f"notebook numbers must run 01, 02, ... without gaps: {numbers}"


# ---- each notebook --------------------------------------------------------------------------------


@pytest.mark.parametrize("path", NOTEBOOKS, ids=nb_ids)
def test_kernelspec(path):
    ks = _nb(path)["metadata"].get("kernelspec", {})
    assert ks.get("name") == "python3", f"{path.name}: kernelspec name is {ks.get('name')!r}, want 'python3'"
    assert ks.get("language", "python") == "python", f"{path.name}: kernelspec language {ks.get('language')!r}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=nb_ids)
def test_executed_top_to_bottom(path):
    run, not_run = [], []
    for i, cell in enumerate(_code_cells(_nb(path))):
        assert readme_index.source(cell).strip(), f"{path.name}: code cell {i} is empty; delete it"
        (not_run if "skip-execution" in nbreport.cell_tags(cell) else run).append(cell)
    counts = [c.get("execution_count") for c in run]
    assert counts == list(range(1, len(run) + 1)), (
        f"{path.name}: execution counts {counts} are not 1..{len(run)}; run `make notebooks NB=notebooks/{path.name}`"
    )
    for cell in not_run:
        assert cell.get("execution_count") is None and not cell.get("outputs"), (
            f"{path.name}: a skip-execution cell has outputs from some other run"
        )
        assert "nbval-skip" in nbreport.cell_tags(cell), (
            f"{path.name}: a cell tagged skip-execution must be tagged nbval-skip too (nbval would run it)"
        )


def _output_texts(output: dict) -> list[str]:
    texts = []
    for key in ("text", "traceback", "evalue"):
        value = output.get(key)
        if value:
            texts.append("".join(value) if isinstance(value, list) else str(value))
    for mime, value in output.get("data", {}).items():
        if not mime.startswith("image/"):  # base64 images contain '/' by chance
            texts.append("".join(value) if isinstance(value, list) else json.dumps(value))
    return texts


@pytest.mark.parametrize("path", NOTEBOOKS, ids=nb_ids)
def test_no_machine_paths_in_outputs(path):
    found = []
    for i, cell in enumerate(_code_cells(_nb(path))):
        for output in cell.get("outputs", []):
            for text in _output_texts(output):
                found += [(i, p) for p in MACHINE_PATHS if p in text]
    assert not found, (
        f"{path.name}: (code cell, path) {sorted(set(found))} show a machine path; print relative names, "
        "and for an expected error print `type(e).__name__, e` in try/except instead of a traceback"
    )


@pytest.mark.parametrize("path", NOTEBOOKS, ids=nb_ids)
def test_title_cell(path):
    header = readme_index.read_header(path)  # raises ValueError naming the expected shape
    assert header.filename == path.name


@pytest.mark.parametrize("path", NOTEBOOKS, ids=nb_ids)
def test_navigation_links(path):
    headers = [readme_index.read_header(p) for p in NOTEBOOKS]
    i = NOTEBOOKS.index(path)
    last = _nb(path)["cells"][-1]
    assert last["cell_type"] == "markdown", f"{path.name}: last cell must be markdown (summary + navigation)"
    expected = readme_index.nav_line(headers, i)
    found = readme_index.nav_lines_in(last)
    hint = "run `python scripts/readme_index.py --nav`"
    assert found == ([expected] if expected else []), f"{path.name}: navigation {found} != [{expected!r}]; {hint}"
    lines = [ln.strip() for ln in readme_index.source(last).splitlines() if ln.strip()]
    if expected:
        assert lines[-1] == expected, f"{path.name}: the navigation line must be the last line; {hint}"


# ---- whole repository -----------------------------------------------------------------------------


def test_readme_index_is_current():
    headers = [readme_index.read_header(p) for p in NOTEBOOKS]
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert readme_index.render_readme(readme, readme_index.index_table(headers)) == readme, (
        "README.md notebook index is stale: run `python scripts/readme_index.py`"
    )


def test_chinese_readme_index_is_current_and_linked():
    zh = readme_index.zh_readme(ROOT)
    assert zh is not None, "README.zh-CN.md is missing"
    _, text, wanted = zh
    assert text == wanted, "README.zh-CN.md notebook index is stale: run `python scripts/readme_index.py`"
    assert text.count("](notebooks/zh/") == len(NOTEBOOKS), "the zh index lists every notebook"
    assert "README.zh-CN.md" in (ROOT / "README.md").read_text(encoding="utf-8").split("\n## ")[0], \
        "README.md links the Chinese README near its top"


def test_most_code_cells_are_compared():
    per_nb = {p.name: nbreport.count_cells(p) for p in NOTEBOOKS}
    print(nbreport.format_report(per_nb))
    compared = sum(c["compared"] for c in per_nb.values())
    total = sum(sum(c.values()) for c in per_nb.values())
    assert compared * 2 >= total, f"nbval compares only {compared} of {total} code cells; aim for most"


def test_ci_runs_make_test_and_only_what_the_readme_shows():
    commands = []
    for raw in (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines():
        line = raw.strip()
        if line and not line.startswith("#") and not line.startswith(("set ", "cd ")):
            commands.append(line)
    assert commands and commands[0] == "make test", f".ci/run must start with `make test`, runs {commands}"
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    unknown = [c for c in commands if c not in readme]
    assert not unknown, f".ci/run runs commands the README does not show: {unknown}"


def _pytest_runs() -> list[list[str]]:
    """Every pytest command line that a course.py command runs."""
    runs = []
    for command in course.HELP:
        runs += [step.argv for step in course.plan(command, paths=["notebooks/01_why_gpus.ipynb"])
                 if step.argv[1:3] == ["-m", "pytest"]]
    return runs


def test_parallel_pytest_uses_loadfile():
    runs = _pytest_runs()
    assert any("--nbval" in run for run in runs), "no course.py command runs nbval"
    bad = [run for run in runs if "-n" in run and "loadfile" not in run]
    assert not bad, f"pytest -n without --dist loadfile splits a notebook over workers: {bad}"


def test_test_target_runs_tests_and_notebooks():
    make = (ROOT / "Makefile").read_text(encoding="utf-8")
    recipe = r"^test:\n\t\$\(COURSE\) test --jobs \$\(JOBS\)$"
    assert re.search(recipe, make, re.M), "`make test` must call course.py test"
    run = course.plan("test")[0].argv
    assert run[1:3] == ["-m", "pytest"] and "tests" in run and "notebooks" in run and "--durations=15" in run


def test_git_tracks_no_junk():
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    out = subprocess.run(
        ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, text=True, timeout=30, check=True
    ).stdout
    junk = [f for f in out.split("\0") if f and (JUNK & set(f.split("/")) or f.endswith((".pyc", ".pyo")))]
    assert not junk, f"git tracks generated files: {junk[:10]}"


# ---- the generators themselves (synthetic input) ----------------------------------------------------


def _md(text: str) -> dict:
    return {"cell_type": "markdown", "metadata": {}, "source": text}


def _code(src: str, tags=()) -> dict:
    return {"cell_type": "code", "metadata": {"tags": list(tags)}, "source": src, "outputs": []}


GOOD_HEADER = "# 03 · One device\n**You will learn:** move work.\n**Runs in:** about 20 s on a CPU laptop, about 5 s on a GPU."


def test_parse_header_reads_fields():
    h = readme_index.parse_header("03_single_device.ipynb", _md(GOOD_HEADER))
    assert (h.number, h.title, h.learn, h.cpu_time) == ("03", "One device", "move work.", "about 20 s")


@pytest.mark.parametrize(
    "filename,text",
    [
        ("03_single_device.ipynb", "# 03 - One device\n**You will learn:** x\n**Runs in:** about 2 s on a CPU laptop, y"),
        ("03_single_device.ipynb", "# 03 · One device\n**Runs in:** about 2 s on a CPU laptop, y"),
        ("03_single_device.ipynb", "# 03 · One device\n**You will learn:** x\n**Runs in:** fast"),
        ("04_single_device.ipynb", GOOD_HEADER),  # number disagrees with the file name
    ],
)
def test_parse_header_rejects_bad_cells(filename, text):
    with pytest.raises(ValueError):
        readme_index.parse_header(filename, _md(text))


def test_parse_header_rejects_code_cell():
    with pytest.raises(ValueError):
        readme_index.parse_header("03_single_device.ipynb", _code(GOOD_HEADER))


def test_index_table_and_render():
    h = readme_index.parse_header("03_single_device.ipynb", _md(GOOD_HEADER))
    table = readme_index.index_table([h])
    assert "| 03 | [One device](notebooks/03_single_device.ipynb) | move work. | about 20 s |" in table
    readme = f"intro\n{readme_index.START}\nold\n{readme_index.END}\nrest\n"
    assert readme_index.render_readme(readme, table) == f"intro\n{readme_index.START}\n{table}\n{readme_index.END}\nrest\n"
    with pytest.raises(ValueError):
        readme_index.render_readme("no markers here", table)


def test_index_has_one_table_per_part():
    hs = [readme_index.Header(f"{n}_n.ipynb", n, f"T{n}", "l", "about 1 s") for n in ("01", "07", "08", "11")]
    table = readme_index.index_table(hs)
    course, further = table.split("\n\n**Part 2")
    assert course.startswith("**Part 1") and "| 07 |" in course and "| 08 |" not in course
    assert "| 08 |" in further and "| 11 |" in further and "| 07 |" not in further
    assert "Part 2" not in readme_index.index_table(hs[:2])


def test_nav_line_links_neighbours():
    hs = [readme_index.Header(f"0{i}_n{i}.ipynb", f"0{i}", f"T{i}", "l", "about 1 s") for i in (1, 2, 3)]
    assert readme_index.nav_line(hs, 0) == "[Next: 02 · T2 →](02_n2.ipynb)"
    assert readme_index.nav_line(hs, 1) == "[← 01 · T1](01_n1.ipynb) | [Next: 03 · T3 →](03_n3.ipynb)"
    assert readme_index.nav_line(hs[:1], 0) == ""
    fixed = readme_index.with_nav("Summary.\n\n[← 00 · Old](00_old.ipynb)\n", readme_index.nav_line(hs, 2))
    assert fixed == "Summary.\n\n[← 02 · T2](02_n2.ipynb)"


@pytest.mark.parametrize(
    "cell,category",
    [
        (_code("x = 1"), "compared"),
        (_code("x = 1", ["nbval-ignore-output"]), "ignored"),
        (_code("# NBVAL_IGNORE_OUTPUT\nx = 1"), "ignored"),
        (_code("# NBVAL_IGNORE_OUTPUT (timing)\nx = 1"), "compared"),  # nbval needs the whole line
        (_code("x = 1", ["nbval-skip"]), "skipped"),
        (_code("x = 1", ["skip-execution", "nbval-skip"]), "skipped"),
        (_code("# NBVAL_SKIP\nx = 1"), "skipped"),
        (_code("1 / 0", ["raises-exception"]), "raises"),
        (_code("# NBVAL_CHECK_OUTPUT\nx = 1", ["nbval-ignore-output"]), "compared"),  # comments win
    ],
)
def test_classify_cell(cell, category):
    assert nbreport.classify_cell(cell) == category


def test_classify_cell_rejects_markdown():
    with pytest.raises(ValueError):
        nbreport.classify_cell(_md("# title"))


def _section(text: str, heading: str) -> str:
    return text.split(heading + "\n", 1)[1].split("\n## ", 1)[0]


def test_readme_quick_start_and_plain_commands_match_makefile():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    quick = _section(readme, "## Quick start")
    assert "git clone" in quick and "Download ZIP" in quick, "the quick start must say how to get the folder"
    forms = re.search(r"^\| `make lab` \| `py course.py lab`.*\| `conda env create -f environment.yml`.*"
                      r"`python course.py lab --no-venv` \|$", quick, re.M)
    assert forms, "the quick start shows `lab` as make, Windows (py course.py) and conda, side by side"
    assert "make test" not in quick.split("For teachers and contributors", 1)[0], "learners get `lab` first"
    for tool, name in re.findall(r"`(make|course\.py) ([a-z-]+)", readme):
        assert name in course.HELP, f"README shows `{tool} {name}`, which is no course.py command"
    plain = _section(readme, "### What `course.py` runs").split("```bash\n")
    test_block, install_block = (block.split("```", 1)[0].strip().splitlines() for block in plain[1:3])
    assert test_block == [step.shown() for step in course.plan("test")], "README: what `make test` runs"
    assert install_block[1:] == [
        ".venv/bin/python -m pip install --quiet --upgrade pip",
        ".venv/bin/python -m pip install --quiet -c constraints.txt -e '.[test]'"]
    assert course.NBVAL == test_block[0].split(" tests notebooks ", 1)[1].split()


def test_troubleshooting_is_linked_and_every_link_arrives():
    from doc_links import anchors, links

    docs = ["README.md", "TEACHING.md", "TROUBLESHOOTING.md"]
    for doc in docs:
        for file, anchor in links(ROOT / doc):
            target = ROOT / doc if not file else (ROOT / doc).parent / file
            assert target.exists(), f"{doc} links to {file}, which does not exist"
            if anchor and target.suffix == ".md":
                assert anchor in anchors(target), f"{doc} links to {file}#{anchor}: no such heading"
    for doc in ("README.md", "TEACHING.md"):
        assert "(TROUBLESHOOTING.md" in (ROOT / doc).read_text(encoding="utf-8"), f"{doc} must link TROUBLESHOOTING.md"
    assert (ROOT / "LICENSE").read_text(encoding="utf-8").startswith("MIT License")
