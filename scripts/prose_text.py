"""The notebooks' prose as sentences, and how readable it is: words per sentence, per notebook.

    python scripts/prose_text.py notebooks        # one row per notebook: words, sentences, mean, longest, figures

Prose is a markdown cell without code (fenced blocks and inline `code`), blockquotes (quotes of the
article), HTML comments and link targets; headings and table rows are not sentences. A sentence ends
at ``.``, ``!`` or ``?`` before a capital (not in ``e.g.`` or a decimal). tests/test_prose.py (numbers
typed into prose) and tests/test_readability.py (sentence length) read the notebooks through this module,
so the rule and the report cannot disagree.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

#: Readability rules (tests/test_readability.py): no sentence longer, and each notebook's mean at most.
MAX_WORDS = 35
MAX_MEAN = 20.0
WORD = re.compile(r"[\w'’\-]+")

HTTP_LINK = "\x00cite\x00"
_ABBREVIATIONS = re.compile(r"\b(e\.g|i\.e|etc|vs|cf|approx|Fig)\.", re.I)


def _code_marker(n: int) -> str:
    """A placeholder for the n-th inline code span, made of letters so no pattern sees its digits."""
    return "\x02" + "".join(chr(ord("a") + int(d)) for d in str(n)) + "\x02"


def _prose(markdown: str, title_cell: bool = False, code: list[str] | None = None) -> str:
    """The markdown with code, blockquotes and link targets removed; an http(s) link leaves a marker.

    Inline code spans become placeholders; their text is appended to ``code`` (to show findings).
    """
    lines, fenced = [], False
    for line in markdown.splitlines():
        stripped = line.strip()
        if stripped.startswith(("```", "~~~")):
            fenced = not fenced
            lines.append("")
            continue
        if fenced or stripped.startswith(">") or (title_cell and stripped.startswith("**Runs in:**")):
            lines.append("")
            continue
        lines.append(line)
    text = "\n".join(lines)
    text = re.sub(r"<!--.*?-->", " ", text, flags=re.S)
    spans = code if code is not None else []

    def hide(m: re.Match) -> str:
        spans.append(m.group(0))
        return _code_marker(len(spans) - 1)

    text = re.sub(r"(`+)(.+?)\1", hide, text, flags=re.S)
    text = re.sub(r"!?\[([^\]]*)\]\((https?://[^)\s]*)[^)]*\)", rf"\1{HTTP_LINK}", text)
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", text)
    text = re.sub(r"<https?://[^>]+>|https?://\S+", HTTP_LINK, text)
    return text.replace("**", "").replace("__", "")


def sentences(markdown: str, title_cell: bool = False, code: list[str] | None = None) -> list[str]:
    """Prose sentences of a markdown cell: paragraphs, list items and table rows, split at . ! ?

    Inline code stays hidden behind placeholders when ``code`` is given (a list that receives the
    spans); otherwise it is put back.
    """
    spans: list[str] = [] if code is None else code
    units, current = [], []
    for line in _prose(markdown, title_cell, spans).splitlines():
        stripped = line.strip()
        new_unit = not stripped or re.match(r"^(?:[-*+]\s|\d+[.)]\s|#|\|)", stripped)
        if new_unit and current:
            units.append(" ".join(current))
            current = []
        if stripped:
            current.append(stripped)
        if stripped.startswith(("#", "|")):
            units.append(" ".join(current))
            current = []
    if current:
        units.append(" ".join(current))
    out = []
    for unit in units:
        protected = _ABBREVIATIONS.sub(lambda m: m.group(0).replace(".", "\x01"), unit)
        for part in re.split(r"(?<=[.!?])\s+(?=[^a-z])", protected):
            part = part.replace("\x01", ".").strip()
            if part:
                out.append(part if code is not None else _show(part, spans))
    return out


def _show(sentence: str, code: list[str]) -> str:
    """The sentence with its inline code put back and citation markers removed."""
    for i, span in enumerate(code):
        sentence = sentence.replace(_code_marker(i), span)
    return sentence.replace(HTTP_LINK, "")


def words(sentence: str) -> int:
    """Words in a sentence (inline code counts as one word; numbers count)."""
    return len(WORD.findall(sentence))


def _cells(path: Path) -> list[dict]:
    return json.loads(Path(path).read_text(encoding="utf-8"))["cells"]


def _source(cell: dict) -> str:
    source = cell.get("source", "")
    return "".join(source) if isinstance(source, list) else source


def prose_sentences(path: Path) -> list[tuple[int, str]]:
    """``(cell index, sentence)`` of every prose sentence (headings and table rows left out)."""
    out = []
    for i, cell in enumerate(_cells(path)):
        if cell.get("cell_type") != "markdown":
            continue
        for sentence in sentences(_source(cell), title_cell=i == 0, code=[]):
            if not sentence.startswith(("#", "|")):
                out.append((i, sentence))
    return out


def figures(path: Path) -> dict[str, int]:
    """Pictures in a notebook: ``plots`` drawn by its cells (image outputs), ``embedded`` images in markdown."""
    plots = embedded = 0
    for cell in _cells(path):
        if cell.get("cell_type") == "markdown":
            embedded += len(re.findall(r"!\[[^\]]*\]\(", _source(cell)))
        for out in cell.get("outputs", []):
            if any(k.startswith("image/") for k in out.get("data", {})):
                plots += 1
    return {"plots": plots, "embedded": embedded}


def metrics(path: Path) -> dict:
    """Words, sentences, mean and longest sentence (words), sentences over MAX_WORDS, and the figures."""
    counts = [words(s) for _, s in prose_sentences(path)]
    return {"notebook": Path(path).name[:2], "words": sum(counts), "sentences": len(counts),
            "mean": sum(counts) / len(counts) if counts else 0.0, "longest": max(counts, default=0),
            "over": sum(c > MAX_WORDS for c in counts), **figures(path)}


def table(paths: list[Path]) -> str:
    """The per-notebook table: words, sentences, mean and longest sentence, sentences too long, figures."""
    rows = [metrics(p) for p in paths]
    head = f"{'notebook':<8} {'words':>6} {'sentences':>9} {'mean':>5} {'longest':>7} {'over ' + str(MAX_WORDS):>7} {'plots':>5} {'embedded':>8}"
    lines = [head] + [f"{r['notebook']:<8} {r['words']:>6} {r['sentences']:>9} {r['mean']:>5.1f} {r['longest']:>7} "
                      f"{r['over']:>7} {r['plots']:>5} {r['embedded']:>8}" for r in rows]
    total = sum(r["words"] for r in rows)
    return "\n".join(lines + [f"{'total':<8} {total:>6}"])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("paths", nargs="+", help="notebooks, or a folder of them")
    args = parser.parse_args(argv)
    paths: list[Path] = []
    for p in map(Path, args.paths):
        paths += sorted(p.glob("*.ipynb")) if p.is_dir() else [p]
    print(table(paths))
    return 0


if __name__ == "__main__":
    sys.exit(main())
