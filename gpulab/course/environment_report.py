"""The pre-class check's report: one machine's lines, its JSON, and a whole room summed up from those files.

``gpulab preflight`` prints ``format_check`` lines and ends with ``summary``; ``--json`` writes ``report``.
``gpulab preflight --summary FILES...`` reads the learners' JSON files (``room``): who is ready, and each
problem once with its fix and who has it. A file that cannot be read costs one line of error, never the
rest of the room.
"""

from __future__ import annotations

import glob
import json
import platform
import time
from collections import defaultdict
from dataclasses import asdict, dataclass
from pathlib import Path

from gpulab.course.environment import INSTALL_FIX, NOTE, OK, PROBLEM, Check

HELP_PAGE = "TROUBLESHOOTING.md"
# The section of HELP_PAGE for a PROBLEM of each check; any other name is a package.
HELP = {"python": "the-course-needs-a-newer-python", "package": "a-package-is-missing-or-too-old",
        "disk": "the-disk-is-full", "rendezvous": "two-processes-cannot-meet",
        "kernel": "a-notebook-cannot-import-gpulab"}
STATUSES = (OK, NOTE, PROBLEM)


def passed(checks: list[Check]) -> bool:
    """True when no check says PROBLEM."""
    return all(c.status != PROBLEM for c in checks)


def help_link(check: Check) -> str:
    """``TROUBLESHOOTING.md#section`` for a PROBLEM, '' otherwise."""
    if check.status != PROBLEM:
        return ""
    key = "package" if check.fix == INSTALL_FIX or check.name not in HELP else check.name
    return f"{HELP_PAGE}#{HELP[key]}"


def format_check(check: Check) -> str:
    """One report line, the fix on the next when there is one, and for a PROBLEM where to read more."""
    line = f"{check.status:<8} {check.name:<13} {check.detail}"
    line += f"\n{'':<8} {'fix:':<13} {check.fix}" if check.fix else ""
    return line + (f"\n{'':<8} {'help:':<13} {help_link(check)}" if help_link(check) else "")


def summary(checks: list[Check]) -> str:
    """The last line of the report."""
    problems = sum(c.status == PROBLEM for c in checks)
    if not problems:
        return "Ready: every check passed, this machine can run the course."
    return f"Not ready: {problems} problem(s). Apply each fix, then run `gpulab preflight` again."


def report(checks: list[Check]) -> dict:
    """The JSON report a teacher collects."""
    from gpulab import __version__

    return {"gpulab": __version__, "python": platform.python_version(), "platform": platform.platform(terse=True),
            "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "ready": passed(checks),
            "checks": [asdict(c) for c in checks]}


@dataclass(frozen=True)
class Learner:
    """One learner's report, read back from its JSON file."""

    name: str
    system: str
    checks: tuple[Check, ...]

    @property
    def ready(self) -> bool:
        return passed(list(self.checks))


def learner_name(path: str | Path) -> str:
    """``preflight-amira.json`` -> ``amira`` (the file name is all a report says about who sent it)."""
    stem = Path(path).stem
    for prefix in ("preflight-", "preflight_"):
        if stem.lower().startswith(prefix) and len(stem) > len(prefix):
            return stem[len(prefix):]
    return stem


def read_learner(path: str | Path) -> Learner:
    """The report in ``path``; ValueError with one line that says what is wrong with the file."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise ValueError(f"cannot read it ({exc.strerror or type(exc).__name__})") from None
    except UnicodeDecodeError:
        raise ValueError("not a text file: expected the JSON of `gpulab preflight --json FILE`") from None
    except json.JSONDecodeError as exc:
        raise ValueError(f"not JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})") from None
    if not isinstance(data, dict) or not isinstance(data.get("checks"), list):
        raise ValueError("no list of \"checks\": expected the JSON of `gpulab preflight --json FILE`")
    checks = []
    for i, item in enumerate(data["checks"]):
        if not isinstance(item, dict) or not all(isinstance(item.get(k), str) for k in ("name", "status", "detail")):
            raise ValueError(f"check {i} needs the text fields name, status and detail, got {item!r:.60}")
        if item["status"] not in STATUSES:
            raise ValueError(f"check {i} ({item['name']}) has status {item['status']!r}, "
                             f"not one of {', '.join(STATUSES)}")
        checks.append(Check(item["name"], item["status"], item["detail"], str(item.get("fix") or "")))
    system = str(data.get("platform") or "unknown").split("-")[0] or "unknown"
    return Learner(learner_name(path), system, tuple(checks))


def expand(patterns: list[str]) -> list[str]:
    """File names, with ``*.json`` patterns expanded here (Windows' shells leave them as they are)."""
    found: list[str] = []
    for pattern in patterns:
        hits = sorted(glob.glob(pattern)) if glob.has_magic(pattern) else [pattern]
        found += hits or [pattern]  # a pattern that matches nothing is reported as a missing file
    return found


def _grouped(learners: list[Learner], status: str) -> list[str]:
    who: dict[tuple[str, str], list[str]] = defaultdict(list)
    example: dict[tuple[str, str], Check] = {}
    for learner in learners:
        for check in learner.checks:
            if check.status == status:
                key = (check.name, check.fix)
                who[key].append(learner.name)
                example.setdefault(key, check)
    lines = []
    for key in sorted(who, key=lambda k: (-len(who[k]), k)):
        check = example[key]
        lines.append(f"  {len(who[key])} x {check.name}: {check.detail}  ({', '.join(who[key])})")
        lines += [f"      fix:  {check.fix}"] if check.fix else []
        lines += [f"      help: {help_link(check)}"] if help_link(check) else []
    return lines


def room(paths: list[str]) -> tuple[str, list[str], bool]:
    """``(summary, one error line per unreadable file, every learner ready)`` for the reports in ``paths``."""
    learners, errors = [], []
    for path in expand(paths):
        try:
            learners.append(read_learner(path))
        except ValueError as exc:
            errors.append(f"error: {path}: {exc}")
    ready = [x.name for x in learners if x.ready]
    waiting = [f"{x.name} ({sum(c.status == PROBLEM for c in x.checks)} problem(s))"
               for x in learners if not x.ready]
    systems: dict[str, int] = defaultdict(int)
    for learner in learners:
        systems[learner.system] += 1
    lines = [f"Room: {len(learners)} report(s), {len(ready)} ready, {len(waiting)} not ready"
             + (f", {len(errors)} file(s) unreadable (below)." if errors else "."),
             f"Ready ({len(ready)}): {', '.join(ready) or '-'}",
             f"Not ready ({len(waiting)}): {', '.join(waiting) or '-'}"]
    if systems:
        lines.append("Systems: " + ", ".join(f"{name} {n}" for name, n in sorted(systems.items(), key=lambda kv: kv[0].lower())))
    problems, notes = _grouped(learners, PROBLEM), _grouped(learners, NOTE)
    lines += ["", "Problems, most common first:", *problems] if problems else []
    lines += ["", "Notes (the course runs; advice):", *notes] if notes else []
    return "\n".join(lines), errors, bool(learners) and not waiting
