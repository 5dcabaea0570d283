"""Markdown anchors as GitHub makes them, and the relative links of a document, for the link tests."""

from __future__ import annotations

import re
from pathlib import Path


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[`*_\[\]()]", lambda m: "_" if m.group(0) == "_" else "", heading.strip().lower())
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """Every heading anchor of a markdown file (code blocks skipped)."""
    found, fenced = set(), False
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and re.match(r"#{1,6} ", line):
            found.add(slug(line.lstrip("#")))
    return found


def links(path: Path) -> list[tuple[str, str]]:
    """``(file, anchor)`` of every relative markdown link in a file (``("", anchor)`` for the file itself)."""
    text = Path(path).read_text(encoding="utf-8")
    out = []
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"[a-z]+:", target):
            continue
        file, _, anchor = target.partition("#")
        out.append((file, anchor))
    return out
