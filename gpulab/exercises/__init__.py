"""Automatic checks for the notebooks' exercises, one module per notebook topic.

A check never raises for a wrong answer: it returns a ``Feedback`` that prints
``Correct: ...`` or ``Not yet: ...`` with what is wrong, so a learner can try again.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Feedback:
    """The verdict of one check: ``ok`` and a message a learner can act on."""

    ok: bool
    message: str

    def __str__(self) -> str:
        return f"{'Correct' if self.ok else 'Not yet'}: {self.message}"

    def __repr__(self) -> str:
        return str(self)

    def __bool__(self) -> bool:
        return self.ok


def correct(message: str) -> Feedback:
    """A passing verdict."""
    return Feedback(True, message)


def wrong(message: str) -> Feedback:
    """A failing verdict saying what is wrong."""
    return Feedback(False, message)


def as_number(answer: object) -> float | int | None:
    """A number from an int, a float, a one-element tensor or text such as ``"2,000,000"``; else None."""
    if hasattr(answer, "item") and getattr(answer, "numel", lambda: 0)() == 1:
        answer = answer.item()
    if isinstance(answer, str):
        try:
            answer = float(answer.replace(",", "").replace("_", "").replace(" ", ""))
        except ValueError:
            return None
    if isinstance(answer, bool) or not isinstance(answer, (int, float)):
        return None
    return answer
