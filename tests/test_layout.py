"""The package's shape, as CONTRIBUTING.md describes it: imports point down, one timer, small modules.

Read from the source (``ast``), so these run in a blink and fail with the file and line to look at.
"""

from __future__ import annotations

import ast
import json
import re
from collections import defaultdict
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "gpulab"


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def import_graph(modules: dict[str, Path]) -> dict[str, set[str]]:
    """Module -> the gpulab modules it imports, at the top or inside a function (an arrow either way)."""
    graph: dict[str, set[str]] = defaultdict(set)
    for name, path in modules.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0 and node.module.startswith("gpulab"):
                targets = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names if a.name.startswith("gpulab")]
            else:
                continue
            graph[name].update(t for t in targets if t in modules and t != name)
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import circle (``[a, b, a]``), or None. A package importing its own submodules is not a circle
    unless a submodule imports the package back for something other than the package's own names."""
    state: dict[str, int] = {}

    def visit(node: str, stack: list[str]) -> list[str] | None:
        state[node] = 1
        for nxt in sorted(graph.get(node, ())):
            if nxt == node.rpartition(".")[0]:  # a submodule reading its package's __init__: a step down, not up
                continue
            if state.get(nxt) == 1:
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state and (found := visit(nxt, stack + [nxt])):
                return found
        state[node] = 2
        return None

    for start in sorted(graph):
        if start not in state and (found := visit(start, [start])):
            return found
    return None


def test_no_import_circle():
    cycle = find_cycle(import_graph(_modules()))
    assert cycle is None, "import circle: " + " -> ".join(cycle)


def test_the_cycle_finder_can_fail():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": {"c"}}) is None


STRING = re.compile(r'"[^"]*"|\'[^\']*\'')


def _calls(pattern: str, roots: list[Path], code_only: bool = True) -> list[str]:
    """``path:line: text`` of every line matching ``pattern`` (in code: not comments, strings or docstring examples)."""
    found = []
    for root in roots:
        for path in sorted(root.rglob("*.py")):
            for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
                text = STRING.sub('""', line.split("#")[0]) if code_only else line
                if re.search(pattern, text) and "`" not in text:
                    found.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    return found


def test_one_timer():
    """Durations are measured by gpulab.timing only (it waits for the device); deadlines use time.monotonic."""
    hand_made = [f for f in _calls(r"\bperf_counter\b", [PACKAGE, ROOT / "scripts", ROOT / "benchmarks"])
                 if not f.startswith("gpulab/timing.py")]
    assert not hand_made, "time with gpulab.timing (time_call or Stopwatch):\n" + "\n".join(hand_made)


#: The one notebook cell that times by hand on purpose: it shows why a clock read needs a wait.
TIMING_DEMO = ("03_single_device.ipynb", "wrong = time.perf_counter() - start")


def code_cells(notebooks: list[Path]):
    """``(notebook path, cell index, cell, source)`` of every code cell of ``notebooks``."""
    for path in notebooks:
        for i, cell in enumerate(json.loads(path.read_text(encoding="utf-8"))["cells"]):
            if cell["cell_type"] == "code":
                yield path, i, cell, "".join(cell["source"])


def hand_timed_cells(notebooks: list[Path]) -> list[str]:
    """``notebook cell ID`` of every code cell that reads a clock itself (the timing demo of 03 left out)."""
    return [f"{path.name} cell {cell['id']}" for path, _, cell, text in code_cells(notebooks)
            if re.search(r"\bperf_counter\b|\btime\.time\(", text)
            and not (path.name == TIMING_DEMO[0] and TIMING_DEMO[1] in text)]


def test_notebooks_time_with_the_one_timer_too(tmp_path):
    hand_made = hand_timed_cells(sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")))
    assert not hand_made, "time with gpulab.timing (Stopwatch) here:\n" + "\n".join(hand_made)
    bad = tmp_path / "06_x.ipynb"
    bad.write_text(json.dumps({"cells": [{"cell_type": "code", "id": "c1", "source": ["t = time.perf_counter()"]}]}))
    assert hand_timed_cells([bad]) == ["06_x.ipynb cell c1"]


def test_no_re_export_faces():
    """A name is imported from the module that defines it: no module re-exports another's names."""
    faces = _calls(r"noqa: F401", [PACKAGE], code_only=False)  # an import kept only to be imported from here
    assert not faces, "\n".join(faces)


def test_rank_programs_read_torchrun_in_one_place():
    """Every rank program (``distributed/LESSON/worker.py``) gets its rank from launch.rank_io (rank_env and
    run_in_group, or run_rank), and its driver launches it through launch.collect, the one launch-and-collect path."""
    workers = sorted((PACKAGE / "distributed").glob("*/worker.py"))
    assert len(workers) >= 7
    for path in workers:
        text = path.read_text(encoding="utf-8")
        assert ("rank_env()" in text and "run_in_group(" in text) or "run_rank(" in text, path
        assert 'os.environ["RANK"]' not in text and "init_process_group(" not in text, path
        driver = (path.parent / "driver.py").read_text(encoding="utf-8")
        assert "run_ranks(" in driver and "TemporaryDirectory" not in driver, path.parent


def test_teaching_code_never_imports_the_course_tooling():
    """gpulab.course (the command, the environment report, the answer key) sits on top: nothing else imports it."""
    graph = import_graph(_modules())
    found = [f"{name} -> {target}" for name, targets in graph.items()
             if not name.startswith("gpulab.course") and name != "gpulab.__main__"  # python -m gpulab: the command
             for target in targets if target.startswith("gpulab.course")]
    assert not found, "\n".join(found)


PRIVATE_TORCH = r"\btorch(\.\w+)*\._[A-Za-z]|from torch[\w.]*\._\w|from torch[\w.]* import _[a-z]|kineto_results|\._get_ddp_"


def test_private_torch_names_live_in_one_module():
    """Only gpulab/torch_private.py touches torch's private names (each behind a guarded function, tested)."""
    found = [f for f in _calls(PRIVATE_TORCH, [PACKAGE, ROOT / "scripts", ROOT / "benchmarks"])
             if not f.startswith("gpulab/torch_private.py")]
    assert not found, "move these into gpulab/torch_private.py:\n" + "\n".join(found)


def test_notebooks_use_no_private_torch_name():
    found = [f"{path.name} cell {i}: {line.strip()}"
             for path, i, _, text in code_cells(sorted((ROOT / "notebooks").glob("*.ipynb")))
             for line in text.splitlines() if re.search(PRIVATE_TORCH, line.split("#")[0])]
    assert not found, "\n".join(found)


def rooms_table(text: str) -> set[str]:
    """The module names in CONTRIBUTING.md's table of rooms (backticked, in its rows)."""
    section = text.split("## The rooms of the package", 1)[1].split("\n## ", 1)[0]
    return {name.rstrip("/") for line in section.splitlines() if line.startswith("| ")
            for name in re.findall(r"`([\w/]+)`", line.split("|")[2])}


def test_every_module_has_its_room_in_contributing():
    listed = rooms_table((ROOT / "CONTRIBUTING.md").read_text(encoding="utf-8"))
    here = {p.stem for p in PACKAGE.glob("*.py") if not p.stem.startswith("__")}
    here |= {p.name for p in PACKAGE.iterdir() if p.is_dir() and (p / "__init__.py").is_file()}
    assert not here - listed, f"add to CONTRIBUTING.md's rooms: {sorted(here - listed)}"
    assert not listed - here, f"CONTRIBUTING.md lists modules that do not exist: {sorted(listed - here)}"
    assert rooms_table("## The rooms of the package\n| room | m |\n|---|---|\n| a | `x`, `y/` |\n") == {"x", "y"}
