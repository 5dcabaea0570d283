"""THE input checks: each returns the value it accepts or raises a one-line ValueError naming it.

``positive_int(ranks, "ranks")`` reads as the rule it checks; the message names the bad value and
what would be valid (``ranks=0 must be a whole number >= 1``). Booleans are not numbers here, and a
float that is a whole number (``4.0``) is not an integer either: a caller that wants ``7e9`` as a
count parses text first (:mod:`gpulab.argtypes`). Imports nothing from gpulab (the ground floor).
"""

from __future__ import annotations

import math
from typing import Collection, TypeVar

T = TypeVar("T")


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def positive_int(value: object, name: str) -> int:
    """``value`` if it is an int >= 1."""
    if not _is_int(value) or value < 1:
        raise ValueError(f"{name}={value!r} must be a whole number >= 1")
    return value


def non_negative_int(value: object, name: str) -> int:
    """``value`` if it is an int >= 0."""
    if not _is_int(value) or value < 0:
        raise ValueError(f"{name}={value!r} must be a whole number >= 0")
    return value


def positive_number(value: object, name: str) -> float:
    """``value`` as a float if it is a finite number > 0."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not (0 < value < math.inf):
        raise ValueError(f"{name}={value!r} must be a finite positive number")
    return float(value)


def non_negative_number(value: object, name: str) -> float:
    """``value`` as a float if it is a finite number >= 0."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not (0 <= value < math.inf):
        raise ValueError(f"{name}={value!r} must be a finite number >= 0")
    return float(value)


def one_of(value: T, valid: Collection[T], name: str) -> T:
    """``value`` if it is one of ``valid``."""
    if value not in valid:
        raise ValueError(f"unknown {name} {value!r}: use one of {', '.join(map(str, valid))}")
    return value
