"""The teacher's answer key of the self-check questions, found by asking each question's own check.

A multiple-choice question stores its answer. A value question only has a check (``grade``), so its
answer is searched for: first every number the check compares the answer with (a probe number records
them), then, for a list answer, the ways to split a number of the question into a few non-increasing
parts. A candidate is the answer only when the check itself says ``Correct``, so the key cannot disagree
with the checks. ``scripts/student.py --answers FILE`` writes the key with the exercises' solutions.
"""

from __future__ import annotations

import ast
import re
from typing import Iterator

from gpulab.exercises import Question, chinese, in_chinese
from gpulab.exercises.quiz import notebook_key, questions

NUMBER = re.compile(r"(?<![\w.])\d[\d,_]*(?:\.\d+)?(?:e[+-]?\d+)?", re.I)
MAX_PARTS = 16  # a list answer has at most this many entries


class _Probe(float):
    """A number that notes every number it is compared with or subtracted from."""

    seen: list

    def __new__(cls, seen: list) -> "_Probe":
        probe = super().__new__(cls, 0.123456789)
        probe.seen = seen
        return probe

    def _note(self, other: object) -> None:
        if isinstance(other, (int, float)) and not isinstance(other, bool):
            self.seen.append(other)

    def __eq__(self, other: object) -> bool:
        self._note(other)
        return False

    def __ne__(self, other: object) -> bool:
        self._note(other)
        return True

    __hash__ = float.__hash__

    def __sub__(self, other):
        self._note(other)
        return float(self) - other

    def __rsub__(self, other):
        self._note(other)
        return other - float(self)

    def __lt__(self, other):
        self._note(other)
        return float(self) < other

    def __gt__(self, other):
        self._note(other)
        return float(self) > other


def _compared_numbers(question: Question) -> list[float]:
    seen: list = []
    try:
        question.check(_Probe(seen))
    except Exception:  # a check may reject a probe in its own way; the other candidates remain
        pass
    return seen


def _prompt_numbers(prompt: str) -> list[int]:
    found = []
    for text in NUMBER.findall(prompt):
        try:
            value = float(text.replace(",", "").replace("_", ""))
        except ValueError:
            continue
        if value.is_integer() and 0 < value <= 10_000:
            found.append(int(value))
    return found


def _partitions(total: int, parts: int, largest: int | None = None) -> Iterator[list[int]]:
    """Non-increasing lists of positive integers that add up to ``total``, with at most ``parts`` entries."""
    largest = total if largest is None else largest
    if total == 0:
        yield []
        return
    if parts == 0:
        return
    for first in range(min(total, largest), 0, -1):
        for rest in _partitions(total - first, parts - 1, first):
            yield [first, *rest]


def _list_candidates(question: Question) -> Iterator[list[int]]:
    numbers = _prompt_numbers(question.prompt)
    for total in numbers:
        for parts in sorted({n for n in numbers if n <= MAX_PARTS and n != total} or {MAX_PARTS}):
            if total <= 64:
                yield from _partitions(total, parts)


def _wants_list(question: Question) -> bool:
    try:
        return isinstance(ast.literal_eval(question.example), (list, tuple))
    except (ValueError, SyntaxError):
        return False


def solve(question: Question) -> object | None:
    """An answer the question's check calls correct: its letter, or a value; None when none is found."""
    if question.options:
        return question.answer
    if _wants_list(question):
        candidates: Iterator[object] = _list_candidates(question)
    else:
        candidates = (int(c) if float(c).is_integer() else c for c in _compared_numbers(question))
    for candidate in candidates:
        if question.check(candidate).ok:
            return candidate
    return None


def _shown(value: object) -> str:
    if isinstance(value, int) and abs(value) >= 10_000:
        return f"{value:,}"
    return repr(value) if not isinstance(value, float) else f"{value:g}"


#: the key's own words in each edition
WORDS = {
    "en": {"answer": "Answer: ", "wrong": "*Wrong:*", "none": "**Answer: not found automatically.** Try candidates with "
           "`gpulab.exercises.quiz.check(NOTEBOOK, QUESTION, ANSWER)`.", "exercises": "### Exercises",
           "questions": "### Self-check questions", "output": "Output of the run committed with the notebook:",
           "title": "# Answer key: exercises and self-check questions",
           "intro": "For teachers: keep it out of the learners' hands. It is generated from the notebooks' solution "
                    "cells and from the questions in `gpulab.exercises` (`python course.py answers`); every answer "
                    "below is one that its check calls correct."},
    "zh": {"answer": "答案：", "wrong": "",  # each translated reason of a wrong option starts with 不对
           "none": "**答案：未能自动找到。** 可以用 "
           "`gpulab.exercises.quiz.check(NOTEBOOK, QUESTION, ANSWER)` 逐个试候选答案。", "exercises": "### 练习",
           "questions": "### 自我检查题", "output": "随笔记本提交的那次运行的输出：",
           "title": "# 参考答案：练习与自我检查题",
           "intro": "供教师使用：请不要发给学员。它由笔记本的参考答案单元格和 `gpulab.exercises` 中的题目生成"
                    "（`python course.py answers`）；下面每个答案都是它自己的检查判为正确的答案。"
                    "数值题的说明来自检查本身，是英文。"},
}


def question_lines(number: int, question: Question, lang: str = "en") -> list[str]:
    """The markdown lines of one question in the key: the prompt, the answer and why (``lang``: en or zh)."""
    words = WORDS[lang]
    lines = [f"{number}. {question.prompt}", ""]
    answer = solve(question)
    if question.options:
        right = question.options[question.letters.index(answer)]
        why = right.why[:1].upper() + right.why[1:]
        end = "." if lang == "en" else "。"
        lines.append(f"   **{words['answer']}{answer})** {right.text} {why}{end}")
        for letter, option in zip(question.letters, question.options):
            if letter != answer:
                label = f"{words['wrong']} " if words["wrong"] else ""
                lines.append(f"   - {letter}) {option.text} {label}{option.why}{end}")
    elif answer is None:
        lines.append(f"   {words['none']}")
    else:
        verdict = question.check(answer).message
        if lang == "zh":
            lines.append(f"   **{words['answer']}{_shown(answer)}**（{in_chinese(verdict)}。）")
        else:
            lines.append(f"   **{words['answer']}{_shown(answer)}** ({verdict[:1].upper() + verdict[1:]}.)")
    return lines + [""]


def notebook_lines(notebook: object, lang: str = "en") -> list[str]:
    """Every self-check question of ``notebook`` with its answer, as markdown lines (in Chinese: ``lang="zh"``)."""
    lines: list[str] = []
    for i, question in enumerate(questions(notebook), start=1):
        shown = chinese.in_chinese(notebook_key(notebook), i, question) if lang == "zh" else question
        lines += question_lines(i, shown, lang)
    return lines


KEY_TITLE = WORDS["en"]["title"]
KEY_INTRO = WORDS["en"]["intro"]


def _text(cell: dict) -> str:
    src = cell.get("source", "")
    return "".join(src) if isinstance(src, list) else str(src)


def _outputs(cell: dict) -> str:
    parts = []
    for out in cell.get("outputs", []):
        parts.append(_text({"source": out.get("text", "")}))
        parts.append(_text({"source": out.get("data", {}).get("text/plain", "")}))
    return "".join(parts).strip()


def exercise_lines(cells: list[dict], solution_tag: str = "solution", lang: str = "en") -> list[str]:
    """Each solution code cell under the heading of its section, with the verdict it printed."""
    lines: list[str] = []
    heading, shown = "", ""
    for cell in cells:
        tags = cell.get("metadata", {}).get("tags", [])
        if cell["cell_type"] == "markdown" and solution_tag not in tags:
            heading = next((ln.lstrip("#").strip() for ln in _text(cell).splitlines() if ln.startswith("#")), heading)
        if cell["cell_type"] != "code" or solution_tag not in tags:
            continue
        if heading != shown:
            lines += [f"**{heading}**", ""]
            shown = heading
        lines += ["```python", _text(cell).rstrip(), "```", ""]
        if _outputs(cell):
            lines += [WORDS[lang]["output"], "", "```text", _outputs(cell), "```", ""]
    return lines


def document(notebooks: list, solution_tag: str = "solution", lang: str = "en") -> str:
    """The whole key (markdown) for the notebook files ``notebooks`` (paths), in their order.

    ``lang="zh"``: the Chinese edition's key, from the zh notebooks (titles, headings) and the Chinese questions.
    """
    import json
    from pathlib import Path

    words = WORDS[lang]
    lines = [words["title"], "", words["intro"], ""]
    for path in map(Path, notebooks):
        cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
        title = _text(cells[0]).splitlines()[0].lstrip("#").strip() if cells else path.stem
        lines += [f"## {title}", ""]
        exercises = exercise_lines(cells, solution_tag, lang)
        if exercises:
            lines += [words["exercises"], ""] + exercises
        try:
            key = notebook_key(path.name[:2])
        except ValueError:  # a notebook without self-check questions
            continue
        lines += [words["questions"], ""] + notebook_lines(key, lang)
    return "\n".join(lines).rstrip() + "\n"
