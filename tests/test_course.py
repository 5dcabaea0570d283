"""course.py, the one entry point: the commands it runs, the same as `make`, on Linux and (simulated) Windows.

Only Linux runs these commands for real here. The Windows branch is checked by simulation: ``course.OS_NAME``
is set to ``"nt"``, so paths and printed commands are the ones a Windows machine gets (``Scripts\\python.exe``,
``set "MPLBACKEND="``), but no Windows process is started.
"""
from __future__ import annotations

import ast
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
spec = importlib.util.spec_from_file_location("gpulab_course", ROOT / "course.py")
course = sys.modules.setdefault("gpulab_course", importlib.util.module_from_spec(spec))
spec.loader.exec_module(course)

# What `make test` runs on Linux and macOS: README.md shows the same lines.
TEST_COMMANDS = [
    "env -u MPLBACKEND .venv/bin/python -m pytest -n 2 --dist loadfile --ignore=tests/browser --ignore=notebooks/zh --durations=15 "
    "tests notebooks --nbval --nbval-current-env --nbval-sanitize-with tests/nbval_sanitize.cfg "
    "--nbval-cell-timeout=120",
    ".venv/bin/python scripts/nbreport.py notebooks",
]
MAKE = shutil.which("make")
needs_make = pytest.mark.skipif(MAKE is None, reason="make is not installed here (course.py needs no make)")


def _make_n(*args: str) -> list[str]:
    """What ``make -n ARGS`` would run. Under ``make test`` this runs inside make: a sub-make would print
    "Entering directory" lines and inherit the parent's flags, so it gets neither."""
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL", "MAKEOVERRIDES")}
    done = subprocess.run([MAKE, "--no-print-directory", "-n", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=60, check=True, env=env)
    return done.stdout.strip().splitlines()


def _dry(*args: str, cwd: Path = ROOT, script: Path = ROOT / "course.py") -> subprocess.CompletedProcess:
    command = [sys.executable, str(script), *args[:1], "--dry-run", *args[1:]]  # before any `--`
    return subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=60)


@pytest.fixture
def folder(tmp_path, monkeypatch):
    """A course folder of our own: pyproject.toml and constraints.txt, no .venv yet."""
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'x'\n")
    (tmp_path / "constraints.txt").write_text("torch==2.13.0\n")
    monkeypatch.setattr(course, "ROOT", str(tmp_path))
    return tmp_path


# ---- the same commands as make ------------------------------------------------------------------------


@needs_make
def test_make_test_runs_exactly_what_course_test_runs():
    make = _make_n("test")
    assert make == ["python3 course.py test --jobs 2"], make
    shown = _dry(*make[0].split()[2:]).stdout.strip().splitlines()
    pip = [ln for ln in shown if " -m pip " in ln or " -m venv " in ln or ln.startswith("# mark")]
    assert shown[len(pip):] == TEST_COMMANDS, shown  # after an install step, when one is due
    assert course.Step(course.plan("test")[0].argv, course.NO_MPL).shown() == TEST_COMMANDS[0]


@needs_make
def test_every_make_target_calls_course_py_with_its_variables():
    phony = re.findall(r"^\.PHONY:(.*)$", (ROOT / "Makefile").read_text(encoding="utf-8"), re.M)
    targets = [t for line in phony for t in line.split()]
    assert set(targets) == set(course.HELP), "every make target is a course.py command, and back"
    for target in targets:
        assert _make_n(target)[0].startswith(f"python3 course.py {target}"), target
    assert _make_n("lab", "LAB_ARGS=--no-browser --port=8899") == ["python3 course.py lab -- --no-browser --port=8899"]
    assert _make_n("test-unit", "JOBS=3") == ["python3 course.py test-unit --jobs 3"]
    assert _make_n("notebooks", "NB=notebooks/03_single_device.ipynb") == [
        "python3 course.py notebooks notebooks/03_single_device.ipynb"]
    assert _make_n("preflight", "PREFLIGHT_ARGS=--json r.json") == ["python3 course.py preflight -- --json r.json"]
    assert _make_n("test", "PYTHON=py") == ["py course.py test --jobs 2"]
    assert _make_n("lab", "ZH=1") == ["python3 course.py lab --zh --"]


def test_dry_run_prints_and_runs_nothing():
    done = _dry("notebooks", "notebooks/01_why_gpus.ipynb")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.strip().splitlines()
    assert lines[-2].endswith("--ExecutePreprocessor.kernel_name=python3 notebooks/01_why_gpus.ipynb")
    assert lines[-2].startswith("env -u MPLBACKEND ") and lines[-1] == TEST_COMMANDS[1]
    every = _dry("notebooks").stdout
    assert all(p.name in every for p in (ROOT / "notebooks").glob("*.ipynb")), "the default is every notebook"


def test_extra_options_reach_the_tool_and_bad_input_is_one_line():
    lab = _dry("lab", "--", "--no-browser", "--port=8899").stdout.strip().splitlines()[-1]
    assert lab.endswith("-m jupyter lab --ServerApp.root_dir=. notebooks/01_why_gpus.ipynb --no-browser --port=8899")
    assert _dry("test-unit", "--", "-k", "course").stdout.strip().endswith("tests -k course")
    zh = _dry("lab", "--zh").stdout.strip().splitlines()[-1]
    assert zh.endswith(f"--ServerApp.root_dir=. {course.FIRST_NOTEBOOK_ZH}")
    assert (ROOT / course.FIRST_NOTEBOOK_ZH).is_file()
    for args, words in [(["test", "--jobs", "0"], "--jobs 0"), (["lab", "x.ipynb"], "takes no paths"),
                        (["test", "--zh"], "`test` has no --zh"),
                        (["bake"], "invalid choice: 'bake'")]:
        done = _dry(*args)
        assert done.returncode == 2 and words in done.stderr.strip().splitlines()[-1], done.stderr


# ---- paths and commands on each system ----------------------------------------------------------------


def test_linux_venv_paths_are_the_ones_this_venv_has():
    assert course.venv_scripts() == os.path.normpath(sysconfig.get_path(
        "scripts", "venv" if "venv" in sysconfig.get_scheme_names() else "posix_prefix",
        vars={"base": ".venv", "platbase": ".venv"}))
    assert course.venv_python() == ".venv/bin/python"


@pytest.mark.skipif(Path(sys.prefix).resolve() != (ROOT / ".venv").resolve(),
                    reason="runs only in the course's own .venv (python course.py install made it)")
def test_this_python_is_the_venv_python_course_py_names():
    assert (ROOT / course.venv_python()).resolve() == Path(sys.executable).resolve()


def test_windows_simulated_gives_scripts_and_python_exe(monkeypatch):
    monkeypatch.setattr(course, "OS_NAME", "nt")
    assert course.venv_scripts() == ".venv\\Scripts"
    assert course.venv_python() == ".venv\\Scripts\\python.exe"
    monkeypatch.setattr(sysconfig, "get_scheme_names", lambda: ("nt", "posix_prefix"))  # Python 3.10: no venv scheme
    assert course.venv_python() == ".venv\\Scripts\\python.exe"
    run, report = course.plan("test")
    assert run.argv[:3] == [".venv\\Scripts\\python.exe", "-m", "pytest"] and run.drop_env == ("MPLBACKEND",)
    assert run.shown().startswith('set "MPLBACKEND=" && .venv\\Scripts\\python.exe -m pytest -n 2 --dist loadfile ')
    assert report.shown() == ".venv\\Scripts\\python.exe scripts/nbreport.py notebooks"
    browser = course.plan("test-browser")[1]
    assert browser.shown().startswith('set "GPULAB_REQUIRE_BROWSER=1" && .venv\\Scripts\\python.exe -m pytest')
    assert course.main(["test-browser", "--dry-run"]) == 2


def test_windows_simulated_install_has_no_shell_quoting(folder, monkeypatch):
    monkeypatch.setattr(course, "OS_NAME", "nt")
    venv, upgrade, install, stamp = course.install_steps()
    assert venv.argv == [sys.executable, "-m", "venv", ".venv"]
    assert upgrade.argv == [".venv\\Scripts\\python.exe", "-m", "pip", "install", "--quiet", "--upgrade", "pip"]
    assert install.argv[-4:] == ["-c", "constraints.txt", "-e", ".[test]"]  # one argument, no quotes to keep
    assert install.shown().endswith("-c constraints.txt -e .[test]")
    assert stamp.action is not None and stamp.argv == ["mark", ".venv\\.installed", "installed"]


def test_posix_shown_commands_quote_what_a_shell_would_split(monkeypatch):
    monkeypatch.setattr(course, "OS_NAME", "posix")
    step = course.Step(["python", "-c", "print(1)", ".[test]"], ("MPLBACKEND",), {"A": "1"})
    assert step.shown() == "env -u MPLBACKEND A=1 python -c 'print(1)' '.[test]'"


# ---- the install stamp --------------------------------------------------------------------------------


def _fake_venv(folder: Path) -> None:
    python = folder / course.venv_python()
    python.parent.mkdir(parents=True)
    python.write_text("")


def test_install_only_when_the_inputs_are_newer_than_the_stamp(folder):
    assert [s.argv[1:3] for s in course.install_steps()][:1] == [["-m", "venv"]]
    _fake_venv(folder)
    steps = course.install_steps()
    assert [s.argv[-1] for s in steps] == ["pip", ".[test]", "installed"]  # no venv yet installed: install
    steps[-1].action()
    assert course.install_steps() == []  # the stamp is newer than both inputs
    stamp = folder / ".venv" / ".installed"
    for changed in ("pyproject.toml", "constraints.txt"):
        now = stamp.stat().st_mtime
        os.utime(folder / changed, (now + 5, now + 5))  # edited after the install
        assert [s.argv[-1] for s in course.install_steps()] == ["pip", ".[test]", "installed"], changed
        os.utime(stamp, (now + 10, now + 10))  # installed again
        assert course.install_steps() == [], changed


def test_the_environment_loses_mplbackend_and_keeps_the_rest(monkeypatch, capfd):
    monkeypatch.setenv("MPLBACKEND", "Agg")
    monkeypatch.setenv("PIP_INDEX_URL", "https://mirror.example/simple")
    code = "import os; print(os.environ.get('MPLBACKEND'), os.environ.get('PIP_INDEX_URL'))"
    assert course.run(course.Step([sys.executable, "-c", code], course.NO_MPL, timeout=60)) == 0
    assert capfd.readouterr().out.strip() == "None https://mirror.example/simple"
    assert course.run(course.Step([sys.executable, "-c", "import sys; sys.exit(3)"], timeout=60)) == 3
    assert course.run(course.Step(["no-such-program-here"])) == 127


def test_a_command_that_hangs_is_stopped(capfd):
    step = course.Step([sys.executable, "-c", "import time; time.sleep(60)"], timeout=1)
    assert course.run(step) == 124
    assert "gave up after 1 s" in capfd.readouterr().err


def test_clean_removes_the_environment_and_build_outputs(folder):
    for path in (".venv/bin", "build/student", ".pytest_cache", "gpulab.egg-info"):
        (folder / path).mkdir(parents=True)
    (folder / "notebooks").mkdir()
    assert course.main(["clean"]) == 0
    assert sorted(p.name for p in folder.iterdir()) == ["constraints.txt", "notebooks", "pyproject.toml"]


def test_too_old_a_python_is_one_line(monkeypatch, capsys):
    monkeypatch.setattr(course, "MIN_PYTHON", (99, 0))
    assert course.main(["lab", "--dry-run"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: the course needs Python 99.0 or newer; this is ") and len(err.splitlines()) == 1


def test_no_venv_uses_this_python_and_installs_nothing(capsys):
    assert course.main(["lab", "--no-venv", "--dry-run"]) == 0
    assert capsys.readouterr().out.strip().splitlines() == [
        f"env -u MPLBACKEND {sys.executable} -m jupyter lab --ServerApp.root_dir=. notebooks/01_why_gpus.ipynb"]


# ---- the student edition on a laptop ------------------------------------------------------------------


def test_student_edition_installs_its_wheel_and_offers_only_lab(tmp_path):
    for name in ("course.py", "constraints.txt"):
        shutil.copyfile(ROOT / name, tmp_path / name)
    (tmp_path / "notebooks").mkdir()
    (tmp_path / "gpulab-0.1.0-py3-none-any.whl").write_bytes(b"")
    done = _dry("lab", cwd=tmp_path, script=tmp_path / "course.py")
    lines = done.stdout.strip().splitlines()
    assert lines[0].endswith(" -m venv .venv")
    assert lines[2] == ".venv/bin/python -m pip install --quiet -c constraints.txt gpulab-0.1.0-py3-none-any.whl"
    assert lines[-1].endswith("-m jupyter lab --ServerApp.root_dir=. notebooks/01_why_gpus.ipynb")
    test = _dry("test", cwd=tmp_path, script=tmp_path / "course.py")
    assert test.returncode == 2 and "needs the whole course folder" in test.stderr and test.stdout == ""
    (tmp_path / "gpulab-0.2.0-py3-none-any.whl").write_bytes(b"")
    two = _dry("lab", cwd=tmp_path, script=tmp_path / "course.py")
    assert two.returncode == 1 and "one gpulab-*.whl is needed" in two.stderr


def test_zip_holds_the_folder_under_its_name_in_a_stable_order(folder):
    base = folder / "build" / "student"
    (base / "notebooks").mkdir(parents=True)
    (base / "notebooks" / "01_a.ipynb").write_text("{}")
    (base / "course.py").write_text("")
    course._zip("build/student", "build/student.zip")
    first = (folder / "build" / "student.zip").read_bytes()
    with zipfile.ZipFile(folder / "build" / "student.zip") as archive:
        assert archive.namelist() == ["student/course.py", "student/notebooks/01_a.ipynb"]
    course._zip("build/student", "build/student.zip")
    assert len((folder / "build" / "student.zip").read_bytes()) == len(first)


def test_course_py_needs_nothing_but_the_standard_library():
    tree = ast.parse((ROOT / "course.py").read_text(encoding="utf-8"))
    names = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    names |= {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.level == 0}
    assert names - {"__future__"} <= set(sys.stdlib_module_names), names - set(sys.stdlib_module_names)


def test_a_failed_venv_is_removed_so_the_next_run_starts_clean(folder, monkeypatch):
    def half_made(step):
        (folder / ".venv" / "bin").mkdir(parents=True)  # ensurepip missing: python made, pip not
        return 1

    monkeypatch.setattr(course, "run", half_made)
    assert course.main(["install"]) == 1
    assert not (folder / ".venv").exists()


def test_a_relative_program_is_started_by_its_full_path(folder, monkeypatch):
    """Windows looks for a relative program from the caller's folder, not from ``cwd``: pass the full path."""
    (folder / "tool.exe").write_text("")
    started = []

    class Fake:
        def __init__(self, argv, cwd, env):
            started.append((argv, cwd))

        def wait(self, timeout=None):
            return 0

    monkeypatch.setattr(course.subprocess, "Popen", Fake)
    assert course.run(course.Step(["tool.exe", "-m", "x"])) == 0
    assert course.run(course.Step(["bash", "x.sh"])) == 0  # a program on PATH stays as it is
    assert started == [([str(folder / "tool.exe"), "-m", "x"], str(folder)), (["bash", "x.sh"], str(folder))]
