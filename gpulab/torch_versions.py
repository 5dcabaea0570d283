"""Which torch each notebook needs, and the one-line stop in its first code cell when this torch is older.

The course installs with any torch that ``pyproject.toml`` admits (:data:`FLOOR`), because Colab, Kaggle and
GPU images bring their own. Most notebooks run on all of them. The notebooks in :data:`NEEDS` use parts of
torch that work on CPU processes only from a later release; each reason names the torch change that settles
it. ``require("13")`` at the top of such a notebook stops it with one line: the version it needs, the version
it found and the command that fixes it. ``gpulab doctor`` and ``gpulab preflight`` list the same table.
"""

from __future__ import annotations

from packaging.version import Version

#: The oldest torch the package admits (pyproject.toml says ``torch>=FLOOR``; a test keeps them equal).
FLOOR = "2.6"

#: notebook number -> (the oldest torch it runs on, why). Notebooks not listed need only :data:`FLOOR`.
NEEDS: dict[str, tuple[str, str]] = {
    "08": ("2.9", "FSDP2 on CPU ranks needs torch.cpu.Stream.record_event (2.7, pytorch/pytorch#145935), and "
                  "before 2.9 gloo's averaging reduce-scatter returns the sum (pytorch/pytorch#162338)"),
    "09": ("2.7", "its launch runs FSDP2 on CPU ranks, which needs torch.cpu.Stream.record_event "
                  "(2.7, pytorch/pytorch#145935)"),
    "13": ("2.11", "GPipe with fewer micro-batches than stages is refused before 2.11 (pytorch/pytorch#171462), "
                   "and ScheduleDualPipeV arrives in 2.9"),
}


class TorchTooOld(RuntimeError):
    """This torch is older than a notebook needs. In Jupyter it shows as its one line, without a traceback."""

    def _render_traceback_(self) -> list[str]:  # IPython prints this instead of the traceback
        return [f"TorchTooOld: {self}"]


def release(version: str) -> Version:
    """``'2.11.0+cu130'`` -> ``Version('2.11.0')``: the local build tag does not change what torch can do."""
    return Version(Version(str(version)).base_version)


def needed(notebook: str) -> str:
    """The oldest torch notebook ``notebook`` (``"13"``) runs on."""
    if not (isinstance(notebook, str) and len(notebook) == 2 and notebook.isdigit()):
        raise ValueError(f"notebook={notebook!r}: give its two-digit number, such as '13'")
    return NEEDS.get(notebook, (FLOOR, ""))[0]


def runs_here(notebook: str, found: str | None = None) -> bool:
    """True when torch ``found`` (default: this torch) is new enough for ``notebook``."""
    import torch

    return release(found or torch.__version__) >= release(needed(notebook))


def require(notebook: str, found: str | None = None) -> str:
    """Raise :class:`TorchTooOld` (one line) when this torch is too old for ``notebook``; else say it is fine."""
    import torch

    found = found or torch.__version__
    need = needed(notebook)
    if not runs_here(notebook, found):
        why = NEEDS.get(notebook, (FLOOR, "the course's oldest torch"))[1]
        raise TorchTooOld(f"notebook {notebook} needs torch {need} or newer and this is torch {found}. "
                          f"Fix: pip install --upgrade \"torch>={need}\", then restart the kernel. (Why: {why}.)")
    return f"torch {found}: new enough for notebook {notebook} (needs {need} or newer)"


def table(found: str | None = None) -> list[str]:
    """One line per notebook of :data:`NEEDS`, then the rest: what this torch can run."""
    import torch

    found = found or torch.__version__
    lines = [f"notebook {nb}: needs torch {need}+ -> {'yes' if runs_here(nb, found) else 'NO'}"
             for nb, (need, _) in sorted(NEEDS.items())]
    floor_ok = release(found) >= release(FLOOR)
    return lines + [f"every other notebook: needs torch {FLOOR}+ -> {'yes' if floor_ok else 'NO'}"]
