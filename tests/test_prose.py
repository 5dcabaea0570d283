"""Numbers in the notebooks' prose: a measurement is printed by a cell, never typed into markdown.

A reader's machine differs from the one that ran the notebook, so a figure typed into markdown
("20 to 35 times slower", "about 1e-7", "trained in 1.4 s") is soon wrong. The check reads every
markdown cell sentence by sentence and flags a sentence that holds BOTH

- a measured-looking quantity: a ``±`` spread, a number in scientific notation (``1e-7``), a
  ratio (``2x``, ``20 to 35 times``), a number with a unit of time or rate (``1.4 s``,
  ``29.5 GB/s``, ``40 %``), or a decimal number (``0.15``); and
- a word that reports a measurement: measured, took, ran, speed-up, printed, shown,
  "this machine", "this run", "over several runs", "above"/"below" meaning "in the cells
  above/below" (not "below 6e-8", a comparison), or "about"/"roughly" in front of a number.

A ``±`` spread and a speed ratio next to faster/slower are flagged on their own: they are
measurements whatever the wording. So is a sentence that says which machine the notebook "was
run on": the committed run's hardware is not the reader's.

Not prose, so never flagged: code (fenced blocks and inline `code`), blockquotes (quotes of the
article), link targets, and the title cell's ``**Runs in:**`` line (its form is fixed by the
hygiene tests). The one way to keep a number in a flagged sentence is a citation: an
``http(s)`` link in the same sentence (a published figure, e.g. a spec sheet).
Decimal numbers written as versions or section numbers (``PyTorch 2.3``, ``section 3.2``,
``compute capability 8.0``) are not quantities.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

import pytest
from scripts_loader import load_script

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))

_NUM = r"\d[\d,]*(?:\.\d+)?"
_UNITS = (
    r"ms|µs|us|ns|s|secs?|seconds?|minutes?|min|hours?|"
    r"[KMGT]i?B/s|[GT]FLOP/s|[GT]FLOPS|epochs/s|samples/s|it/s|%"
)
QUANTITY = {
    "spread": re.compile(rf"(?:±|\+/-)\s*{_NUM}"),
    "scientific": re.compile(r"(?<![\w.])\d+(?:\.\d+)?e[-+]?\d+(?!\w|\.\d)", re.I),
    "ratio": re.compile(
        rf"(?<![\w.])(?:{_NUM}\s*[x×](?![\w])|×\s*{_NUM}(?!\w|\.\d)|{_NUM}(?:\s+(?:to|-|–)\s+{_NUM})?\s+times\b)"
    ),
    "unit": re.compile(rf"(?<![\w.$]){_NUM}\s*(?:{_UNITS})(?![\w/])"),
    "decimal": re.compile(r"(?<![\w.])\d+\.\d+(?!\w|\.\d)"),
}
# A decimal right after one of these words is a version or a reference, not a measured quantity.
_NOT_QUANTITY = re.compile(
    r"\b(?:python|pytorch|torch|scikit-learn|sklearn|numpy|cuda|cudnn|rocm|macos|nbval|pytest|version|v|"
    r"release|section|sections|capability|notebook|step|§)\s*(?:(?:below|above|under|over|of|<|>|>=|<=)\s*)?$",
    re.I,
)
CUE = re.compile(
    r"\b(?:measur(?:e|ed|es|ing|ement|ements)|took|ran|speed-?ups?|printed|prints|shown|"
    r"this (?:machine|run|laptop|computer)|(?:several|these|both|other|repeated) runs|was run on)\b"
    r"|\b(?:above|below)\b(?!\s+(?:about\s+|roughly\s+|~\s*)?[-+]?[\d.])"
    r"|\b(?:about|roughly|around|approximately|nearly)\s+[-+]?\d(?:[\w.]|[-+](?=\d))*|[~≈]\s*[-+]?\d(?:[\w.]|[-+](?=\d))*",
    re.I,
)
# The machine that ran the committed notebook is not the reader's: say it from a cell, not in prose.
RUN_ON = re.compile(r"\b(?:this notebook|the notebook|it) (?:was|were|is) (?:run|executed|committed|measured) on\b", re.I)
SPEED_WORD = re.compile(r"\b(?:faster|slower|as fast|speed-?ups?|quicker)\b", re.I)
@dataclass(frozen=True)
class Finding:
    """One flagged sentence: where, what it says, and why."""

    cell: int
    sentence: str
    reason: str

    def __str__(self) -> str:
        return f"[{self.cell}] {self.reason}: {self.sentence}"


PROSE = load_script("prose_text")
HTTP_LINK, sentences, _show = PROSE.HTTP_LINK, PROSE.sentences, PROSE._show


def _quantities(sentence: str) -> list[tuple[str, str]]:
    found = []
    for kind, pattern in QUANTITY.items():
        for m in pattern.finditer(sentence):
            if kind == "decimal" and _NOT_QUANTITY.search(sentence[: m.start()]):
                continue
            found.append((kind, m.group(0).strip()))
    return found


def check_sentence(sentence: str) -> str | None:
    """Why ``sentence`` reports a typed measurement, or None when it does not."""
    if HTTP_LINK in sentence:
        return None  # a citation: published figures may be quoted with their source
    reasons = []
    if RUN_ON.search(sentence):
        reasons.append("names the machine that ran this notebook (the reader's differs)")
    quantities = _quantities(sentence)
    kinds = {kind for kind, _ in quantities}
    shown = ", ".join(dict.fromkeys(q for _, q in quantities))
    cue = CUE.search(sentence)
    if "spread" in kinds:
        reasons.append(f"a ± spread ({shown}) is a measurement")
    elif "ratio" in kinds and SPEED_WORD.search(sentence):
        reasons.append(f"a speed ratio ({shown}) is a measurement")
    elif quantities and cue:
        reasons.append(f"{shown} next to {cue.group(0).strip()!r}")
    return "; ".join(reasons) or None


def check_markdown(markdown: str, cell: int = 0) -> list[Finding]:
    """Every flagged sentence of one markdown cell (``cell`` 0 is the title cell)."""
    findings, code = [], []
    for sentence in sentences(markdown, title_cell=cell == 0, code=code):
        reason = check_sentence(sentence)
        if reason:
            findings.append(Finding(cell, _show(sentence, code), reason))
    return findings


def check_notebook(path: Path) -> list[Finding]:
    """Every flagged sentence in the notebook's markdown cells, with the cell index."""
    cells = json.loads(Path(path).read_text(encoding="utf-8"))["cells"]
    findings = []
    for i, cell in enumerate(cells):
        if cell.get("cell_type") == "markdown":
            source = cell.get("source", "")
            findings += check_markdown("".join(source) if isinstance(source, list) else source, i)
    return findings


# ---- the notebooks ------------------------------------------------------------------------------


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_no_measurement_typed_into_markdown(path):
    findings = check_notebook(path)
    assert not findings, (
        f"{path.name}: markdown reports measured numbers that no cell printed (print them from a cell and "
        "say 'above', or cite the source with a link):\n" + "\n".join(f"  {f}" for f in findings)
    )


# ---- the checker itself, on synthetic markdown ----------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        "bfloat16 autocast ran about 2x faster than float32 and float16 20 to 35 times *slower* over several runs.",
        "DDP with 3 ranks trains the same weights (max difference about 1e-7, cells above).",
        "Training took 1.45 s on this machine.",
        "Dropping `B` moves the error by about 0.15, far less than the spread between splits (± 0.7).",
        "The model loses: 3.31 +/- 0.74 against 3.12.",
        "The copy ran at 29.5 GB/s.",
        "On the CPU this notebook was run on (an AMD EPYC with `avx512_bf16`), autocast was 2.03x as fast.",
        "Plain float16 flushes gradients below about 6e-8 to zero (measured above).",
        "- item one\n- the GPU measured 120.5 ms per epoch\n- item three",
        "| speed-up | 1.57x faster |",
        "Four ranks ran ×1.8 faster.",
        "It reached an RMSE of about 3.1.",
        "The improved MLP is 4 % better than before, as measured.",
        "On the CPU this notebook was run on (an AMD EPYC with `avx512_bf16` instructions), bfloat16 is fast.",
    ],
)
def test_flags_typed_measurements(text):
    assert check_markdown(text, cell=3), text


@pytest.mark.parametrize(
    "text",
    [
        "The H200 is specified at 4.8 TB/s on its [spec sheet](https://www.nvidia.com/h200/), above any CPU.",
        "A matmul costs `2 n^3` operations: doubling n means 8 times more arithmetic.",
        "The article trains `Net1(13, 16, 32, 1)` with Adam lr 0.01, batch 128, 100 epochs.",
        "```python\nprint(f'{x:.2f} s, measured')  # 1.45 s faster\n```",
        "> The article: use float16, it is 2x faster.",
        "Since PyTorch 2.3, compute capability below 8.0 emulates bfloat16 (section 3.2 above).",
        "Each rank gets 43 rows; the table above shows it.",
        "The measured speed-up is printed above; re-run the cell to see this machine's.",
        "float16 overflows at 65504: its largest value.",
        "Save 404 rows of 13 floats in one go.",
        "See [notebook 05](05_distributed_data_parallel.ipynb).",
        "The time for 100 epochs (printed above) depends on this machine.",
        "For the Boston data (404 rows x 13 floats, about 21 KB) neither setting matters.",
        "So `x + y` can never run faster than memory: a memory moving 10 GB/s allows under 1 GFLOP/s.",
        "MEDV is in $1000s, shown below.",
        "CPUs with x86's `avx512_bf16` run bfloat16 faster than float32 (printed above).",
    ],
)
def test_leaves_configuration_code_quotes_and_citations_alone(text):
    assert check_markdown(text, cell=3) == [], text


def test_title_cell_runs_in_line_is_exempt_but_only_there():
    header = "# 03 · One device\n**You will learn:** x.\n**Runs in:** about 10 s on a CPU laptop, about 2 s on a GPU."
    assert check_markdown(header, cell=0) == []
    assert check_markdown(header, cell=4), "the Runs-in exemption belongs to the title cell only"


def test_findings_name_the_cell_and_the_sentence():
    text = "First sentence is fine. Then it took 2.5 s here. Last one too."
    (finding,) = check_markdown(text, cell=7)
    assert finding.cell == 7 and finding.sentence == "Then it took 2.5 s here."
    assert "2.5 s" in finding.reason and str(finding).startswith("[7] ")


def test_sentences_split_on_punctuation_but_not_abbreviations_or_decimals():
    assert sentences("GPUs (e.g. T4, V100) are old. Version 2.3 is new.") == [
        "GPUs (e.g. T4, V100) are old.", "Version 2.3 is new."
    ]


def test_a_link_in_another_sentence_does_not_cite():
    text = "The [docs](https://pytorch.org) say so. Here it took 3.5 s."
    assert len(check_markdown(text, cell=2)) == 1


def test_check_notebook_reads_cells(tmp_path):
    nb = {"cells": [
        {"cell_type": "markdown", "metadata": {}, "source": ["# 01 · T\n", "**Runs in:** about 5 s on a CPU laptop, x"]},
        {"cell_type": "code", "metadata": {}, "source": "print('took 9.9 s')", "outputs": []},
        {"cell_type": "markdown", "metadata": {}, "source": "It ran 3x faster."},
    ]}
    path = tmp_path / "01_t.ipynb"
    path.write_text(json.dumps(nb), encoding="utf-8")
    assert [f.cell for f in check_notebook(path)] == [2]
