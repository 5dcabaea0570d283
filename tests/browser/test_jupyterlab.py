"""Every notebook, run top to bottom through JupyterLab's menus in headless Chromium.

Per notebook: no error output (except cells tagged raises-exception), every widget live, every figure
an image; a screenshot goes to screenshots/NN_topic.png whatever the outcome.
"""
from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from browser_checks import find_problems, is_error_output, read_expectations
from browser_ui import expand_all_code, open_notebook, read_cells, run_all_cells, save_screenshot

NOTEBOOKS = sorted(p.name for p in (Path(__file__).resolve().parents[2] / "notebooks").glob("[0-9][0-9]_*.ipynb"))
# One notebook of the Chinese edition (built from the English one, outputs included): it renders and runs too.
ZH_NOTEBOOK = "zh/04_data_parallel.ipynb"
# Each notebook runs in well under a minute on a 2-core CPU; the margin covers a busy machine.
NOTEBOOK_TIMEOUT = float(os.environ.get("GPULAB_BROWSER_NB_TIMEOUT", "180"))


def draws_differently(page, first: str, second: str) -> bool:
    """Whether the page's font draws two characters with different pixels: a character the fonts lack is an
    empty box, the same for every such character (two private-use characters show it)."""
    return page.evaluate("""([a, b]) => {
        const font = getComputedStyle(document.querySelector('.jp-RenderedMarkdown') || document.body).fontFamily;
        const pixels = (ch) => {
            const canvas = document.createElement('canvas'); canvas.width = 64; canvas.height = 64;
            const g = canvas.getContext('2d'); g.font = '48px ' + font; g.fillText(ch, 4, 52);
            return Array.from(g.getImageData(0, 0, 64, 64).data).join(',');
        };
        return pixels(a) !== pixels(b);
    }""", [first, second])


@pytest.mark.parametrize("name", [*NOTEBOOKS, ZH_NOTEBOOK])
def test_notebook_runs_cleanly_in_jupyterlab(name, lab, page, screenshot_dir):
    start = time.monotonic()
    expected = read_expectations(lab.root / "notebooks" / name)
    open_notebook(page, lab, f"notebooks/{name}")
    try:
        seconds = run_all_cells(page, NOTEBOOK_TIMEOUT)
    finally:  # the screenshot shows what a learner sees, solutions still collapsed
        save_screenshot(page, screenshot_dir / (name.replace("/", "-").removesuffix(".ipynb") + ".png"))
    expand_all_code(page)
    cells = read_cells(page)
    outputs = [out for cell in cells for out in cell["outputs"]]
    print(
        f"\n{name}: cells ran in {seconds:.1f} s through the UI ({time.monotonic() - start:.1f} s with page "
        "load and screenshot); "
        f"{sum(o['images'] for o in outputs)} figures, "
        f"{sum(1 for o in outputs if o['widgets'])} widget outputs, "
        f"{sum(1 for o in outputs if is_error_output(o))} error outputs "
        f"({sum(c.raises for c in expected.cells)} cells tagged raises-exception)"
    )
    problems = find_problems(expected, cells)
    assert not problems, "\n".join(problems)
    if name == ZH_NOTEBOOK:  # the page draws Chinese characters, not the same empty box for each
        assert not draws_differently(page, "\ue000", "\ue001"), "the check cannot tell empty boxes apart"
        assert draws_differently(page, "中", "国"), "Chinese shows as empty boxes: install a Chinese font"
    if name == ZH_NOTEBOOK:  # the same code asks its self-check questions in Chinese there (gpulab.exercises.chinese)
        assert page.get_by_text("自我检查：笔记本 04").count() >= 1, "the zh quiz's title is not in Chinese"
        assert page.get_by_role("button", name="检查", exact=True).count() >= 1, "the zh quiz has no 检查 button"
        texts = [o["text"] for o in outputs]  # the exercise checks ran in this kernel: their feedback is Chinese
        assert any("还不对：" in t or "正确：" in t for t in texts), "no feedback line in Chinese"
        assert not any("Not yet: " in t or "Correct: " in t for t in texts), "a feedback line is in English"
