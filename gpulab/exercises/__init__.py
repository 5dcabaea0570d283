"""Automatic checks for the notebooks' exercises, one module per notebook topic.

A check never raises for a wrong answer: it returns a ``Feedback`` that prints
``Correct: ...`` or ``Not yet: ...`` with what is wrong, so a learner can try again. In the Chinese edition
(:func:`gpulab.translation.language`) it prints ``正确：...`` or ``还不对：...``, the message rendered from
``feedback_zh.json`` (``scripts/zh_strings.py`` keeps that catalogue in step with the English here). A self-check
question is a :class:`Question` (its options are :class:`Option`); the widgets that show them are in
:mod:`gpulab.exercises.quiz`, the list of every notebook's questions in :mod:`gpulab.exercises.questions`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from gpulab.translation import catalogue, language

FEEDBACK_ZH = Path(__file__).with_name("feedback_zh.json")


@dataclass(frozen=True)
class Feedback:
    """The verdict of one check: ``ok`` and a message a learner can act on."""

    ok: bool
    message: str
    lang: str | None = None  # "en", "zh", or None: the edition the kernel runs (gpulab.translation.language)

    def __str__(self) -> str:
        if (self.lang or language()) == "zh":
            return f"{'正确' if self.ok else '还不对'}：{in_chinese(self.message)}"
        return f"{'Correct' if self.ok else 'Not yet'}: {self.message}"

    def __repr__(self) -> str:
        return str(self)

    def __bool__(self) -> bool:
        return self.ok


def in_chinese(message: str) -> str:
    """A check's English message in Chinese (``feedback_zh.json``); a message it has no template for stays."""
    return catalogue(FEEDBACK_ZH).translate(message)


def correct(message: str) -> Feedback:
    """A passing verdict."""
    return Feedback(True, message)


def wrong(message: str) -> Feedback:
    """A failing verdict saying what is wrong."""
    return Feedback(False, message)


THOUSANDS = re.compile(r"[+-]?\d{1,3}(,\d{3})+(\.\d*)?")


def as_number(answer: object) -> float | int | None:
    """A number from an int, a float, a one-element tensor or text such as ``"2,000,000"``; else None.

    In text, commas that group digits in threes are thousands separators (``"1,050,624"``); one other comma is a
    decimal comma, as many countries write it (``"402,7"`` is 402.7).
    """
    if hasattr(answer, "item") and getattr(answer, "numel", lambda: 0)() == 1:
        answer = answer.item()
    if isinstance(answer, str):
        text = answer.replace("_", "").replace(" ", "")
        if THOUSANDS.fullmatch(text):
            text = text.replace(",", "")
        elif text.count(",") == 1 and "." not in text:
            text = text.replace(",", ".")
        try:
            answer = float(text)
        except ValueError:
            return None
    if isinstance(answer, bool) or not isinstance(answer, (int, float)):
        return None
    return answer


LETTERS = "abcdefgh"


@dataclass(frozen=True)
class Option:
    """One choice and why it is right or wrong."""

    text: str
    why: str


@dataclass(frozen=True)
class Question:
    """A multiple-choice question (``options`` + ``answer``) or a value question (``grade``)."""

    prompt: str
    options: tuple[Option, ...] = ()
    answer: str = ""  # the letter of the right option
    grade: Callable[[object], Feedback] | None = None
    example: str = ""  # what a value answer looks like

    def __post_init__(self) -> None:
        if (self.grade is None) == (not self.options):
            raise ValueError(f"{self.prompt[:40]!r}: give either options or a grade function")
        if self.options and self.answer not in LETTERS[: len(self.options)]:
            raise ValueError(f"{self.prompt[:40]!r}: answer {self.answer!r} is not one of its options")

    @property
    def letters(self) -> str:
        return LETTERS[: len(self.options)]

    def letter_of(self, answer: object) -> str | None:
        """The option letter ``answer`` names (``"b"``, ``"B)"``, ``" b "``), or None when it names none."""
        letter = answer.strip().rstrip(")").lower() if isinstance(answer, str) else None
        return letter if letter in tuple(self.letters) else None

    def check(self, answer: object) -> Feedback:
        """The verdict on ``answer``: a letter for a multiple-choice question, a value otherwise."""
        if self.grade is not None:
            return self.grade(answer)
        letter = self.letter_of(answer)
        if letter is None:
            return wrong(f"answer with the letter of one option ({', '.join(self.letters)}), got {answer!r}")
        option = self.options[self.letters.index(letter)]
        return correct(option.why) if letter == self.answer else wrong(f"{letter}) {option.why}")
