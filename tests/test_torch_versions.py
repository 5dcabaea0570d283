"""gpulab.torch_versions: which notebooks a torch can run, the one-line stop, and agreement with the files."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

from gpulab import torch_versions
from gpulab.course import environment as doctor
from gpulab.course import environment as preflight
from gpulab.torch_versions import NEEDS, TorchTooOld

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("found, runs", [("2.10.1+cu128", False), ("2.11.0+cu130", True), ("2.13.0+cpu", True),
                                         ("2.11.0a0+git1234", True), ("2.6.0", False)])
def test_notebook_13_needs_2_11_whatever_the_build_tag(found, runs):
    assert torch_versions.runs_here("13", found) is runs


def test_too_old_stops_with_one_line_naming_both_versions_and_the_fix():
    with pytest.raises(TorchTooOld) as info:
        torch_versions.require("13", found="2.10.0+cu128")
    message = str(info.value)
    assert "\n" not in message and "needs torch 2.11 or newer" in message and "this is torch 2.10.0+cu128" in message
    assert 'pip install --upgrade "torch>=2.11"' in message and "restart the kernel" in message
    assert info.value._render_traceback_() == [f"TorchTooOld: {message}"]  # what Jupyter shows: one line
    assert torch_versions.require("13", found="2.13.0") == "torch 2.13.0: new enough for notebook 13 (needs 2.11 or newer)"
    assert torch_versions.require("04", found="2.6.0").endswith("(needs 2.6 or newer)")


@pytest.mark.parametrize("bad", ["13.", "3", 13, "ab", None])
def test_a_notebook_is_named_by_its_two_digits(bad):
    with pytest.raises(ValueError, match="two-digit number"):
        torch_versions.needed(bad)


def test_the_floor_is_what_pyproject_admits():
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    assert re.search(r'"torch>=([\d.]+)"', text).group(1) == torch_versions.FLOOR
    assert all(torch_versions.release(need) > torch_versions.release(torch_versions.FLOOR) for need, _ in NEEDS.values())


def _first_code_cell(number: str) -> tuple[str, str]:
    import nbformat

    [path] = ROOT.glob(f"notebooks/{number}_*.ipynb")
    nb = nbformat.read(path, as_version=4)
    return nb.cells[0].source, next(c.source for c in nb.cells if c.cell_type == "code")


@pytest.mark.parametrize("number", sorted({p.name[:2] for p in (ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")}))
def test_each_notebook_checks_what_its_title_says(number):
    title, first_code = _first_code_cell(number)
    needs = re.search(r"^\*\*Needs:\*\* torch ([\d.]+) or newer", title, re.M)
    if number in NEEDS:
        assert needs and needs.group(1) == NEEDS[number][0], f"notebook {number}'s title must say **Needs:** torch ..."
        assert f'torch_versions.require("{number}")' in first_code, f"notebook {number} must check in its first code cell"
    else:
        assert needs is None and "torch_versions.require" not in first_code


def test_doctor_and_preflight_say_which_notebooks_this_torch_runs(monkeypatch):
    lines = torch_versions.table("2.10.0")
    assert "notebook 13: needs torch 2.11+ -> NO" in lines and "notebook 08: needs torch 2.9+ -> yes" in lines
    assert lines[-1] == "every other notebook: needs torch 2.6+ -> yes"
    assert "notebook 13: needs torch 2.11+" in doctor.format_report(doctor.report())
    monkeypatch.setattr(torch, "__version__", "2.8.0+cu126")
    check = preflight.check_torch_version()
    assert check.status == preflight.NOTE and "notebook(s) 08, 13 need a newer torch" in check.detail
    assert check.fix.startswith('pip install --upgrade "torch>=2.11"')
    monkeypatch.setattr(torch, "__version__", "2.13.0")
    assert preflight.check_torch_version().status == preflight.OK
