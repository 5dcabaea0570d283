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
- .ci/run runs `make test` and nothing else; the Makefile runs pytest-xdist only with `--dist loadfile`.
- git tracks no virtualenv, checkpoints or caches.
"""
from __future__ import annotations

import json
import re
import shutil
import subprocess
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


def _makefile_commands() -> list[str]:
    text = (ROOT / "Makefile").read_text(encoding="utf-8").replace("\\\n", " ")
    return [ln.strip() for ln in text.splitlines() if "pytest" in ln]


def test_makefile_parallel_pytest_uses_loadfile():
    commands = _makefile_commands()
    assert any("--nbval" in c or "$(NBVAL)" in c for c in commands), "the Makefile never runs nbval"
    bad = [c for c in commands if re.search(r"(^|\s)-n\s", c) and "--dist loadfile" not in c]
    assert not bad, f"pytest -n without --dist loadfile splits a notebook over workers: {bad}"


def test_test_target_runs_tests_and_notebooks():
    text = (ROOT / "Makefile").read_text(encoding="utf-8").replace("\\\n", " ")
    m = re.search(r"^test:[^\n]*\n((?:\t[^\n]*\n?)+)", text, re.M)
    assert m, "the Makefile has no `test:` target"
    recipe = m.group(1)
    assert re.search(r"pytest.*\btests\b.*\bnotebooks\b", recipe), "`make test` must run pytest over tests and notebooks"


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


def _squash(text: str) -> str:
    return re.sub(r"\s+", " ", text.replace("\\\n", " "))


def test_readme_quick_start_and_plain_commands_match_makefile():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    quick = readme.split("## Quick start", 1)[1].split("```bash\n", 1)[1].split("```", 1)[0]
    assert [ln.split("#")[0].strip() for ln in quick.splitlines()] == ["make lab", "make test"], (
        "README Quick start must show exactly `make lab` then `make test`"
    )
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    nbval = re.search(r"^NBVAL\s*:?=\s*(.+)$", makefile, re.M)
    assert nbval, "Makefile defines no NBVAL flags"
    assert nbval.group(1).strip() in _squash(readme), "README's plain pytest command lacks the Makefile's NBVAL flags"
    assert "-c constraints.txt -e '.[test]'" in makefile and "-c constraints.txt -e '.[test]'" in readme
