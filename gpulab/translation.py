"""The Chinese edition's runtime text: which edition a kernel runs, and English messages rendered in Chinese.

:func:`language` tells the editions apart by where the kernel runs: Jupyter starts a notebook's kernel in the
notebook's folder, so a folder ``zh`` inside ``notebooks`` means Chinese (``GPULAB_LANG=en`` or ``zh`` overrides).

A :class:`Catalogue` maps English *templates* to Chinese ones. A template is the English exactly as the code
writes it: a plain string, or an f-string's text with its fields as written, e.g.
``"expected {want.type}, got {got.type}"``. The Chinese template has the same fields. To translate a message the
code has already built, :meth:`Catalogue.translate` finds the template the whole message fits, takes each field's
text back out of it, translates that text too (a field often holds an English phrase built elsewhere), and fills
the Chinese template with it. A message no template fits stays as it is. ``scripts/zh_strings.py`` lists every
template the code writes, so a test fails when one changes and its Chinese does not follow.
"""

from __future__ import annotations

import functools
import json
import os
import re
from collections.abc import Mapping
from pathlib import Path

LANGUAGES = ("en", "zh")
ENV = "GPULAB_LANG"
#: a template's field: ``{expr}``, ``{expr!r}``, ``{expr:.3g}`` (``{{`` and ``}}`` are literal braces)
FIELD = re.compile(r"\{\{|\}\}|\{([^{}]*(?:\{[^{}]*\}[^{}]*)*)\}")
ENGLISH_WORD = re.compile(r"[A-Za-z]{2,}")
SEPARATOR = re.compile(r"[:;] ")
DEPTH = 4  # fields inside fields inside fields: deeper than the code ever nests its phrases


def language(cwd: str | Path | None = None, environ: Mapping[str, str] | None = None) -> str:
    """``"zh"`` in a kernel started in ``notebooks/zh`` (or with ``GPULAB_LANG=zh``), else ``"en"``."""
    environ = os.environ if environ is None else environ
    asked = environ.get(ENV, "").strip().lower()
    if asked:
        if asked not in LANGUAGES:
            raise ValueError(f"{ENV}={asked!r}: use one of {', '.join(LANGUAGES)}")
        return asked
    here = Path.cwd() if cwd is None else Path(cwd)
    return "zh" if here.name == "zh" and here.parent.name == "notebooks" else "en"


def fields(template: str) -> list[str]:
    """The fields of ``template`` in order, as written (``"want.type"``, ``"answer!r"``, ``"r:.3g"``)."""
    return [m.group(1) for m in FIELD.finditer(template) if m.group(1) is not None]


def _parts(template: str) -> list[tuple[str, str | None]]:
    """``template`` as (literal text, field or None) pieces."""
    parts, at = [], 0
    for m in FIELD.finditer(template):
        if m.start() > at:
            parts.append((template[at:m.start()], None))
        parts.append((m.group(0)[0], None) if m.group(1) is None else ("", m.group(1)))  # {{ is a literal {
        at = m.end()
    if at < len(template):
        parts.append((template[at:], None))
    return parts


def literal(template: str) -> str:
    """The text of ``template`` outside its fields: how much of a message it pins down."""
    return "".join(text for text, field in _parts(template) if field is None)


class Template:
    """One English template, the regular expression that finds its fields in a message, and its Chinese."""

    def __init__(self, english: str, chinese: str) -> None:
        wanted, given = sorted(set(fields(english))), sorted(set(fields(chinese)))
        if wanted != given:
            raise ValueError(f"{english!r}: its Chinese has the fields {given}, the English {wanted}")
        self.english, self.chinese = english, chinese
        # fields with no text between them are one group, split later (a run); a field may be empty
        self.runs: list[list[str]] = []
        pattern, previous = [], None
        for text, field in _parts(english):
            if field is None:
                pattern.append(re.escape(text))
            elif previous is not None and pattern[-1].startswith("(?P<r"):
                self.runs[-1].append(field)
            else:
                pattern.append(f"(?P<r{len(self.runs)}>.*?)")
                self.runs.append([field])
            previous = field
        self.regex = re.compile("".join(pattern), re.S)

    def fill(self, values: Mapping[str, str]) -> str:
        """The Chinese with each field replaced by its value."""
        return "".join(text if field is None else values[field] for text, field in _parts(self.chinese))


class Catalogue:
    """English templates and their Chinese, read from a JSON object ``{english: chinese}``."""

    def __init__(self, table: Mapping[str, str]) -> None:
        self.exact = {en: zh for en, zh in table.items() if not fields(en)}
        usable = [Template(en, zh) for en, zh in table.items() if fields(en) and literal(en).strip()]
        # the template that pins down most of a message wins when two fit
        self.templates = sorted(usable, key=lambda t: -len(literal(t.english)))

    def translate(self, text: str, depth: int = 0) -> str:
        """``text`` in Chinese when a template fits all of it; else ``text`` unchanged.

        When several templates fit (a phrase that ends in a field can swallow the rest of a sentence), the
        rendering that leaves the fewest English words wins, then the one whose fields hold no ": " or "; "
        of a sentence around them, then the template that pins down most of the text.
        """
        if text in self.exact:
            return self.exact[text]
        if depth >= DEPTH or not text.strip():
            return text
        best = None
        for rank, template in enumerate(self.templates):
            found = template.regex.fullmatch(text)
            if not found:
                continue
            for raw in _splits(template.runs, [found.group(f"r{i}") for i in range(len(template.runs))]):
                shown = template.fill({field: self.translate(value, depth + 1) for field, value in raw.items()})
                score = (len(ENGLISH_WORD.findall(shown)),
                         sum(SEPARATOR.search(v) is not None for v in raw.values()), rank)
                if best is None or score < best[0]:
                    best = (score, shown)
        return text if best is None else best[1]


def _splits(runs: list[list[str]], values: list[str]) -> list[dict[str, str]]:
    """Every way to share each run's text among its fields (a field written twice must hold the same text)."""
    found: list[dict[str, str]] = [{}]
    for run, value in zip(runs, values):
        ways = [[value]] if len(run) == 1 else [
            [value[:i], *rest] for i in range(len(value) + 1) for rest in _cuts(value[i:], len(run) - 1)]
        found = [{**done, **dict(zip(run, way))} for done in found for way in ways
                 if all(done.get(f, v) == v for f, v in zip(run, way))]
    return found


def _cuts(text: str, pieces: int) -> list[list[str]]:
    if pieces == 1:
        return [[text]]
    return [[text[:i], *rest] for i in range(len(text) + 1) for rest in _cuts(text[i:], pieces - 1)]


@functools.cache
def catalogue(*paths: Path) -> Catalogue:
    """The catalogues at ``paths`` merged into one (loaded once per process)."""
    table: dict[str, str] = {}
    for path in paths:
        table.update(json.loads(Path(path).read_text(encoding="utf-8")))
    return Catalogue(table)
