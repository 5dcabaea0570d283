"""argparse types shared by the command line and the recipe options: bad text gives a one-line error."""

from __future__ import annotations

import argparse
from typing import Callable, Sequence


def _int_at_least(text: str, low: int, what: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < low:
        raise argparse.ArgumentTypeError(f"{text!r} must be {what}")
    return value


def positive_int(text: str) -> int:
    """argparse type: an integer >= 1."""
    return _int_at_least(text, 1, "a positive integer")


def non_negative_int(text: str) -> int:
    """argparse type: an integer >= 0."""
    return _int_at_least(text, 0, "0 or more")


def _finite(text: str, ok, what: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not ok(value) or value == float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r} must be {what}")
    return value


def positive_float(text: str) -> float:
    """argparse type: a finite number > 0."""
    return _finite(text, lambda v: v > 0, "a finite positive number")


def non_negative_float(text: str) -> float:
    """argparse type: a finite number >= 0."""
    return _finite(text, lambda v: v >= 0, "0 or more")


def count(text: str) -> int:
    """argparse type: a whole number >= 1, also written like ``7e9``."""
    try:
        value = int(text) if text.strip().lstrip("+-").isdigit() else float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not (value >= 1 and float(value).is_integer()) or value == float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r} must be a whole number >= 1 (like 1000000 or 7e9)")
    return int(value)


def int_list(text: str) -> list[int]:
    """argparse type: comma-separated positive integers, like ``512,2048,1``."""
    try:
        values = [int(part) for part in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of integers") from None
    if any(v < 1 for v in values):
        raise argparse.ArgumentTypeError(f"{text!r} must hold positive integers only")
    return values


def port(text: str) -> int:
    """argparse type: a TCP port, 1..65535."""
    value = _int_at_least(text, 1, "a port in 1..65535")
    if value > 65535:
        raise argparse.ArgumentTypeError(f"{text!r} must be a port in 1..65535")
    return value


def one_or_more_of(allowed: Sequence[str], what: str) -> Callable[[str], list[str]]:
    """argparse type: comma-separated names from ``allowed`` (at least one), in the order given, each once."""
    def parse(text: str) -> list[str]:
        names = list(dict.fromkeys(t.strip() for t in text.split(",") if t.strip()))
        if not names or any(n not in allowed for n in names):
            raise argparse.ArgumentTypeError(f"{what} {text!r}: use a comma-separated list of {', '.join(allowed)}")
        return names
    return parse
