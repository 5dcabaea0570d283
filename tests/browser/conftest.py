"""Fixtures for the browser tests: one private JupyterLab and one headless Chromium per session.

Both are stopped on every exit path. Without Playwright or Chromium the browser tests are skipped,
unless GPULAB_REQUIRE_BROWSER=1 (set by `make test-browser`), which turns the skip into a failure.
"""
from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest


from browser_lab import LabServer, start_lab, stop_lab
from browser_ui import CHROMIUM, VIEWPORT, launch_chromium

REPO = Path(__file__).resolve().parents[2]
NOTEBOOK_DIR = REPO / "notebooks"
# Not linked into the served mirror: notebooks/ is copied, the rest is not the notebooks' business.
MIRROR_SKIP = {"notebooks", ".git", ".venv", "screenshots", ".pytest_cache"}


def _missing_browser() -> str | None:
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "Playwright is not installed (run: bash scripts/browser_setup.sh)"
    if not Path(CHROMIUM).exists():
        return f"{CHROMIUM} is missing (run: bash scripts/browser_setup.sh)"
    return None


@pytest.fixture(scope="session")
def browser_available() -> None:
    reason = _missing_browser()
    if reason and os.environ.get("GPULAB_REQUIRE_BROWSER") == "1":
        pytest.fail(reason)
    if reason:
        pytest.skip(reason)


@pytest.fixture(scope="session")
def lab(browser_available, tmp_path_factory) -> LabServer:
    """JupyterLab serving a mirror of the repository whose notebooks/ is a throwaway copy.

    Notebooks run with notebooks/ as their working folder next to the repository's other folders
    (linked, as `make lab` serves them), but cannot change the committed .ipynb files.
    """
    base = tmp_path_factory.mktemp("jupyterlab")
    root = base / "gpulab"
    root.mkdir()
    for entry in REPO.iterdir():
        if entry.name not in MIRROR_SKIP:
            (root / entry.name).symlink_to(entry, target_is_directory=entry.is_dir())
    shutil.copytree(
        NOTEBOOK_DIR, root / "notebooks", ignore=shutil.ignore_patterns(".ipynb_checkpoints", "__pycache__")
    )
    server = start_lab(root, base / "state")
    try:
        yield server
    finally:
        stop_lab(server)


@pytest.fixture(scope="session")
def chromium(browser_available):
    from playwright.sync_api import sync_playwright

    playwright = sync_playwright().start()
    try:
        browser = launch_chromium(playwright)
        try:
            yield browser
        finally:
            browser.close()
    finally:
        playwright.stop()


@pytest.fixture
def page(chromium, lab):
    """A fresh tab; afterwards the tab is closed (never saved) and its kernel shut down."""
    tab = chromium.new_page(viewport=VIEWPORT)
    tab.set_default_timeout(30_000)
    try:
        yield tab
    finally:
        tab.close()
        lab.shutdown_kernels()


@pytest.fixture(scope="session")
def screenshot_dir() -> Path:
    return Path(os.environ.get("GPULAB_SCREENSHOTS", REPO / "screenshots"))
