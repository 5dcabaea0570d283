"""Time each notebook's sections and write the class plans of TEACHING.md from the figures.

    python scripts/time_sections.py                          # run every notebook, print the table
    python scripts/time_sections.py --write TEACHING.md      # ... and rewrite the block in TEACHING.md
    python scripts/time_sections.py --committed              # use the committed outputs' timestamps, run nothing
    python scripts/time_sections.py --check TEACHING.md      # exit 1 if the block is out of step with the notebooks

A section starts at a markdown line beginning with ``## ``; what comes before the first one is the
"Introduction". A section's run time is the sum of its code cells' execution times, from the timestamps
nbclient (or ``make notebooks``) records in each cell's metadata. Its reading time is estimated from
word counts: READ_WPM words of prose and CODE_WPM words of code per minute. Exercises (sections with a
cell tagged ``exercise``) and self-checks (a ``quiz(`` call) get a fixed allowance (EXERCISE_MIN,
QUIZ_MIN), stated as such. Which sections each class plan leaves
for after class, or shows as a teacher's demo, is PLAN below. ``--check`` re-renders the block from the
run times written in it and the current notebooks, so stale sections or word counts are caught
without running anything.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
START, END = "<!-- timings:start -->", "<!-- timings:end -->"
READ_WPM, CODE_WPM = 150, 75
EXERCISE_MIN, QUIZ_MIN = 5, 2
BREAK_MIN = {"core": 10, "full": 20, "further": 50}  # 10 minutes: one in 2 hours, two in half a day, five in a day
INTRO_MIN = {"core": 10, "full": 10, "further": 10}  # welcome, the day's goals, every laptop opens notebook 01
TARGET_MIN = {"core": 120, "full": 240, "further": 480}  # what is left is slack: questions, set-up trouble
PLAN_NAMES = {"core": "Core plan", "full": "Full plan", "further": "Going further"}
# The notebooks (first, last) a plan covers; a plan not named here covers every notebook.
SCOPE = {"core": ("01", "07"), "full": ("01", "07"), "further": ("08", "15")}
UNMEASURED = "Not measured yet: run `make timings` on an idle machine."
AFTER, DEMO, OUT = "after class", "demo", "-"
# The 2-hour core plan is the path from one GPU to many (01-05); 06 and 07 follow after class or in a second
# session, and its self-check questions are homework (some ask about sections it leaves for after class).
# Each plan also has an introduction, breaks, and what is left of its target as slack (questions, set-up
# trouble). In notebook 05 learners run one launch (section 2's script); the teacher demos the others.
# Sections (by the start of their title, "" for all) that a plan does not have students run themselves:
QUIZ = "Check yourself"
PLAN: dict[str, dict[str, dict[str, str]]] = {
    "core": {
        "01": {"The article this course examines": AFTER, "Reason 3": AFTER, "Explore": AFTER, QUIZ: AFTER},
        "02": {"`nvidia-smi`": AFTER, "Other accelerators": AFTER, "Hiding GPUs": AFTER, "The whole report": AFTER,
               "Exercise": AFTER, QUIZ: AFTER},
        "03": {"2. Timing done right": DEMO, "3. Host-to-device": AFTER, "4. Small data": DEMO, QUIZ: AFTER},
        "04": {"1. The article's code": AFTER, "3. The real thing": AFTER, "4. Saving and loading": AFTER,
               "5. Why PyTorch recommends": AFTER, QUIZ: AFTER},
        "05": {"1. Why DDP needs a script": DEMO, "3. The article's code": AFTER, "4. Launching": DEMO,
               "6. The same weights": DEMO, "7. Try it": AFTER, "8. Is it faster": AFTER, "9. Surviving a crash": DEMO,
               "10. Several machines": AFTER, "11. Exercise": AFTER, QUIZ: AFTER},
        "06": {"": AFTER},
        "07": {"": AFTER},
    },
    "full": {
        "01": {"Explore": AFTER},
        "02": {"`nvidia-smi`": AFTER, "Other accelerators": AFTER, "Hiding GPUs": AFTER, "Exercise": AFTER},
        "03": {"3. Host-to-device": AFTER},
        "04": {"3. The real thing": AFTER, "4. Saving and loading": AFTER},
        "05": {"3. The article's code": AFTER, "4. Launching": DEMO, "7. Try it": AFTER, "8. Is it faster": AFTER,
               "9. Surviving a crash": DEMO, "10. Several machines": AFTER},
        "06": {"4. Is the model any good": AFTER, "5. Repeated evaluation": AFTER},
        "07": {"1. An even number of GPUs": AFTER, "2. Several GPUs for small data": AFTER, "Where to go next": AFTER},
    },
    # A day for 08-15: the self-check questions are homework, and two side sections are left for after class
    # (a vocabulary that does not divide the ranks; fewer micro-batches than stages).
    "further": {**{nb: {QUIZ: AFTER} for nb in ("08", "09", "10", "11", "14", "15")},
                "12": {"6. A vocabulary that does not divide": AFTER, QUIZ: AFTER},
                "13": {"5. Fewer micro-batches than stages": AFTER, QUIZ: AFTER}},
}


@dataclass
class Section:
    """One ``## `` section of a notebook and what it costs in class."""

    notebook: str
    title: str
    prose: int = 0
    code: int = 0
    exercise: bool = False
    quiz: bool = False
    run_s: float | None = None

    @property
    def read_min(self) -> float:
        return self.prose / READ_WPM + self.code / CODE_WPM

    @property
    def extra_min(self) -> int:
        return EXERCISE_MIN * self.exercise + QUIZ_MIN * self.quiz

    @property
    def minutes(self) -> float | None:
        return None if self.run_s is None else self.read_min + self.run_s / 60 + self.extra_min


def _source(cell: dict) -> str:
    src = cell.get("source", "")
    return "".join(src) if isinstance(src, list) else str(src)


def cell_seconds(cell: dict) -> float | None:
    """Seconds a code cell ran, from the timestamps Jupyter records (None when there are none)."""
    times = cell.get("metadata", {}).get("execution", {})
    start, end = times.get("iopub.status.busy"), times.get("shell.execute_reply")
    if not (start and end):
        return None
    parse = lambda t: datetime.datetime.fromisoformat(t.replace("Z", "+00:00"))  # noqa: E731 (3.10 has no Z)
    return (parse(end) - parse(start)).total_seconds()


def sections(number: str, cells: list[dict], timed: bool = True) -> list[Section]:
    """The notebook's sections with word counts, exercise/quiz flags and (if ``timed``) run seconds."""
    found = [Section(number, "Introduction", run_s=0.0 if timed else None)]
    for cell in cells:
        text = _source(cell)
        if cell["cell_type"] == "markdown":
            for line in text.splitlines():
                if line.startswith("## "):
                    found.append(Section(number, line[3:].strip(), run_s=0.0 if timed else None))
                found[-1].prose += len(line.split())
            continue
        here = found[-1]
        here.code += len(text.split())
        here.exercise |= "exercise" in cell.get("metadata", {}).get("tags", [])
        here.quiz |= "quiz(" in text
        if timed:
            seconds = cell_seconds(cell)
            if seconds is None:
                raise ValueError(f"notebook {number}: a code cell has no execution timestamps (run it first)")
            here.run_s += seconds
    return found


def mode(plan: str, section: Section) -> str:
    """How ``plan`` uses the section: run, demo, after class, or OUT when its notebook is not in the plan."""
    first, last = SCOPE.get(plan, ("00", "99"))
    if not first <= section.notebook <= last:
        return OUT
    for prefix, how in PLAN[plan].get(section.notebook, {}).items():
        if section.title.startswith(prefix):
            return how
    return "run"


def check_plan(all_sections: list[Section]) -> None:
    """Every PLAN entry names a section that exists."""
    titles = {(s.notebook, s.title) for s in all_sections}
    for plan, notebooks in PLAN.items():
        for nb, entries in notebooks.items():
            for prefix in entries:
                if not any(n == nb and t.startswith(prefix) for n, t in titles):
                    raise ValueError(f"PLAN[{plan!r}][{nb!r}] names {prefix!r}, which is no section title of {nb}")


def _fmt(minutes: float | None, *, whole: bool = True) -> str:
    if minutes is None:
        return "TBD"
    return str(max(1, round(minutes))) if whole else f"{minutes:.1f}"


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def render(all_sections: list[Section], measured: str) -> str:
    """The generated block: plan totals per notebook, then every section."""
    check_plan(all_sections)
    numbers = sorted({s.notebook for s in all_sections})
    timed = all(s.run_s is not None for s in all_sections)
    plans = list(PLAN)
    taught = lambda p, s: mode(p, s) not in (AFTER, OUT)  # noqa: E731
    names = " | ".join(f"{PLAN_NAMES.get(p, p)} (min)" for p in plans)
    lines = [START, measured, "", f"| Notebook | {names} |", "|---|" + "---:|" * len(plans)]
    totals = {p: {n: sum(s.minutes for s in all_sections if s.notebook == n and taught(p, s)) if timed else None
                  for n in numbers} for p in plans}
    for n in numbers:
        here = [s for s in all_sections if s.notebook == n]
        shown = [_fmt(totals[p][n]) if any(taught(p, s) for s in here)
                 else (OUT if all(mode(p, s) == OUT for s in here) else AFTER) for p in plans]
        lines.append(f"| {n} | {' | '.join(shown)} |")
    fixed = {p: BREAK_MIN.get(p, 0) + INTRO_MIN.get(p, 0) for p in plans}
    grand = {p: (sum(totals[p].values()) + fixed[p]) if timed else None for p in plans}
    lines.append(f"| introduction | {' | '.join(str(INTRO_MIN.get(p, 0)) for p in plans)} |")
    lines.append(f"| breaks | {' | '.join(str(BREAK_MIN.get(p, 0)) for p in plans)} |")
    targets = " / ".join(str(TARGET_MIN.get(p, "-")) for p in plans)
    lines.append(f"| **total** (target: {targets}) | {' | '.join(f'**{_fmt(grand[p])}**' for p in plans)} |")
    slack = [str(round(TARGET_MIN[p] - grand[p])) if timed and p in TARGET_MIN else "TBD" for p in plans]
    lines.append(f"| slack: questions and set-up trouble | {' | '.join(slack)} |")
    lines += ["", "| Notebook | Section | Words (prose / code) | Run (s) | Read (min) | Exercise + quiz (min) | "
                  + " | ".join(PLAN_NAMES.get(p, p) for p in plans) + " |", "|---|---|---:|---:|---:|---:|"
              + "---|" * len(plans)]
    for s in all_sections:
        run = "TBD" if s.run_s is None else f"{s.run_s:.1f}"
        uses = [f"{mode(p, s)}, {_fmt(s.minutes)} min" if taught(p, s) else mode(p, s) for p in plans]
        lines.append(f"| {s.notebook} | {_cell(s.title)} | {s.prose} / {s.code} | {run} | {_fmt(s.read_min, whole=False)}"
                     f" | {s.extra_min} | {' | '.join(uses)} |")
    return "\n".join(lines + [END])


def parse_block(doc: str) -> tuple[str, dict[tuple[str, str], float | None]]:
    """The 'measured' line and the run seconds per (notebook, section) written in a document's block."""
    if doc.count(START) != 1 or doc.count(END) != 1:
        raise ValueError(f"the document needs exactly one {START} ... {END} block")
    block = doc.split(START, 1)[1].split(END, 1)[0].strip().splitlines()
    runs = {}
    for line in block:
        cells = [c.strip().replace("\\|", "|") for c in re.split(r"(?<!\\)\|", line)[1:-1]]
        if len(cells) == 6 + len(PLAN) and re.fullmatch(r"\d{2}", cells[0]):
            runs[(cells[0], cells[1])] = None if cells[3] == "TBD" else float(cells[3])
    return (block[0] if block else ""), runs


def load(paths: list[Path], timed: bool) -> list[Section]:
    found = []
    for path in paths:
        cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
        found += sections(path.name[:2], cells, timed)
    return found


def measure(path: Path, timeout: int) -> list[dict]:
    """Run the notebook top to bottom (nbclient, in memory, cwd = its folder); the executed cells."""
    import nbformat
    from nbclient import NotebookClient

    os.environ.pop("MPLBACKEND", None)  # the kernel inherits it: it would hide figures
    nb = nbformat.read(path, as_version=4)
    NotebookClient(nb, timeout=timeout, kernel_name="python3", record_timing=True,
                   resources={"metadata": {"path": str(path.parent)}}).execute(stderr=subprocess.DEVNULL)
    return nb["cells"]


def replace_block(doc_path: Path, block: str) -> None:
    from gpulab.atomic import atomic_write

    doc = doc_path.read_text(encoding="utf-8")
    parse_block(doc)
    before, rest = doc.split(START, 1)
    new = before + block + rest.split(END, 1)[1]
    atomic_write(doc_path, lambda tmp: tmp.write_text(new, encoding="utf-8"))


def check(doc_path: Path, paths: list[Path]) -> str:
    """'' when the document's block is what the notebooks and its own run times give, else what to do."""
    measured, runs = parse_block(doc_path.read_text(encoding="utf-8"))
    found = load(paths, timed=False)
    if {(s.notebook, s.title) for s in found} != set(runs):
        return f"{doc_path.name}: the sections changed: run `make timings` (or scripts/time_sections.py --write)"
    for s in found:
        s.run_s = runs[(s.notebook, s.title)]
    if all(s.run_s is None for s in found):
        measured = UNMEASURED
    if render(found, measured) != START + doc_path.read_text(encoding="utf-8").split(START, 1)[1].split(END, 1)[0] + END:
        return f"{doc_path.name}: the timing block is out of step: run scripts/time_sections.py --write {doc_path.name}"
    return ""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Time each notebook's sections; write TEACHING.md's plans.")
    parser.add_argument("notebooks", nargs="*", type=Path, help="default: notebooks/*.ipynb")
    parser.add_argument("--write", type=Path, metavar="DOC", help="rewrite the timing block of DOC (TEACHING.md)")
    parser.add_argument("--check", type=Path, metavar="DOC", help="exit 1 if DOC's timing block is out of step")
    parser.add_argument("--committed", action="store_true", help="use the notebooks' committed timestamps")
    parser.add_argument("--placeholders", action="store_true", help="write TBD for every run time (runs nothing)")
    parser.add_argument("--timeout", type=int, default=300, help="seconds allowed per cell (default 300)")
    args = parser.parse_args(argv)
    paths = args.notebooks or sorted((ROOT / "notebooks").glob("*.ipynb"))
    try:
        if args.check:
            problem = check(args.check, paths)
            print(problem or f"{args.check.name}: the timing block is in step")
            return 1 if problem else 0
        if args.placeholders:
            found, measured = load(paths, timed=False), UNMEASURED
        elif args.committed:
            found = load(paths, timed=True)
            measured = "Run times from the timestamps of the committed notebooks (`make notebooks`)."
        else:
            found = []
            for path in paths:
                print(f"running {path.name} ...", file=sys.stderr, flush=True)
                found += sections(path.name[:2], measure(path, args.timeout))
            import torch

            gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no GPU"
            measured = (f"Measured {datetime.date.today():%Y-%m-%d} with `make timings`: {os.cpu_count()} CPU cores, "
                        f"{gpu}, Python {platform.python_version()}, torch {torch.__version__}.")
        block = render(found, measured)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(block)
    if args.write:
        replace_block(args.write, block)
        print(f"wrote the timing block of {args.write}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
