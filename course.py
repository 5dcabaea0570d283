#!/usr/bin/env python3
"""The course's one entry point, the same on Linux, macOS and Windows: it needs only Python.

    python course.py lab              # Windows: py course.py lab. Makes .venv, installs, opens JupyterLab
    python course.py test             # every test and every notebook (the teacher's and contributor's check)
    python course.py test --dry-run   # print the commands, run nothing
    python course.py --help           # every command

The Makefile calls this file, so ``make lab`` and ``python course.py lab`` run the same commands.
The environment lives in ``.venv`` and is (re)installed when ``pyproject.toml`` or ``constraints.txt``
is newer than its stamp. Paths inside it come from ``sysconfig`` (``bin/`` on Linux and macOS,
``Scripts\\`` on Windows), and every command is a list of arguments: no shell is involved.
In a student edition (a folder with a ``gpulab-*.whl`` and no ``pyproject.toml``), ``install`` installs
that wheel. ``--no-venv`` uses the Python that runs this file (an activated conda environment) instead.
Standard library only, so it runs before anything is installed.
"""
from __future__ import annotations

import argparse
import glob
import ntpath
import os
import posixpath
import shlex
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from dataclasses import dataclass, field
from typing import Callable

MIN_PYTHON = (3, 10)
ROOT = os.path.dirname(os.path.abspath(__file__))
VENV = ".venv"
STAMP = ".installed"
OS_NAME = os.name  # "nt" on Windows; tests set it to simulate another system
FIRST_NOTEBOOK = "notebooks/01_why_gpus.ipynb"
FIRST_NOTEBOOK_ZH = "notebooks/zh/01_why_gpus.ipynb"  # the Chinese edition (`lab --zh`)
# nbval in strict mode: every code cell's output is compared unless tagged (see tests/nbval_sanitize.cfg).
NBVAL = ["--nbval", "--nbval-current-env", "--nbval-sanitize-with", "tests/nbval_sanitize.cfg",
         "--nbval-cell-timeout=120"]
NO_MPL = ("MPLBACKEND",)  # inherited by the kernels, it would hide the notebooks' figures
DEFAULT_JOBS = 2
STUDENT_FILES = ["course.py", "constraints.txt", "TROUBLESHOOTING.md", "TROUBLESHOOTING.zh-CN.md", "LICENSE"]
HELP = {
    "install": "create .venv and install gpulab with its pinned dependencies (only when needed)",
    "lab": "JupyterLab at the course folder, notebook 01 open (--zh: in Chinese; server options after --)",
    "test": "unit, hygiene and notebook tests in one pytest run, then the cell report (pytest options after --)",
    "test-unit": "the unit and hygiene tests only",
    "test-notebooks": "every notebook under nbval only",
    "test-browser": "the walkthrough in headless Chromium (Linux: installs Debian's chromium)",
    "notebooks": "re-run notebooks top to bottom in place (default: all of them)",
    "report": "how many cells of each notebook nbval compares, ignores or skips",
    "preflight": "will the course run on this machine? (gpulab preflight; its options after --)",
    "student": "student edition in build/student (+ build/student.zip) and the answer keys build/answers.md, answers.zh-CN.md",
    "student-check": "the student edition, then run every student notebook",
    "answers": "only the teacher's answer keys, build/answers.md and answers.zh-CN.md",
    "wheel": "dist/gpulab-VERSION-py3-none-any.whl, for cloud notebooks",
    "timings": "run every notebook and rewrite the class plans in TEACHING.md",
    "clean": "remove .venv, caches and build outputs",
}
FULL_ONLY = set(HELP) - {"install", "lab", "preflight", "clean"}  # need the whole course folder


@dataclass
class Step:
    """One command (an argument list) or, with ``action``, one thing done in Python."""

    argv: list[str]
    drop_env: tuple[str, ...] = ()
    set_env: dict[str, str] = field(default_factory=dict)
    action: Callable[[], None] | None = None
    timeout: float | None = None  # None: the command has its own (per-cell) timeouts, or runs until stopped
    undo: list[str] = field(default_factory=list)  # removed when the step fails (a half-made .venv)

    def shown(self) -> str:
        """The line printed before the step runs: a command to copy into this system's terminal."""
        if self.action is not None:
            return "# " + " ".join(self.argv)
        if windows():
            sets = [f'set "{name}="' for name in self.drop_env] + [f'set "{k}={v}"' for k, v in self.set_env.items()]
            return " && ".join(sets + [subprocess.list2cmdline(self.argv)])
        env = [f"-u {name}" for name in self.drop_env] + [f"{k}={v}" for k, v in self.set_env.items()]
        return ("env " + " ".join(env) + " " if env else "") + shlex.join(self.argv)


def windows() -> bool:
    return OS_NAME == "nt"


def _join(*parts: str) -> str:
    return (ntpath if windows() else posixpath).join(*parts)


def venv_scripts(venv: str = VENV) -> str:
    """The folder of a venv's programs, as ``sysconfig`` names it: ``bin`` or, on Windows, ``Scripts``."""
    names = sysconfig.get_scheme_names()
    scheme = "venv" if OS_NAME == os.name and "venv" in names else ("nt" if windows() else "posix_prefix")
    path = sysconfig.get_path("scripts", scheme, vars={"base": venv, "platbase": venv})
    return (ntpath if windows() else posixpath).normpath(path)


def venv_python(venv: str = VENV) -> str:
    """The venv's Python: ``.venv/bin/python``, or ``.venv\\Scripts\\python.exe`` on Windows."""
    return _join(venv_scripts(venv), "python.exe" if windows() else "python")


def _mtime(path: str) -> float:
    try:
        return os.path.getmtime(os.path.join(ROOT, path))
    except OSError:
        return 0.0


def student_wheel() -> str | None:
    """The gpulab wheel of a student edition (a folder without pyproject.toml), else None."""
    if os.path.exists(os.path.join(ROOT, "pyproject.toml")):
        return None
    wheels = sorted(os.path.basename(p) for p in glob.glob(os.path.join(ROOT, "gpulab-*.whl")))
    if len(wheels) != 1:
        raise SystemExit(f"error: no pyproject.toml here, so one gpulab-*.whl is needed beside course.py; "
                         f"found {wheels or 'none'}")
    return wheels[0]


def _touch(path: str) -> None:
    with open(os.path.join(ROOT, path), "a", encoding="utf-8"):
        os.utime(os.path.join(ROOT, path))


def install_steps() -> list[Step]:
    """What ``install`` still has to do: nothing when .venv is newer than its inputs."""
    python, stamp = venv_python(), _join(VENV, STAMP)
    wheel = student_wheel()
    target = [wheel] if wheel else ["-e", ".[test]"]
    inputs = ["constraints.txt", wheel] if wheel else ["pyproject.toml", "constraints.txt"]
    steps = []
    if not os.path.exists(os.path.join(ROOT, python)):
        steps.append(Step([sys.executable, "-m", "venv", VENV], timeout=600, undo=[VENV]))
    if steps or _mtime(stamp) == 0.0 or _mtime(stamp) < max(_mtime(p) for p in inputs):
        steps += [Step([python, "-m", "pip", "install", "--quiet", "--upgrade", "pip"], timeout=3600),
                  Step([python, "-m", "pip", "install", "--quiet", "-c", "constraints.txt", *target], timeout=3600),
                  Step(["mark", stamp, "installed"], action=lambda: _touch(stamp))]
    return steps


def _notebooks(paths: list[str]) -> list[str]:
    found: list[str] = []
    for pattern in paths or ["notebooks/*.ipynb"]:
        hits = sorted(glob.glob(os.path.join(ROOT, pattern))) if glob.has_magic(pattern) else [pattern]
        found += [os.path.relpath(h, ROOT).replace(os.sep, "/") if os.path.isabs(h) else h for h in hits]
    if not found:
        raise SystemExit(f"error: no notebook matches {' '.join(paths)}")
    return found


def _remove(paths: list[str]) -> None:
    for path in paths:
        full = os.path.join(ROOT, path)
        if os.path.isdir(full):
            shutil.rmtree(full)
        elif os.path.exists(full):
            os.remove(full)


def _zip(folder: str, archive: str) -> None:
    """``archive``: every file of ``folder``, stored under the folder's own name, in a stable order."""
    base = os.path.join(ROOT, folder)
    with zipfile.ZipFile(os.path.join(ROOT, archive), "w", zipfile.ZIP_DEFLATED) as out:
        for here, dirs, files in os.walk(base):
            dirs.sort()
            for name in sorted(files):
                path = os.path.join(here, name)
                out.write(path, os.path.relpath(path, os.path.dirname(base)))


def plan(command: str, *, python: str | None = None, jobs: int = DEFAULT_JOBS, paths: list[str] | None = None,
         extra: list[str] | None = None, zh: bool = False) -> list[Step]:
    """The steps of ``command`` after the install, with ``python`` the environment's Python."""
    py, extra, n = python or venv_python(), list(extra or []), str(jobs)
    pytest = [py, "-m", "pytest", "-n", n, "--dist", "loadfile"]
    report = Step([py, "scripts/nbreport.py", "notebooks"])
    edition = [py, "scripts/student.py", "--out", "build/student", "--extra", *STUDENT_FILES, "--wheel-from", "dist"]
    wheel = Step([py, "-m", "pip", "wheel", "--quiet", "--no-deps", "--wheel-dir", "dist", "."], timeout=1800)
    eggs = sorted(os.path.basename(p) for p in glob.glob(os.path.join(ROOT, "*.egg-info")))
    gone = [VENV, ".pytest_cache", "build", *eggs]
    steps: dict[str, Callable[[], list[Step]]] = {
        "install": lambda: [],
        "lab": lambda: [Step([py, "-m", "jupyter", "lab", "--ServerApp.root_dir=.",
                               FIRST_NOTEBOOK_ZH if zh else FIRST_NOTEBOOK, *extra], NO_MPL)],
        "test": lambda: [Step(pytest + ["--ignore=tests/browser", "--ignore=notebooks/zh", "--durations=15", "tests",
                                        "notebooks", *NBVAL,
                                        *extra], NO_MPL), report],
        "test-unit": lambda: [Step(pytest + ["--ignore=tests/browser", "tests", *extra])],
        "test-notebooks": lambda: [Step(pytest + ["--ignore=notebooks/zh", "notebooks", *NBVAL, *extra], NO_MPL)],
        "test-browser": lambda: [Step(["bash", "scripts/browser_setup.sh"]),
                                 Step([py, "-m", "pytest", "-p", "no:cacheprovider", "-v", "-s", "tests/browser"],
                                      set_env={"GPULAB_REQUIRE_BROWSER": "1"})],
        "notebooks": lambda: [Step([py, "-m", "jupyter", "nbconvert", "--to", "notebook", "--execute", "--inplace",
                                    "--ExecutePreprocessor.timeout=300", "--ExecutePreprocessor.kernel_name=python3",
                                    *_notebooks(paths or [])], NO_MPL), report],
        "report": lambda: [report],
        "preflight": lambda: [Step([py, "-m", "gpulab", "preflight", *extra])],
        "student": lambda: [wheel, Step(edition + ["--answers", "build/answers.md"]),
                            Step(["zip", "build/student", "into", "build/student.zip"],
                                 action=lambda: _zip("build/student", "build/student.zip"))],
        "student-check": lambda: [wheel, Step(edition + ["--check"], NO_MPL)],
        "answers": lambda: [Step([py, "scripts/student.py", "--answers", "build/answers.md", "--answers-only"])],
        "wheel": lambda: [wheel],
        "timings": lambda: [Step([py, "scripts/time_sections.py", "--write", "TEACHING.md"], NO_MPL)],
        "clean": lambda: [Step(["remove", *gone], action=lambda: _remove(gone))],
    }
    return steps[command]()


def run(step: Step) -> int:
    """Run one step from the course folder; Ctrl+C reaches the command, which decides when to stop."""
    if step.action is not None:
        step.action()
        return 0
    env = {k: v for k, v in os.environ.items() if k not in step.drop_env}
    env.update(step.set_env)
    argv = list(step.argv)
    if not os.path.isabs(argv[0]) and os.path.exists(os.path.join(ROOT, argv[0])):
        argv[0] = os.path.join(ROOT, argv[0])  # Windows looks for a relative program from our folder, not cwd
    try:
        proc = subprocess.Popen(argv, cwd=ROOT, env=env)
    except FileNotFoundError:
        print(f"error: {step.argv[0]} was not found: see TROUBLESHOOTING.md", file=sys.stderr)
        return 127
    while True:
        try:
            return proc.wait(timeout=step.timeout)
        except KeyboardInterrupt:
            continue  # the command got the same Ctrl+C; wait for it to finish
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            print(f"error: gave up after {step.timeout:g} s: {step.shown()}", file=sys.stderr)
            return 124


def parse(argv: list[str]) -> argparse.Namespace:
    extra: list[str] = []
    if "--" in argv:
        at = argv.index("--")
        argv, extra = argv[:at], argv[at + 1:]
    commands = "\n".join(f"  {name:<15} {text}" for name, text in HELP.items())
    parser = argparse.ArgumentParser(
        prog="course.py", formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Set up and run the gpulab course (Windows: py course.py COMMAND).",
        epilog=f"commands:\n{commands}\n\nexamples:\n  python course.py lab -- --no-browser --port=8899\n"
               "  python course.py notebooks notebooks/03_single_device.ipynb\n"
               "  python course.py preflight -- --json preflight-NAME.json")
    parser.add_argument("command", choices=list(HELP), metavar="COMMAND", help="one of the commands below")
    parser.add_argument("paths", nargs="*", help="notebooks (only for `notebooks`; default: all)")
    parser.add_argument("--jobs", type=int, default=DEFAULT_JOBS, help=f"pytest workers (default {DEFAULT_JOBS})")
    parser.add_argument("--dry-run", action="store_true", help="print the commands, run nothing")
    parser.add_argument("--zh", action="store_true", help="lab only: open the Chinese edition (notebooks/zh/)")
    parser.add_argument("--no-venv", action="store_true",
                        help="use this Python (an activated conda environment): no .venv, no install")
    args = parser.parse_intermixed_args(argv)
    if args.paths and args.command != "notebooks":
        parser.error(f"`{args.command}` takes no paths (got {' '.join(args.paths)}); "
                     f"pass tool options after --, e.g. course.py {args.command} -- --help")
    if args.zh and args.command != "lab":
        parser.error(f"--zh opens the Chinese notebooks in `lab`; `{args.command}` has no --zh")
    if args.jobs < 1:
        parser.error(f"--jobs {args.jobs}: give 1 or more workers")
    args.extra = extra
    return args


def main(argv: list[str] | None = None) -> int:
    if sys.version_info < MIN_PYTHON:
        print(f"error: the course needs Python {'.'.join(map(str, MIN_PYTHON))} or newer; this is "
              f"{sys.version.split()[0]} ({sys.executable}): see TROUBLESHOOTING.md", file=sys.stderr)
        return 2
    args = parse(sys.argv[1:] if argv is None else argv)
    if args.command in FULL_ONLY and not os.path.exists(os.path.join(ROOT, "pyproject.toml")):
        print(f"error: `{args.command}` needs the whole course folder; this one is a student edition "
              f"(it has: {', '.join(sorted(HELP.keys() - FULL_ONLY))})", file=sys.stderr)
        return 2
    if args.command == "test-browser" and windows():
        print("error: test-browser needs bash and Debian's chromium: run it on Linux", file=sys.stderr)
        return 2
    python = sys.executable if args.no_venv else None
    needs_env = args.command not in ("clean",) and not args.no_venv
    steps = (install_steps() if needs_env else []) + plan(
        args.command, python=python, jobs=args.jobs, paths=args.paths, extra=args.extra, zh=args.zh)
    for step in steps:
        print(step.shown(), flush=True)
        if not args.dry_run:
            status = run(step)
            if status:
                _remove(step.undo)
                return status
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
