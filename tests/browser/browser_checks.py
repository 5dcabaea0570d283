"""What a notebook must look like in JupyterLab after Run All, and the problems found in what it shows.

Expectations come from the committed .ipynb (its tags and the outputs of the clean CPU run that was
committed); what JupyterLab shows comes from the DOM (see browser_ui.read_cells). Both are plain data,
so the rules here are tested without a browser.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import nbformat

WIDGET_MIME = "application/vnd.jupyter.widget-view+json"
IMAGE_MIMES = ("image/png", "image/jpeg", "image/svg+xml")
STDERR_MIME = "application/vnd.jupyter.stderr"  # JupyterLab renders both stderr and errors with it
PROMPT_DONE = re.compile(r"^\[\d+\]:?$")
# An error output (IPython's traceback) as JupyterLab prints it: a traceback header or an exception line.
ERROR_TEXT = re.compile(
    r"Traceback \(most recent call last\)|^\s*[A-Za-z_][\w.]*(Error|Exception|Interrupt|Exit)\b(:|\s|$)",
    re.MULTILINE,
)
WIDGET_PLACEHOLDERS = ("Loading widget", "Error displaying widget", "Error rendering widget")


def _widget_class_names() -> list[str]:
    import ipywidgets

    names = {
        name for name in dir(ipywidgets)
        if isinstance(getattr(ipywidgets, name), type) and issubclass(getattr(ipywidgets, name), ipywidgets.Widget)
    }
    return sorted(names | {"interactive"}, key=len, reverse=True)


# The plain-text fallback a widget shows when no widget manager renders it: "HBox(children=(...".
WIDGET_FALLBACK_TEXT = re.compile(r"^\s*(?:%s)\(" % "|".join(map(re.escape, _widget_class_names())))


@dataclass
class CellExpectation:
    """One cell of the committed notebook: what must happen to it in the browser."""

    index: int
    cell_type: str
    runs: bool = False  # a code cell with source: must get an execution count
    raises: bool = False  # tagged raises-exception: must show an error, may show one
    widget: bool = False  # the committed run displayed a widget here
    image: bool = False  # the committed run displayed a figure here
    embeds: int = 0  # a markdown cell: the images it embeds (the course's schematics)


@dataclass
class NotebookExpectations:
    name: str
    cells: list[CellExpectation] = field(default_factory=list)

    @property
    def plots(self) -> bool:
        return any(cell.image for cell in self.cells)


def read_expectations(path: Path) -> NotebookExpectations:
    """Read what the browser must show for the notebook at `path`."""
    path = Path(path)
    if path.suffix != ".ipynb":
        raise ValueError(f"{path.name!r} is not a notebook: expected a .ipynb file")
    notebook = nbformat.read(path, as_version=4)
    expected = NotebookExpectations(path.name)
    for index, cell in enumerate(notebook.cells):
        item = CellExpectation(index, cell.cell_type)
        if cell.cell_type == "markdown":
            item.embeds = len(re.findall(r"!\[[^\]]*\]\([^)\s]+\)", cell.source))
        if cell.cell_type == "code":
            item.runs = bool(cell.source.strip())
            item.raises = "raises-exception" in cell.metadata.get("tags", [])
            bundles = [out.get("data", {}) for out in cell.get("outputs", [])]
            item.widget = any(WIDGET_MIME in data for data in bundles)
            item.image = any(mime in data for data in bundles for mime in IMAGE_MIMES)
        expected.cells.append(item)
    return expected


def is_error_output(output: dict) -> bool:
    """True when a rendered output is an error (a traceback), not ordinary stdout or a warning."""
    return output.get("mime") == STDERR_MIME and bool(ERROR_TEXT.search(output.get("text", "")))


def find_problems(expected: NotebookExpectations, cells: list[dict]) -> list[str]:
    """Compare the DOM's cells (browser_ui.read_cells) with the expectations; one line per problem."""
    name = expected.name
    if len(cells) != len(expected.cells):
        return [f"{name}: JupyterLab shows {len(cells)} cells, the notebook has {len(expected.cells)}"]
    problems: list[str] = []
    total_images = 0
    for want, seen in zip(expected.cells, cells):
        where = f"{name} cell {want.index}"
        outputs = seen.get("outputs", [])
        total_images += sum(out.get("images", 0) for out in outputs)
        if want.cell_type == "markdown" and seen.get("markdown_images", want.embeds) < want.embeds:
            problems.append(f"{where}: embeds {want.embeds} picture(s), JupyterLab shows "
                            f"{seen.get('markdown_images', 0)} loaded")
        if want.cell_type != "code":
            continue
        prompt = seen.get("prompt", "")
        if want.runs and not PROMPT_DONE.match(prompt):
            problems.append(f"{where}: did not run (prompt {prompt!r})")
        errors = [out for out in outputs if is_error_output(out)]
        if errors and not want.raises:
            lines = [line.strip() for line in errors[0]["text"].splitlines() if line.strip()]
            problems.append(f"{where}: error output: {lines[-1][:300]}")  # the exception line
        if want.raises and want.runs and not errors:
            problems.append(f"{where}: tagged raises-exception but shows no error")
        for out in outputs:
            text = out.get("text", "")
            if any(marker in text for marker in WIDGET_PLACEHOLDERS):
                problems.append(f"{where}: widget not rendered: {text.strip()[:120]!r}")
            elif out.get("mime") == "text/plain" and WIDGET_FALLBACK_TEXT.match(text):
                problems.append(f"{where}: widget shown as plain text: {text.strip()[:120]!r}")
        widgets = sum(out.get("widgets", 0) for out in outputs)
        if want.widget and widgets == 0:
            problems.append(f"{where}: expected a live ipywidgets widget, found none")
        images = sum(out.get("images", 0) for out in outputs)
        if want.image and images == 0:
            problems.append(f"{where}: expected a figure rendered as an image, found none")
    if expected.plots and total_images == 0:
        problems.append(f"{name}: the notebook plots but no figure was rendered")
    return problems
