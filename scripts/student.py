"""Build the student edition of every notebook: solutions removed, exercise cells cleared.

    python scripts/student.py                  # notebooks/*.ipynb -> build/student/notebooks/
    python scripts/student.py --out DIR        # another output folder
    python scripts/student.py --check          # build, then run every student notebook top to bottom
    python scripts/student.py --answers build/answers.md --answers-only   # only the teacher's answer key

For laptops, ``--extra course.py constraints.txt ... --wheel-from dist`` also puts those files and the gpulab
wheel beside ``notebooks/`` with a short README.md, so the folder, zipped, is all a learner needs:
unzip it, then ``python3 course.py lab`` (Windows: ``py course.py lab``) installs the wheel and opens notebook 01.

Cells are marked in the source notebooks with cell tags, so the build never guesses:

- ``solution``: removed from the student edition (the "Solution" heading, the solution code, and any
  cell that only works once the exercise is solved, such as a second run of the check);
- ``exercise``: kept, with its outputs cleared (the stub the learner edits and the check below it).

Every other cell keeps its outputs, so a student sees what to expect. A notebook whose code calls an
exercise check (a ``check_...`` function of ``gpulab.exercises``) must tag that cell and have at least one ``solution`` cell, and a
collapsed code cell must be tagged ``solution``; otherwise the build stops with a one-line error, so an
untagged notebook can never leak its solutions. Files the notebooks point to with ``../`` (links,
paths in code) are copied beside them, so links and those cells still work.

The same sources always give byte-identical output. The output folder is replaced as a whole (built
beside it, then renamed), and only when it is missing, empty or an earlier student build.
"""
from __future__ import annotations

import argparse
import copy
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SOLUTION, EXERCISE = "solution", "exercise"
MARKER = ".student-edition"
HEADER_ID = "student-edition"
README = """# gpulab, student edition

You need Python 3.10 or newer. Open a terminal in this folder and run:

    python3 course.py lab

On Windows: `py course.py lab`. The first start creates `.venv` and installs the course from the
`gpulab-*.whl` file beside this one (a few minutes: it downloads PyTorch). Later starts open at once.
Start with notebook 01 and follow the "Next" link at the bottom of each notebook.
中文版：`python3 course.py lab --zh`（Windows：`py course.py lab --zh`）打开中文的笔记本 01。
`python3 course.py preflight` checks that the course will run on this machine.
If something fails, see TROUBLESHOOTING.md in this folder.
"""
HEADER = ("> **Student edition.** The solutions are removed and the exercise cells are cleared: the answers are "
          "yours to find. Every other output is from a complete run, so you can see what to expect.")


def _exercise_checks(folder: Path = ROOT / "gpulab" / "exercises") -> re.Pattern:
    """A call of any exercise check, i.e. of a top-level ``def check_...`` in gpulab/exercises/."""
    names = sorted({n for path in folder.glob("*.py")
                    for n in re.findall(r"^def (check_\w+)\(", path.read_text(encoding="utf-8"), flags=re.M)})
    return re.compile(rf"\b({'|'.join(names)})\s*\(" if names else r"(?!)")


CHECK_CALL = _exercise_checks()
MD_LINK = re.compile(r"\]\(((?:\.\./|figures/)[^)\s#]+)")  # files beside the notebooks: ../X and figures/X
CODE_PATH = re.compile(r"""["'](\.\./[^"'\s]+)["']""")
ANSI = re.compile(r"\x1b\[[0-9;]*m")


class BuildError(ValueError):
    """A source notebook cannot be turned into a student edition safely."""


def source(cell: dict) -> str:
    src = cell.get("source", "")
    return "".join(src) if isinstance(src, list) else str(src)


def tags(cell: dict) -> list[str]:
    return list(cell.get("metadata", {}).get("tags", []))


def check_tags(name: str, cells: list[dict]) -> None:
    """Raise ``BuildError`` when the tags cannot keep the solutions out of the student edition."""
    checks = []
    for i, cell in enumerate(cells):
        marked = set(tags(cell)) & {SOLUTION, EXERCISE}
        if len(marked) == 2:
            raise BuildError(f"{name}: cell {i} is tagged both 'exercise' and 'solution': keep one")
        if cell["cell_type"] != "code":
            continue
        call = CHECK_CALL.search(source(cell))
        if call:
            checks.append(i)
            if not marked:
                raise BuildError(f"{name}: cell {i} calls {call.group(0).rstrip('( ')}() but is tagged neither "
                                 f"'exercise' nor 'solution'")
        if cell.get("metadata", {}).get("jupyter", {}).get("source_hidden") and not marked:
            raise BuildError(f"{name}: cell {i} is collapsed (source_hidden) but not tagged 'solution'")
    exercises = [i for i, c in enumerate(cells) if EXERCISE in tags(c)]
    if (checks or exercises) and not any(SOLUTION in tags(c) for c in cells):
        first = (checks or exercises)[0]
        raise BuildError(f"{name}: cell {first} is an exercise but no cell is tagged 'solution': "
                         f"tag the solution cells so they are left out")


def student_cells(name: str, cells: list[dict]) -> list[dict]:
    """The student edition's cells: solutions dropped, exercises cleared, a header after the title."""
    check_tags(name, cells)
    out = []
    for cell in cells:
        if SOLUTION in tags(cell):
            continue
        cell = copy.deepcopy(cell)
        if EXERCISE in tags(cell) and cell["cell_type"] == "code":
            cell["outputs"], cell["execution_count"] = [], None
            cell.get("metadata", {}).pop("execution", None)
        out.append(cell)
    header = {"cell_type": "markdown", "id": HEADER_ID, "metadata": {"tags": [HEADER_ID]}, "source": HEADER}
    if any(c.get("id") == HEADER_ID for c in out):
        raise BuildError(f"{name}: a cell already has the id {HEADER_ID!r}")
    if "id" not in (out[0] if out else {}):
        header.pop("id")
    return out[:1] + [header] + out[1:]


def referenced_files(cells: list[dict], kind: str | None = None) -> list[str]:
    """Files that markdown links or images (``../X``, ``figures/X``) or code strings (``../X``) point to, in order;
    ``kind="markdown"`` or ``"code"`` keeps one of the two."""
    found: list[str] = []
    for cell in cells:
        if kind and cell["cell_type"] != kind:
            continue
        pattern = MD_LINK if cell["cell_type"] == "markdown" else CODE_PATH
        for path in pattern.findall(source(cell)):
            if path not in found:
                found.append(path)
    return found


def dumps(nb: dict) -> str:
    """The notebook as text, formatted as Jupyter writes it (stable key order)."""
    return json.dumps(nb, indent=1, sort_keys=True, ensure_ascii=False) + "\n"


def _notebooks_into(src: Path, folder: Path, root: Path, code_from: Path | None = None) -> tuple[list[Path], dict[Path, Path]]:
    """Student copies of ``src/*.ipynb`` in ``folder``; ``{target: origin}`` of every file they refer to.

    ``code_from``: the folder the code's ``../X`` paths were written from (the zh notebooks carry the English
    code unchanged, so their code means the file beside the English notebooks; it is copied where it resolves
    from ``folder``)."""
    folder.mkdir(parents=True)
    written, files = [], {}
    for path in sorted(src.glob("*.ipynb")):
        nb = json.loads(path.read_text(encoding="utf-8"))
        nb["cells"] = student_cells(path.name, nb.get("cells", []))
        target = folder / path.name
        target.write_text(dumps(nb), encoding="utf-8")
        written.append(target)
        refs = [(ref, src) for ref in referenced_files(nb["cells"], "markdown")]
        refs += [(ref, code_from or src) for ref in referenced_files(nb["cells"], "code")]
        for ref, base in refs:
            origin = (base / ref).resolve()
            if not origin.is_relative_to(root.resolve()):
                raise BuildError(f"{path.name}: {ref} points outside the repository")
            if not origin.is_file():
                raise BuildError(f"{path.name}: {ref} is not a file (links must point to files that exist)")
            files.setdefault((folder / ref).resolve(), origin)
    return written, files


def build_into(src: Path, dest: Path, handout: tuple[Path, ...] = ()) -> list[Path]:
    """Write the student edition of every notebook in ``src`` to ``dest/<src name>/``; return the files.

    The Chinese edition in ``src/zh/`` (when there is one) goes to ``dest/<src name>/zh/`` the same way.
    ``handout`` files are copied into ``dest`` itself, beside the notebooks' folder, with README.md.
    """
    if not sorted(src.glob("*.ipynb")):
        raise BuildError(f"no notebooks in {src}")
    folder = dest / src.name
    written, files = _notebooks_into(src, folder, src.parent)
    if sorted((src / "zh").glob("*.ipynb")):
        zh_written, zh_files = _notebooks_into(src / "zh", folder / "zh", src.parent, code_from=src)
        written += zh_written
        for target, origin in zh_files.items():
            files.setdefault(target, origin)
    for target, origin in sorted(files.items()):
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(origin, target)
        written.append(target)
    for path in handout:
        if not Path(path).is_file():
            raise BuildError(f"{path} is not a file (--extra and --wheel-from name files to hand out)")
        written.append(Path(shutil.copyfile(path, dest / Path(path).name)))
    if handout:
        (dest / "README.md").write_text(README, encoding="utf-8")
        written.append(dest / "README.md")
    return written


def build(src: Path, out: Path, handout: tuple[Path, ...] = ()) -> list[Path]:
    """Build into a fresh folder beside ``out``, then put it in place of ``out``."""
    src, out = Path(src).resolve(), Path(out).resolve()
    if out.exists() and (not out.is_dir() or (any(out.iterdir()) and not (out / MARKER).exists())):
        raise BuildError(f"{out} exists and is not an earlier student build: choose another --out")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    old = out.with_name(f"{tmp.name}.old")
    try:
        written = build_into(src, tmp, tuple(handout))
        (tmp / MARKER).write_text("built by scripts/student.py; safe to delete\n", encoding="utf-8")
        if out.exists():
            os.replace(out, old)
        os.replace(tmp, out)
    except BaseException:
        if old.exists() and not out.exists():
            os.replace(old, out)
        raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.rmtree(old, ignore_errors=True)
    return [out / p.relative_to(tmp) for p in written]


def course_wheel(folder: Path) -> Path:
    """The wheel of the installed gpulab version in ``folder`` (``python course.py wheel`` writes it)."""
    from importlib import metadata

    try:
        version = metadata.version("gpulab")
    except metadata.PackageNotFoundError:
        raise BuildError("gpulab is not installed in this Python (a checkout on PYTHONPATH has no version to "
                         "name the wheel by): install the course first with `python course.py install`") from None
    wheel = Path(folder) / f"gpulab-{version}-py3-none-any.whl"
    if not wheel.is_file():
        raise BuildError(f"{wheel} is missing: build it first with `python course.py wheel`")
    return wheel


def write_answers(src: Path, path: Path, out: Path | None = None) -> None:
    """The teacher's answer key (``gpulab.course.answer_key``) of the notebooks in ``src``, kept out of ``out``;
    the Chinese edition's key (``src/zh``) beside it, named by :func:`zh_key`."""
    from gpulab.atomic import atomic_write
    from gpulab.course.answer_key import document

    path = Path(path).resolve()
    if out is not None and path.is_relative_to(Path(out).resolve()):
        raise BuildError(f"{path} is inside the student edition {out}: write the answer key elsewhere")
    text = document(sorted(Path(src).glob("*.ipynb")), SOLUTION)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, lambda tmp: tmp.write_text(text, encoding="utf-8"))
    zh = sorted((Path(src) / "zh").glob("*.ipynb"))
    if zh:  # the Chinese edition's key beside it: answers.zh-CN.md
        text_zh = document(zh, SOLUTION, lang="zh")
        atomic_write(zh_key(path), lambda tmp: tmp.write_text(text_zh, encoding="utf-8"))


def zh_key(path: Path) -> Path:
    """Where the Chinese edition's answer key goes beside ``path``: ``answers.md`` -> ``answers.zh-CN.md``."""
    return Path(path).with_name(f"{Path(path).stem}.zh-CN{Path(path).suffix}")


def run_notebook(path: Path, timeout: int = 300) -> tuple[dict, str]:
    """Run one notebook top to bottom in memory (nbclient, cwd = its folder): ``(executed notebook, problem or '')``."""
    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError, CellTimeoutError, DeadKernelError

    os.environ.pop("MPLBACKEND", None)  # the kernel inherits it: it would hide figures
    nb = nbformat.read(path, as_version=4)
    client = NotebookClient(nb, timeout=timeout, kernel_name="python3",
                            resources={"metadata": {"path": str(Path(path).parent)}})
    try:
        client.execute(stderr=subprocess.DEVNULL)  # the kernel's own start-up chatter
    except (CellExecutionError, CellTimeoutError, DeadKernelError) as exc:
        lines = [line for line in ANSI.sub("", str(exc)).strip().splitlines() if line.strip()]
        return nb, lines[-1] if lines else type(exc).__name__
    return nb, ""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Build the student edition of the notebooks.")
    parser.add_argument("--src", type=Path, default=ROOT / "notebooks", help="source notebooks (default notebooks/)")
    parser.add_argument("--out", type=Path, default=ROOT / "build" / "student",
                        help="output folder (default build/student)")
    parser.add_argument("--check", action="store_true", help="then run every student notebook top to bottom")
    parser.add_argument("--timeout", type=int, default=300, help="seconds allowed per cell with --check (default 300)")
    parser.add_argument("--extra", type=Path, nargs="+", default=[], metavar="FILE",
                        help="files to put beside notebooks/ (course.py, constraints.txt, ...), with a README.md")
    parser.add_argument("--wheel-from", type=Path, metavar="DIR", help="also put the gpulab wheel from DIR there")
    parser.add_argument("--answers", type=Path, metavar="FILE", help="write the teacher's answer key to FILE")
    parser.add_argument("--answers-only", action="store_true", help="only the answer key, no student edition")
    args = parser.parse_args(argv)
    if args.answers_only and not args.answers:
        parser.error("--answers-only needs --answers FILE")
    try:
        if args.answers:
            write_answers(args.src, args.answers, None if args.answers_only else args.out)
            print(f"answer key: {args.answers}")
        if args.answers_only:
            return 0
        extra = [ROOT / p if not p.is_absolute() else p for p in args.extra]
        if args.wheel_from:
            extra.append(course_wheel(ROOT / args.wheel_from if not args.wheel_from.is_absolute() else args.wheel_from))
        written = build(args.src, args.out, tuple(extra))
    except BuildError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    folder = args.out.resolve() / args.src.resolve().name
    print(f"student edition: {sum(p.suffix == '.ipynb' for p in written)} notebooks in {folder} (zh/ included)")
    if not args.check:
        return 0
    failed = 0
    for path in sorted(folder.glob("*.ipynb")):
        _, problem = run_notebook(path, args.timeout)
        print(f"{'FAILED' if problem else 'ok':<7} {path.name}{': ' + problem if problem else ''}", flush=True)
        failed += bool(problem)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
