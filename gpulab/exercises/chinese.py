"""The self-check questions in Chinese, for the Chinese edition (``notebooks/zh/``).

``quiz_zh.json`` beside this module holds, for each notebook and question, the Chinese prompt, options and
reasons, with the hash of the English they translate (:func:`english_hash`). A changed English question fails
``tests/test_quiz_zh.py`` until its translation follows, the way the notebooks' catalogues work.

The zh notebooks run the same code as the English ones (``quiz("04")``): :func:`gpulab.translation.language`
tells the editions apart by where the kernel runs (a kernel in ``notebooks/zh`` speaks Chinese).
"""

from __future__ import annotations

import functools
import hashlib
import json
from pathlib import Path

from gpulab.exercises import Feedback, Option, Question

CATALOG = Path(__file__).with_name("quiz_zh.json")


def english_hash(question: Question) -> str:
    """The first 16 hex digits of the SHA-256 of a question's English text: it changes when the text does."""
    text = json.dumps([question.prompt, [[o.text, o.why] for o in question.options], question.example],
                      ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


@functools.cache
def catalog() -> dict:
    """The Chinese questions by notebook (``"04"``) and number (``"1"``)."""
    return json.loads(CATALOG.read_text(encoding="utf-8"))


def entry(notebook: str, number: int) -> dict | None:
    """Question ``number`` of ``notebook`` in the catalogue, or None."""
    return catalog().get(notebook, {}).get(str(number))


def stale(notebook: str, number: int, question: Question) -> str:
    """Why question ``number`` of ``notebook`` has no current translation; "" when it has one."""
    found = entry(notebook, number)
    if found is None:
        return f"no translation in gpulab/exercises/{CATALOG.name}"
    if found.get("en") != english_hash(question):
        return (f"the English changed since it was translated (its hash is now {english_hash(question)}): "
                "update the translation and its 'en'")
    if len(found["options"]) != len(question.options):
        return f"{len(found['options'])} translated options for {len(question.options)}"
    return ""


def in_chinese(notebook: str, number: int, question: Question) -> Question:
    """The question with its Chinese prompt, options and reasons.

    A question without a current translation (:func:`stale`) stays in English: the tests keep the committed
    catalogue current, and a learner's own edit should not break the quiz.
    """
    if stale(notebook, number, question):
        return question
    found = entry(notebook, number)
    options = tuple(Option(o["text"], o["why"]) for o in found["options"])
    return Question(found["prompt"], options, question.answer, question.grade, question.example)


def check_in_chinese(question: Question, answer: object) -> Feedback:
    """``question.check(answer)`` in Chinese: the verdict, and a value question's message from ``feedback_zh.json``."""
    if question.options and question.letter_of(answer) is None:
        return Feedback(False, f"请用一个选项的字母作答（{'、'.join(question.letters)}），你给的是 {answer!r}", "zh")
    found = question.check(answer)
    return Feedback(found.ok, found.message, "zh")
