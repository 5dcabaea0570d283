"""The browser checks can fail: their rules on plain data, then on a broken notebook in the real UI."""
from __future__ import annotations

import nbformat
import pytest
from browser_checks import find_problems, is_error_output, read_expectations
from browser_ui import expand_all_code, open_notebook, read_cells, run_all_cells

TRACEBACK = (
    "---------------------------------------------------------------------------\n"
    "ZeroDivisionError                         Traceback (most recent call last)\n"
    "Cell In[3], line 1\n----> 1 1/0\n\nZeroDivisionError: division by zero"
)


def write_notebook(path, cells):
    notebook = nbformat.v4.new_notebook()
    notebook.metadata["kernelspec"] = {
        "name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python",
    }
    notebook.cells = cells
    nbformat.write(notebook, path)
    return path


def code(source, tags=(), outputs=()):
    cell = nbformat.v4.new_code_cell(source)
    if tags:
        cell.metadata["tags"] = list(tags)
    cell.outputs = [nbformat.from_dict(out) for out in outputs]
    return cell


FIGURE = {"output_type": "display_data", "metadata": {}, "data": {"image/png": "iVBORw0KGgo=", "text/plain": "<Figure>"}}
WIDGET = {
    "output_type": "display_data", "metadata": {},
    "data": {"application/vnd.jupyter.widget-view+json": {"model_id": "x", "version_major": 2, "version_minor": 0},
             "text/plain": "IntSlider(value=0)"},
}


def dom_cell(index, prompt="[1]:", outputs=(), kind="code"):
    return {"index": index, "type": kind, "prompt": prompt, "outputs": list(outputs)}


def out(mime="application/vnd.jupyter.stdout", text="", widgets=0, images=0):
    return {"mime": mime, "text": text, "widgets": widgets, "images": images}


@pytest.fixture
def expected(tmp_path):
    path = write_notebook(tmp_path / "99_demo.ipynb", [
        nbformat.v4.new_markdown_cell("# 99 · Demo"),
        code("print(1)"),
        code("1/0", tags=["raises-exception"]),
        code("plot()", outputs=[FIGURE]),
        code("slider", outputs=[WIDGET]),
        code(""),
    ])
    return read_expectations(path)


def healthy_cells():
    return [
        dom_cell(0, prompt="", kind="markdown"),
        dom_cell(1, "[1]:", [out(text="1\n")]),
        dom_cell(2, "[2]:", [out("application/vnd.jupyter.stderr", TRACEBACK)]),
        dom_cell(3, "[3]:", [out("image/png", images=1)]),
        dom_cell(4, "[4]:", [out("", "", widgets=3)]),
        dom_cell(5, "[ ]:"),
    ]


def test_read_expectations_takes_tags_and_committed_outputs(expected):
    kinds = [(c.cell_type, c.runs, c.raises, c.image, c.widget) for c in expected.cells]
    assert kinds == [
        ("markdown", False, False, False, False),
        ("code", True, False, False, False),
        ("code", True, True, False, False),
        ("code", True, False, True, False),
        ("code", True, False, False, True),
        ("code", False, False, False, False),
    ]
    assert expected.plots


def test_read_expectations_rejects_a_non_notebook(tmp_path):
    with pytest.raises(ValueError, match="not a notebook"):
        read_expectations(tmp_path / "notes.txt")


def test_a_healthy_page_has_no_problems(expected):
    assert find_problems(expected, healthy_cells()) == []


def test_an_error_outside_raises_exception_cells_is_a_problem(expected):
    cells = healthy_cells()
    cells[1]["outputs"].append(out("application/vnd.jupyter.stderr", TRACEBACK))
    assert find_problems(expected, cells) == [
        "99_demo.ipynb cell 1: error output: ZeroDivisionError: division by zero"
    ]


def test_a_warning_on_stderr_is_not_an_error():
    warning = out("application/vnd.jupyter.stderr", "demo.py:3: UserWarning: careful\n  warnings.warn(")
    assert not is_error_output(warning)
    assert is_error_output(out("application/vnd.jupyter.stderr", TRACEBACK))
    assert not is_error_output(out("application/vnd.jupyter.stdout", TRACEBACK))


def test_a_raises_exception_cell_that_does_not_raise_is_a_problem(expected):
    cells = healthy_cells()
    cells[2]["outputs"] = []
    assert find_problems(expected, cells) == [
        "99_demo.ipynb cell 2: tagged raises-exception but shows no error"
    ]


@pytest.mark.parametrize("broken, message", [
    (out("text/plain", "IntSlider(value=0)"), "widget shown as plain text"),
    (out("text/plain", "interactive(children=(IntSlider(value=3),))"), "widget shown as plain text"),
    (out("", "Loading widget..."), "widget not rendered"),
])
def test_a_widget_that_is_not_live_is_a_problem(expected, broken, message):
    cells = healthy_cells()
    cells[4]["outputs"] = [broken]
    problems = find_problems(expected, cells)
    assert any(message in p for p in problems), problems
    assert any("expected a live ipywidgets widget" in p for p in problems), problems


def test_a_dataclass_repr_is_not_mistaken_for_a_widget(expected):
    cells = healthy_cells()
    cells[1]["outputs"].append(out("text/plain", "Split(X_train=tensor([[0.1]]), value=3)"))
    assert find_problems(expected, cells) == []


def test_a_missing_figure_and_an_unrun_cell_are_problems(expected):
    cells = healthy_cells()
    cells[3] = dom_cell(3, "[ ]:")
    assert find_problems(expected, cells) == [
        "99_demo.ipynb cell 3: did not run (prompt '[ ]:')",
        "99_demo.ipynb cell 3: expected a figure rendered as an image, found none",
        "99_demo.ipynb: the notebook plots but no figure was rendered",
    ]


def test_a_different_cell_count_is_a_problem(expected):
    assert "shows 5 cells, the notebook has 6" in find_problems(expected, healthy_cells()[:5])[0]


def test_the_real_ui_reports_a_broken_notebook(lab, page):
    """A notebook with a widget that cannot render and an untagged error, run through JupyterLab."""
    path = write_notebook(lab.root / "notebooks" / "zz_broken.ipynb", [
        code("print('fine')"),
        code(
            "from IPython.display import display\n"
            "display({'application/vnd.jupyter.widget-view+json': {'model_id': 'missing', 'version_major': 2,"
            " 'version_minor': 0}, 'text/plain': 'HBox(children=())'}, raw=True)"
        ),
        code("1/0"),
        code("print('never runs')", outputs=[FIGURE]),
    ])
    try:
        open_notebook(page, lab, "notebooks/zz_broken.ipynb")
        run_all_cells(page, timeout=60)
        expand_all_code(page)
        problems = find_problems(read_expectations(path), read_cells(page))
    finally:
        path.unlink()
    assert any(p.startswith("zz_broken.ipynb cell 1: widget not rendered") for p in problems), problems
    assert any(p.startswith("zz_broken.ipynb cell 2: error output:") and "ZeroDivisionError" in p
               for p in problems), problems
    assert "zz_broken.ipynb cell 3: did not run (prompt '[ ]:')" in problems, problems
    assert "zz_broken.ipynb cell 3: expected a figure rendered as an image, found none" in problems, problems


def test_a_picture_the_markdown_embeds_must_load(tmp_path):
    path = write_notebook(tmp_path / "98_pics.ipynb", [
        nbformat.v4.new_markdown_cell("# 98 · Pictures\n![two ranks swap their halves](figures/x.svg)"),
    ])
    want = read_expectations(path)
    assert want.cells[0].embeds == 1
    shown = [dict(dom_cell(0, prompt="", kind="markdown"), markdown_images=1)]
    assert find_problems(want, shown) == []
    shown[0]["markdown_images"] = 0  # the file is missing, or JupyterLab could not load it
    assert find_problems(want, shown) == ["98_pics.ipynb cell 0: embeds 1 picture(s), JupyterLab shows 0 loaded"]
