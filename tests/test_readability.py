"""Plain prose for beginners: no sentence over 35 words, and each notebook's mean at most 20 (scripts/prose_text.py).

Quotes of the article (blockquotes) and code are not prose. The table of every notebook's figures prints
with ``python scripts/prose_text.py notebooks``; a failure names the cell and the sentence to split.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from scripts_loader import load_script

PROSE = load_script("prose_text")
ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_no_sentence_is_too_long(path):
    long = [f"[cell {i}] {PROSE.words(s)} words: {s}" for i, s in PROSE.prose_sentences(path)
            if PROSE.words(s) > PROSE.MAX_WORDS]
    assert not long, f"split these sentences (at most {PROSE.MAX_WORDS} words):\n" + "\n".join(long)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_sentences_are_short_on_average(path):
    m = PROSE.metrics(path)
    assert m["mean"] <= PROSE.MAX_MEAN, f"{path.name}: {m['mean']:.1f} words a sentence on average (at most {PROSE.MAX_MEAN})"


def test_the_measure_can_fail(tmp_path):
    import json

    long = "Every " + " ".join(["word"] * 39) + "."
    nb = {"cells": [{"cell_type": "markdown", "metadata": {}, "source": "# Title"},
                    {"cell_type": "markdown", "metadata": {}, "source": f"Short one. {long}\n\n> {long}\n\n`{long}`"}],
          "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    path = tmp_path / "x.ipynb"
    path.write_text(json.dumps(nb))
    counts = [PROSE.words(s) for _, s in PROSE.prose_sentences(path)]
    assert counts == [2, 40, 1]  # the quote is not prose; inline code is one word
    assert PROSE.metrics(path)["over"] == 1
