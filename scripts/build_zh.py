"""Build the Chinese edition, notebooks/zh/NN_*.ipynb, from the English notebooks and a translation catalogue.

    python scripts/build_zh.py              # rebuild every zh notebook that has a catalogue
    python scripts/build_zh.py --check      # exit 1, naming the notebook and cell, when anything is out of step
    python scripts/build_zh.py --todo NN    # the English cells of notebook NN that need a (new) translation

A catalogue, notebooks/zh/catalog/NN_topic.json, holds one entry per markdown cell of the English notebook,
keyed by the cell's id: ``{"en": HASH, "zh": "the cell in Chinese"}``, where HASH is :func:`cell_hash` of
the English source it translates. Code cells and their outputs are copied from the English notebook as they
are, so nothing re-runs and nothing can differ, except one thing a zh kernel prints differently: an exercise's
feedback line ("Correct: ..." / "Not yet: ...") is shown as a kernel of this edition prints it (正确：/还不对：,
the message from gpulab/exercises/feedback_zh.json), see :func:`outputs_in_chinese`. Links in a translation are written as in the English cell;
the build points them at the right place from notebooks/zh/ (a link to another notebook stays in zh/, a
schematic drawn in Chinese is the one in notebooks/zh/figures/, any other relative path gains ``../``). Never edit notebooks/zh/*.ipynb by hand: change the catalogue and rebuild.
"""

from __future__ import annotations

import argparse
import copy
import hashlib
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as a script from a checkout
    sys.path.insert(0, str(ROOT))
from gpulab.atomic import atomic_write  # noqa: E402
from gpulab.exercises import Feedback  # noqa: E402
EN = ROOT / "notebooks"
ZH = EN / "zh"
CATALOG = ZH / "catalog"
REBUILD = "python scripts/build_zh.py"
LINK = re.compile(r"(\]\()([^)\s]+)(\))")
NOTEBOOK_NAME = re.compile(r"^\d\d_[a-z0-9_]+\.ipynb(#.*)?$")
HEADING = re.compile(r"^#{1,6}\s+(.*?)\s*$", re.M)
FEEDBACK_LINE = re.compile(r"^(Correct|Not yet): (.*)$", re.M)


class OutOfStep(Exception):
    """A zh notebook cannot be built, or is not what the build would write: the message says where and why."""


def cell_hash(source: str) -> str:
    """The first 16 hex digits of the SHA-256 of an English cell's source: it changes when the cell does."""
    return hashlib.sha256(source.encode("utf-8")).hexdigest()[:16]


def _source(cell: dict) -> str:
    src = cell.get("source", "")
    return "".join(src) if isinstance(src, list) else src


def _lines(text: str) -> list[str]:
    lines = text.splitlines(keepends=True)
    if lines and lines[-1].endswith("\n"):
        lines[-1] = lines[-1][:-1]
    return lines


def heading_anchor(heading: str) -> str:
    """The id JupyterLab gives a heading: its rendered text with every space a hyphen."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link shows its text
    return re.sub(r"[`*]", "", text).strip().replace(" ", "-")


def anchor_map(notebook: Path, entries: dict) -> dict[str, str]:
    """English heading anchor -> the zh one, for the headings each translated cell keeps in order."""
    found: dict[str, str] = {}
    for cell in json.loads(notebook.read_text(encoding="utf-8"))["cells"]:
        entry = entries.get(cell["id"])
        if cell["cell_type"] == "markdown" and entry:
            en, zh = HEADING.findall(_source(cell)), HEADING.findall(entry["zh"])
            if len(en) == len(zh):
                found.update({heading_anchor(a): heading_anchor(b) for a, b in zip(en, zh)})
    return found


def relink(markdown: str, anchors: dict[str, dict[str, str]] | None = None, here: str = "") -> str:
    """Links written as from notebooks/, pointed at their target from notebooks/zh/.

    ``anchors`` (notebook name -> English anchor -> zh anchor) moves a link to a section onto the zh
    heading's anchor, in this notebook (``here``) or another one.
    """
    anchors = anchors or {}

    def fix(m: re.Match) -> str:
        target = m.group(2)
        if re.match(r"^[a-z]+:", target):
            return m.group(0)  # a web link
        page, _, anchor = target.partition("#")
        if not page or NOTEBOOK_NAME.match(page):  # this notebook or another one: its zh twin is beside it
            if anchor:
                anchor = anchors.get(page or here, {}).get(anchor, anchor)
                return f"{m.group(1)}{page}#{anchor}{m.group(3)}"
            return m.group(0)
        if page.startswith("figures/") and (ZH / page).is_file():
            return m.group(0)  # a schematic drawn in Chinese (scripts/make_figures.py): notebooks/zh/figures/
        return f"{m.group(1)}../{target}{m.group(3)}"
    return LINK.sub(fix, markdown)


def all_anchors() -> dict[str, dict[str, str]]:
    """English anchor -> zh anchor for every notebook that has a catalogue."""
    return {nb.name: anchor_map(nb, load_catalog(nb)) for nb in english_notebooks() if catalog_path(nb).is_file()}


def catalog_path(notebook: Path) -> Path:
    return CATALOG / f"{notebook.stem}.json"


def load_catalog(notebook: Path) -> dict:
    """The catalogue of ``notebook``'s translations (``{}`` when there is none yet)."""
    path = catalog_path(notebook)
    return json.loads(path.read_text(encoding="utf-8"))["cells"] if path.is_file() else {}


def todo(notebook: Path) -> list[dict]:
    """The markdown cells whose translation is missing or older than the English cell."""
    entries = load_catalog(notebook)
    out = []
    for cell in json.loads(notebook.read_text(encoding="utf-8"))["cells"]:
        if cell["cell_type"] == "markdown":
            src, entry = _source(cell), entries.get(cell["id"])
            if entry is None or entry.get("en") != cell_hash(src):
                out.append({"id": cell["id"], "en": cell_hash(src), "english": src,
                            "why": "no translation" if entry is None else "the English cell changed"})
    return out


def feedback_in_chinese(text: str) -> str:
    """``text`` with each feedback line as a zh kernel prints it."""
    return FEEDBACK_LINE.sub(lambda m: str(Feedback(m.group(1) == "Correct", m.group(2), "zh")), text)


def outputs_in_chinese(outputs: list[dict]) -> list[dict]:
    """A code cell's outputs with their feedback lines in Chinese (printed or shown as a value); the rest as is."""
    out = copy.deepcopy(outputs)
    for output in out:
        if "text" in output:
            output["text"] = feedback_in_chinese("".join(output["text"])).splitlines(keepends=True)
        plain = output.get("data", {}).get("text/plain")
        if plain is not None:
            output["data"]["text/plain"] = feedback_in_chinese("".join(plain)).splitlines(keepends=True)
    return out


def build_notebook(notebook: Path, anchors: dict[str, dict[str, str]] | None = None) -> dict:
    """The zh notebook for ``notebook``; OutOfStep naming the first cell without a current translation."""
    nb = json.loads(notebook.read_text(encoding="utf-8"))
    entries = load_catalog(notebook)
    anchors = all_anchors() if anchors is None else anchors
    out = copy.deepcopy(nb)
    for cell in out["cells"]:
        if cell["cell_type"] != "markdown":
            if cell.get("outputs"):
                cell["outputs"] = outputs_in_chinese(cell["outputs"])  # the code stays exactly as in English
            continue
        entry, src = entries.get(cell["id"]), _source(cell)
        if entry is None:
            raise OutOfStep(f"{notebook.name} cell {cell['id']}: no translation in {catalog_path(notebook).name}; "
                            f"add it, then run `{REBUILD}`")
        if entry.get("en") != cell_hash(src):
            raise OutOfStep(f"{notebook.name} cell {cell['id']}: the English cell changed since it was translated "
                            f"(catalogue hash {entry.get('en')}, now {cell_hash(src)}); update the translation in "
                            f"{catalog_path(notebook).name}, then run `{REBUILD}`")
        cell["source"] = _lines(relink(entry["zh"], anchors, notebook.name))
    stale = set(entries) - {c["id"] for c in nb["cells"] if c["cell_type"] == "markdown"}
    if stale:
        raise OutOfStep(f"{notebook.name}: the catalogue translates cells the notebook no longer has: "
                        f"{', '.join(sorted(stale))}; remove them, then run `{REBUILD}`")
    out["metadata"] = {**out.get("metadata", {}), "gpulab": {"edition": "zh-CN", "built_from": f"../{notebook.name}"}}
    return out


def dumps(nb: dict) -> str:
    """A notebook as the English ones are written (indent 1, Chinese kept as it is, newline at the end)."""
    return json.dumps(nb, indent=1, ensure_ascii=False) + "\n"


def english_notebooks() -> list[Path]:
    return sorted(EN.glob("[0-9][0-9]_*.ipynb"))


def first_difference(text: str, built: str) -> str:
    """Where a zh notebook first differs from what the build writes: "cell ID", "metadata" or "(not JSON)"."""
    try:
        have = json.loads(text)
    except ValueError:
        return "(not valid JSON)"
    want = json.loads(built)
    cells, wanted = have.get("cells", []), want["cells"]
    for i, cell in enumerate(wanted):
        if i >= len(cells) or cells[i] != cell:
            return f"cell {cell.get('id', i)}"
    if len(cells) > len(wanted):
        return f"cell {cells[len(wanted)].get('id', len(wanted))} (extra)"
    return "metadata" if have != want else "layout"


def check() -> list[str]:
    """Every way the zh edition is out of step with the English notebooks, one line each."""
    problems, anchors = [], all_anchors()
    for notebook in english_notebooks():
        target = ZH / notebook.name
        try:
            built = dumps(build_notebook(notebook, anchors))
        except OutOfStep as exc:
            problems.append(str(exc))
            continue
        if not target.is_file():
            problems.append(f"{target.relative_to(ROOT)} is missing: run `{REBUILD}`")
        elif target.read_text(encoding="utf-8") != built:
            problems.append(f"{target.relative_to(ROOT)} {first_difference(target.read_text(encoding='utf-8'), built)} "
                            f"is not what the build writes (edited by hand, or the English code or outputs changed): "
                            f"run `{REBUILD}`")
    for extra in sorted(set(p.name for p in ZH.glob("*.ipynb")) - {p.name for p in english_notebooks()}):
        problems.append(f"notebooks/zh/{extra} has no English notebook: remove it")
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 and say what is out of step")
    parser.add_argument("--todo", metavar="NN", help="print the cells of notebook NN that need translating, as JSON")
    args = parser.parse_args(argv)
    if args.todo:
        [notebook] = [p for p in english_notebooks() if p.name.startswith(f"{int(args.todo):02d}_")] or [None]
        if notebook is None:
            parser.error(f"no English notebook {args.todo!r}")
        print(json.dumps(todo(notebook), ensure_ascii=False, indent=1))
        return 0
    if args.check:
        problems = check()
        print("\n".join(problems) or "the zh edition is in step with the English notebooks")
        return 1 if problems else 0
    ZH.mkdir(exist_ok=True)
    built, anchors = 0, all_anchors()
    for notebook in english_notebooks():
        if catalog_path(notebook).is_file():
            text = dumps(build_notebook(notebook, anchors))
            atomic_write(ZH / notebook.name, lambda tmp: tmp.write_text(text, encoding="utf-8"))
            built += 1
    print(f"{built} zh notebook(s) built in notebooks/zh/")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except OutOfStep as exc:
        sys.exit(f"error: {exc}")
