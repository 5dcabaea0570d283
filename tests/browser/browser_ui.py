"""Drive JupyterLab in a Playwright page the way a learner does, and read what it shows.

Selectors are JupyterLab 4's: a notebook panel `.jp-NotebookPanel`, its cells `.jp-Notebook-cell`
(with `data-windowed-list-index`), input prompts `.jp-InputPrompt` ("[*]:" while queued or running,
"[n]:" when done), outputs `.jp-OutputArea-output` (with `data-mime-type`), figures
`.jp-RenderedImage img`, live widgets `.jupyter-widgets`, and the kernel state on the toolbar's
`.jp-Notebook-ExecutionIndicator[data-status]`.
"""
from __future__ import annotations

import os
import time
from pathlib import Path

CHROMIUM = os.environ.get("GPULAB_CHROMIUM", "/usr/bin/chromium")
# No sandbox (root in a container), no GPU, and nothing that dials out: this machine has no network.
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
VIEWPORT = {"width": 1400, "height": 1000}
PANEL = ".jp-NotebookPanel:not(.lm-mod-hidden)"

# Runs in the page: one entry per cell of the visible notebook, in order.
_READ_CELLS_JS = """
(panelSelector) => {
  const panel = document.querySelector(panelSelector);
  if (!panel) return null;
  const cells = [...panel.querySelectorAll('.jp-Notebook .jp-Notebook-cell')];
  return cells.map((cell) => {
    const type = cell.classList.contains('jp-CodeCell') ? 'code'
      : cell.classList.contains('jp-MarkdownCell') ? 'markdown' : 'raw';
    const prompt = cell.querySelector('.jp-InputArea .jp-InputPrompt');
    const outputs = [...cell.querySelectorAll('.jp-Cell-outputArea > .jp-OutputArea-child > .jp-OutputArea-output')];
    const mdImages = [...cell.querySelectorAll('.jp-RenderedMarkdown img')];
    return {
      index: Number(cell.getAttribute('data-windowed-list-index')),
      type,
      prompt: prompt ? prompt.textContent.trim() : '',
      markdown_images: mdImages.filter((img) => img.complete && img.naturalWidth > 0).length,
      outputs: outputs.map((out) => {
        const text = out.textContent || '';
        const imgs = [...out.querySelectorAll('.jp-RenderedImage img')];
        return {
          mime: out.getAttribute('data-mime-type') || '',
          text: text.length > 6000 ? text.slice(0, 4000) + '\\n...\\n' + text.slice(-2000) : text,
          widgets: out.querySelectorAll('.jupyter-widgets').length,
          images: imgs.filter((img) => img.complete && img.naturalWidth > 0).length,
        };
      }),
    };
  });
}
"""

_PROGRESS_JS = """
(panelSelector) => {
  const panel = document.querySelector(panelSelector);
  if (!panel) return null;
  // Cells whose code is collapsed (solutions) show no prompt: they count only through their neighbours.
  const prompts = [...panel.querySelectorAll('.jp-CodeCell .jp-InputArea .jp-InputPrompt')]
    .map((p) => p.textContent.trim());
  const indicator = panel.querySelector('.jp-Notebook-ExecutionIndicator');
  const dialog = document.querySelector('.jp-Dialog');
  return {
    dialog: dialog ? dialog.innerText.trim().slice(0, 500) : null,
    visible: prompts.length,
    running: prompts.filter((p) => p.includes('*')).length,
    done: prompts.filter((p) => /^\\[\\d+\\]/.test(p)).length,
    status: indicator ? indicator.getAttribute('data-status') : null,
  };
}
"""


def launch_chromium(playwright):
    """Headless Debian Chromium (Playwright gives it a fresh, temporary profile)."""
    if not Path(CHROMIUM).exists():
        raise FileNotFoundError(f"{CHROMIUM} is missing: run scripts/browser_setup.sh")
    return playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, timeout=60_000)


def open_notebook(page, server, path: str, timeout: float = 60.0) -> None:
    """Load JupyterLab with the notebook at `path` (relative to the served folder) open, in a fresh workspace."""
    workspace = "nb-" + "".join(ch if ch.isalnum() else "-" for ch in Path(path).stem)
    page.goto(server.url(f"/lab/workspaces/{workspace}/tree/{path}?reset"), timeout=timeout * 1000)
    page.wait_for_selector(f"{PANEL} .jp-Notebook .jp-Notebook-cell", timeout=timeout * 1000)
    # Wait until the notebook has its kernel. JupyterLab asks "Select Kernel" when it opens a notebook
    # before it has read the server's kernel list: accept its proposal, the notebook's own kernel.
    kernel_name = page.locator(f'{PANEL} [data-jp-item-name="kernelName"]')
    deadline = time.monotonic() + timeout
    while True:
        accept = page.locator(".jp-Dialog .jp-mod-accept")
        if accept.count():
            accept.first.click()
        elif kernel_name.count() and kernel_name.inner_text().strip() not in ("", "No Kernel"):
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"{path}: no kernel after {timeout:.0f} s")
        page.wait_for_timeout(200)


def click_menu(page, menu: str, item: str) -> None:
    """Click `menu` in the menu bar, then `item` in the menu that opens."""
    page.locator(f'.lm-MenuBar-itemLabel:text-is("{menu}")').click()
    page.locator(f'.lm-Menu-content .lm-Menu-itemLabel:text-is("{item}")').click()


def run_all_cells(page, timeout: float) -> float:
    """Clear every output, run every cell from the menus, wait until the kernel is done; seconds taken.

    Done means: no prompt shows "[*]", the kernel is idle, and either every code cell has run or
    nothing changed for a few seconds (an error stops the run; the checks then report it).
    """
    click_menu(page, "Edit", "Clear Outputs of All Cells")
    start = time.monotonic()
    click_menu(page, "Run", "Run All Cells")
    deadline = start + timeout
    settled_since = None
    last = None
    while True:
        state = page.evaluate(_PROGRESS_JS, PANEL)
        if state is None:
            raise RuntimeError("the notebook panel disappeared while running")
        if state["dialog"]:
            raise RuntimeError(f"JupyterLab opened a dialog while running: {state['dialog']!r}")
        quiet = state["running"] == 0 and state["status"] == "idle" and state["done"] > 0
        if quiet and state == last:
            settled_since = settled_since or time.monotonic()
            if state["done"] == state["visible"] or time.monotonic() - settled_since > 3.0:
                return time.monotonic() - start
        else:
            settled_since = None
        last = state
        if time.monotonic() > deadline:
            raise TimeoutError(
                f"cells still running after {timeout:.0f} s: {state['done']} of {state['visible']} code cells done, "
                f"{state['running']} queued or running, kernel {state['status']}"
            )
        time.sleep(0.25)


def expand_all_code(page) -> None:
    """View > Expand All Code: collapsed solution cells show their code and execution count again."""
    click_menu(page, "View", "Expand All Code")


def read_cells(page) -> list[dict]:
    """Every cell of the open notebook as JupyterLab shows it (see browser_checks.find_problems)."""
    cells = page.evaluate(_READ_CELLS_JS, PANEL)
    if cells is None:
        raise RuntimeError("no notebook panel is open")
    return cells


def save_screenshot(page, path: Path, max_height: int = 16000) -> None:
    """Screenshot the whole notebook: hide the side panel, grow the viewport to the notebook's height."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if page.locator("#jp-left-stack").is_visible() and not page.locator(".jp-Dialog").count():
        page.locator(".jp-SideBar.jp-mod-left .lm-TabBar-tab.lm-mod-current").first.click()
    height = page.evaluate(
        """(panelSelector) => {
            const panel = document.querySelector(panelSelector);
            const scrollers = [...panel.querySelectorAll('.jp-WindowedPanel-outer, .jp-Notebook')];
            const content = Math.max(...scrollers.map((el) => el.scrollHeight));
            const visible = Math.max(...scrollers.map((el) => el.clientHeight));
            return window.innerHeight + Math.max(0, content - visible);
        }""",
        PANEL,
    )
    page.set_viewport_size({"width": VIEWPORT["width"], "height": int(min(max(height, 600), max_height))})
    page.evaluate(
        """(panelSelector) => document.querySelector(panelSelector)
            .querySelectorAll('.jp-WindowedPanel-outer, .jp-Notebook').forEach((el) => { el.scrollTop = 0; })""",
        PANEL,
    )
    page.wait_for_timeout(300)  # let the notebook lay out at its new size
    tmp = path.with_name(path.name + ".tmp.png")
    try:
        page.screenshot(path=str(tmp), full_page=True)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
        page.set_viewport_size(VIEWPORT)
