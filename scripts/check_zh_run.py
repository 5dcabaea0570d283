"""Run the Chinese notebooks as a learner would and report what they showed in English.

    python scripts/check_zh_run.py OUTDIR [NOTEBOOK ...] [--jobs N]

Executes notebooks/zh/NN_*.ipynb (all, or those named) with ``scripts/run_notebooks.py``: their kernels start in
notebooks/zh, so they run as the Chinese edition. Every figure drawn logs its texts (``GPULAB_PLOT_LOG``, see
:mod:`gpulab.figures.chinese`). The report lists each feedback line still in English, each plot title or axis label
with English words and no Chinese, and the other plot texts left in English (legend entries, ticks, notes: often names such as
``article MLP`` or ``NVIDIA H200``), most frequent first. Exit status 1 when a notebook failed, a feedback line is
English, a title or axis label has no Chinese, or a plot drew characters its font lacks. It takes as long as the notebooks do (about 3 minutes, 2 jobs).
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as a script from a checkout
    sys.path.insert(0, str(ROOT))
from gpulab.figures.chinese import CJK, needs_translation  # noqa: E402

ZH = ROOT / "notebooks" / "zh"
ENGLISH_FEEDBACK = re.compile(r"^(Correct|Not yet): ", re.M)


def missing_glyphs(notebook: Path) -> int:
    """How many outputs of an executed notebook carry matplotlib's "Glyph ... missing from font" warning."""
    return sum("missing from font" in "".join(output.get("text", []))
               for cell in json.loads(notebook.read_text(encoding="utf-8"))["cells"]
               for output in cell.get("outputs", []))


def feedback_lines(notebook: Path) -> tuple[list[str], list[str]]:
    """The feedback lines of an executed notebook: (those in Chinese, those in English)."""
    chinese, english = [], []
    for cell in json.loads(notebook.read_text(encoding="utf-8"))["cells"]:
        for output in cell.get("outputs", []):
            text = "".join(output.get("text", [])) + "".join(output.get("data", {}).get("text/plain", []))
            for line in text.splitlines():
                if ENGLISH_FEEDBACK.match(line):
                    english.append(f"{notebook.name}: {line}")
                elif line.startswith(("正确：", "还不对：")):
                    chinese.append(line)
    return chinese, english


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("outdir", type=Path)
    parser.add_argument("notebooks", nargs="*", type=Path)
    parser.add_argument("--jobs", type=int, default=2)
    args = parser.parse_args(argv)
    notebooks = args.notebooks or sorted(ZH.glob("[0-9][0-9]_*.ipynb"))
    args.outdir.mkdir(parents=True, exist_ok=True)
    log = args.outdir / "plots.jsonl"
    log.unlink(missing_ok=True)
    run = subprocess.run([sys.executable, str(ROOT / "scripts" / "run_notebooks.py"), str(args.outdir),
                          *map(str, notebooks), "--jobs", str(args.jobs)],
                         env={**os.environ, "GPULAB_PLOT_LOG": str(log)}, timeout=1800)
    chinese, english, boxes = [], [], 0
    for notebook in notebooks:
        done = args.outdir / Path(notebook).name
        if done.exists():
            zh, en = feedback_lines(done)
            chinese += zh
            english += en
            boxes += missing_glyphs(done)
    figures = [json.loads(line) for line in log.read_text(encoding="utf-8").splitlines()] if log.exists() else []
    bare_titles = sorted({t for f in figures for t in f["titles"] if not CJK.search(t) and needs_translation(t)
                          and re.search(r"[a-z]{2}", t)})  # MEDV, RM: a column's name
    left = collections.Counter(t for f in figures for t in f["left"])
    print(f"feedback lines: {len(chinese)} in Chinese, {len(english)} in English")
    for line in english:
        print("  English:", line)
    print(f"figures drawn: {len(figures)}; titles and axis labels without Chinese: {len(bare_titles)}")
    for title in bare_titles:
        print("  ", repr(title))
    print(f"outputs warning of characters missing from the plot's font (drawn as empty boxes): {boxes}")
    print(f"other plot texts left in English: {len(left)} distinct")
    for text, count in left.most_common():
        print(f"  {count:3d} x {text!r}")
    return 1 if run.returncode or english or bare_titles or boxes else 0


if __name__ == "__main__":
    raise SystemExit(main())
