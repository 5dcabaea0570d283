"""List the English a learner reads in exercise feedback and on plots, as templates for the Chinese catalogues.

    python scripts/zh_strings.py            # the templates with no Chinese yet, and the Chinese nobody uses
    python scripts/zh_strings.py --todo F   # write those with no Chinese to F as {english: ""} to fill in

Two catalogues (``gpulab.translation`` reads them at run time):

- ``gpulab/exercises/feedback_zh.json``: every message an exercise check builds (``correct(...)``,
  ``wrong(...)``) and every English phrase of ``gpulab/exercises`` that such a message may hold. The questions
  themselves are in ``quiz_zh.json``.
- ``gpulab/figures/plots_zh.json``: every title, axis label, legend entry and text of the plots drawn from a
  run's data, in ``gpulab`` and in the notebooks' own plotting cells. Schematics are ``zh_texts.json``'s.

A template is a string as the code writes it, an f-string with its fields as written; ``tests/test_zh_strings.py``
fails when a template has no Chinese, or when a Chinese entry's English is no longer in the code.
"""

from __future__ import annotations

import argparse
import ast
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as a script from a checkout
    sys.path.insert(0, str(ROOT))
from gpulab.figures.chinese import needs_translation  # noqa: E402
from gpulab.translation import literal  # noqa: E402

FEEDBACK = ROOT / "gpulab" / "exercises" / "feedback_zh.json"
PLOTS = ROOT / "gpulab" / "figures" / "plots_zh.json"
#: exercise modules whose strings are not feedback (the quiz's own words, the questions' Chinese)
NOT_FEEDBACK = {"quiz.py", "chinese.py", "questions.py"}
#: calls whose string arguments are not shown as feedback or on a plot
SKIPPED_CALLS = {"Option", "O", "Question", "print", "ValueError", "TypeError", "RuntimeError", "warn",
                 "startswith", "endswith", "getattr", "hasattr", "get", "split", "join", "replace", "format"}
#: calls that put text on a plot; in a plotting module only the functions calling one of them are read
PLOT_CALLS = {"set_title", "set_xlabel", "set_ylabel", "suptitle", "title", "xlabel", "ylabel", "text", "annotate",
              "legend", "canvas", "box", "label", "set_yticks", "set_xticks", "set_yticklabels", "set_xticklabels",
              "barh", "bar", "plot", "scatter", "errorbar", "Patch", "axhline", "axvline", "fill_between", "hist"}
#: calls whose positional strings are shown; any other call's positional strings are settings ("off", "o-", "log")
TEXT_CALLS = {"set_title", "set_xlabel", "set_ylabel", "suptitle", "title", "xlabel", "ylabel", "text", "annotate",
              "canvas", "box", "label", "_error", "Patch", "legend", "set_yticklabels", "set_xticklabels", "set_yticks",
              "set_xticks", "dict", "list", "tuple", "append", "extend"}
#: keywords whose strings are shown; any other keyword's strings are settings (ha="center", cmap="viridis")
TEXT_KEYWORDS = {"label", "title", "xlabel", "ylabel", "text", "s", "labels", "caption", "note"}
#: strings a plotting function passes as settings through a variable (alignment, colours, markers)
SETTINGS = {"gpulab", "dcp", "phase/", "center", "normal", "white", "none", "left", "right", "bottom", "top", "bold", "osD^vP*Xh<>"}
#: matplotlib properties, named by dict keys (arrowprops, bbox)
PROPERTIES = {"arrowstyle", "color", "lw", "linewidth", "shrinkA", "shrinkB", "boxstyle", "facecolor", "edgecolor",
              "alpha", "pad", "fc", "ec", "ls", "linestyle", "hatch", "zorder", "fontsize", "ha", "va"}
#: strings that name rather than say: a figure's file name, a colour, a constant's NAME
NOT_TEXT = re.compile(r"^(\d\d-[a-z0-9-]+|#[0-9a-fA-F]{3,8}|[A-Z][A-Z0-9_]+)$")
PLOT_MODULES = ("gpulab/figures", "gpulab/profiling/roofline.py",
                "gpulab/gpu_reference.py", "gpulab/explorer.py")
#: modules whose tables name what a plot shows (a run's memory parts, a step's phases, precisions): read in full
LABEL_MODULES = ("gpulab/sharding/fsdp_memory.py", "gpulab/profiling/steps.py", "gpulab/distributed/fsdp/probe.py")
SCHEMATIC_ONLY = {"chinese.py", "catalog.py"}


def template(node: ast.expr) -> str | None:
    """The template of a string expression: a constant, an f-string, or a ``+`` of them; None for other code."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value.replace("{", "{{").replace("}", "}}")
    if isinstance(node, ast.JoinedStr):
        out = []
        for part in node.values:
            if isinstance(part, ast.Constant):
                out.append(part.value.replace("{", "{{").replace("}", "}}"))
            else:
                out.append(_field(part))
        return "".join(out)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = template(node.left), template(node.right)
        if left is None and right is None:
            return None
        return (left if left is not None else "{" + ast.unparse(node.left) + "}") + \
               (right if right is not None else "{" + ast.unparse(node.right) + "}")
    return None


def _field(part: ast.FormattedValue) -> str:
    conversion = "" if part.conversion == -1 else "!" + chr(part.conversion)
    spec = ""
    if part.format_spec is not None:
        spec = ":" + "".join(p.value if isinstance(p, ast.Constant) else "{" + ast.unparse(p.value) + "}"
                             for p in part.format_spec.values)
    return "{" + ast.unparse(part.value) + conversion + spec + "}"


def _own_parts(node: ast.expr) -> set[int]:
    """The ids of the nodes a template is made of (not the code inside its fields)."""
    own = {id(node)}
    if isinstance(node, ast.JoinedStr):
        for part in node.values:
            own.add(id(part))
            if isinstance(part, ast.FormattedValue) and part.format_spec is not None:
                own.update(id(sub) for sub in ast.walk(part.format_spec))
    if isinstance(node, ast.BinOp):
        for side in (node.left, node.right):
            if template(side) is not None:
                own.update(_own_parts(side))
    return own


def _call_name(call: ast.Call) -> str:
    func = call.func
    return func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""


def strings(tree: ast.AST, where: str, *, plot: bool = False, phrases: bool = False,
            skip_functions: frozenset[str] | None = None, every_function: bool = False,
            keys_are_labels: bool = False) -> dict[str, list[str]]:
    """Every shown-text template in ``tree`` with English words, and where it is.

    ``phrases``: only text with a space in it (``"auto"``, ``"batch"`` or ``"--standalone"`` name, they do not say);
    ``plot``: only what a plot shows (no settings such as ``ha="center"``); ``skip_functions``: read only the
    functions that draw a plot (``every_function``: every function and the module's tables), except those named
    (the schematics, translated by ``zh_texts.json``).
    """
    found: dict[str, list[str]] = {}
    skip: set[int] = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef)) and body and \
                isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
            skip.add(id(body[0].value))  # a docstring
        if isinstance(node, ast.Raise) or (isinstance(node, ast.Call) and _call_name(node) in SKIPPED_CALLS):
            skip.update(id(sub) for sub in ast.walk(node))
        if isinstance(node, ast.Subscript):  # d["key"] names
            skip.update(id(sub) for sub in ast.walk(node.slice) if isinstance(sub, ast.Constant))
        if isinstance(node, ast.Compare):  # x == "auto" names; a call inside the comparison may still say
            skip.update(id(side) for side in (node.left, *node.comparators) if isinstance(side, ast.Constant))
        if isinstance(node, ast.Dict):  # a key names, not shows; but a notebook's plotting cell, or a table with
            # a phrase among its keys ({"start": 0, "most activations saved": ...}), keys its labels
            labels = keys_are_labels or any(isinstance(k, ast.Constant) and re.search(r"\s", str(k.value))
                                            for k in node.keys)
            skip.update(id(key) for key in node.keys if isinstance(key, ast.Constant)
                        and (key.value in PROPERTIES or not labels))
        if plot and isinstance(node, ast.Call):
            if _call_name(node) not in TEXT_CALLS:  # a setting is one word: "off", "log", "o-", "tab:blue"
                skip.update(id(arg) for arg in node.args if isinstance(arg, ast.Constant)
                            and not re.search(r"\s", str(arg.value)))
            skip.update(id(k.value) for k in node.keywords
                        if k.arg not in TEXT_KEYWORDS and isinstance(k.value, ast.Constant))
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and (
                (not plot and "{" in node.value) or "\\" in node.value or NOT_TEXT.match(node.value)
                or (not keys_are_labels and re.fullmatch(r"[a-z]+(-[a-z]+)+", node.value))
                or (plot and node.value in SETTINGS)):
            skip.add(id(node))  # a str.format template, a regular expression, a name or a colour; a setting
    scopes = [tree]
    if skip_functions is not None:
        scopes = [f for f in ast.walk(tree) if isinstance(f, ast.FunctionDef) and f.name not in skip_functions
                  and (every_function or any(isinstance(c, ast.Call) and _call_name(c) in PLOT_CALLS
                                             for c in ast.walk(f)))]
        if every_function:  # and the module's own tables of labels
            scopes += [node for node in tree.body if isinstance(node, (ast.Assign, ast.AnnAssign))]
    for scope in scopes:
        for node in ast.walk(scope):
            if id(node) in skip:
                continue
            text = template(node) if isinstance(node, (ast.Constant, ast.JoinedStr, ast.BinOp)) else None
            if text is None:
                continue
            skip.update(_own_parts(node))  # its parts are not strings of their own; a field's code may hold some
            if needs_translation(literal(text)) and (not phrases or re.search(r"\s", literal(text))):
                found.setdefault(text, []).append(f"{where}:{getattr(node, 'lineno', 0)}")
    return found


def _merge(into: dict[str, list[str]], more: dict[str, list[str]]) -> None:
    for text, places in more.items():
        into.setdefault(text, []).extend(places)


def feedback_templates() -> dict[str, list[str]]:
    """Every English template of ``gpulab/exercises`` a feedback line may show."""
    found: dict[str, list[str]] = {}
    for path in sorted((ROOT / "gpulab" / "exercises").glob("*.py")):
        if path.name not in NOT_FEEDBACK:
            _merge(found, strings(ast.parse(path.read_text(encoding="utf-8")), path.relative_to(ROOT).as_posix(),
                                  phrases=True))
    return found


def _code_cells(notebook: Path) -> dict[int, tuple[ast.Module, bool]]:
    """Each code cell of ``notebook`` by index: its syntax tree (magics left out) and whether it drew a plot."""
    cells = json.loads(notebook.read_text(encoding="utf-8"))["cells"]
    out = {}
    for i, cell in enumerate(cells):
        if cell["cell_type"] != "code":
            continue
        lines = [line for line in "".join(cell["source"]).splitlines() if not line.lstrip().startswith(("%", "!"))]
        plots = any("image/png" in o.get("data", {}) for o in cell.get("outputs", []))
        out[i] = (ast.parse("\n".join(lines)), plots)
    return out


def plot_templates() -> dict[str, list[str]]:
    """Every English template a plot drawn from a run's data may show."""
    found: dict[str, list[str]] = {}
    paths = []
    for entry in PLOT_MODULES + LABEL_MODULES:
        path = ROOT / entry
        paths += sorted(path.glob("*.py")) if path.is_dir() else [path]
    from gpulab.figures.catalog import STATIC

    schematics = frozenset(draw.__name__ for draw in STATIC.values())
    for path in paths:
        if path.name not in SCHEMATIC_ONLY:
            _merge(found, strings(ast.parse(path.read_text(encoding="utf-8")), path.relative_to(ROOT).as_posix(),
                                  plot=True, skip_functions=schematics,
                                  every_function=path.parent.name == "figures"
                                  or path.relative_to(ROOT).as_posix() in LABEL_MODULES))
    for notebook in sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")):
        cells = _code_cells(notebook)
        for index, (tree, plots) in cells.items():
            if not plots:
                continue
            _merge(found, strings(tree, f"{notebook.name}[{index}]", plot=True, keys_are_labels=True))
            used = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
            for before, (earlier, _) in cells.items():  # the labels a plot takes from an earlier cell's table
                if before >= index:
                    break
                for statement in earlier.body:
                    if isinstance(statement, ast.Assign) and used & {t.id for t in statement.targets
                                                                     if isinstance(t, ast.Name)}:
                        _merge(found, strings(ast.Module([statement], []), f"{notebook.name}[{before}]",
                                              plot=True, keys_are_labels=True))
    return found


def out_of_step(path: Path, wanted: dict[str, list[str]]) -> tuple[dict[str, list[str]], list[str]]:
    """The templates with no Chinese in ``path`` (with where they are written), and its entries nobody uses."""
    have = json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}
    missing = {text: places for text, places in wanted.items() if not have.get(text)}
    return missing, sorted(set(have) - set(wanted))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--todo", type=Path, help="write the templates with no Chinese here as {english: ''}")
    args = parser.parse_args(argv)
    todo, bad = {}, False
    for path, wanted in ((FEEDBACK, feedback_templates()), (PLOTS, plot_templates())):
        missing, unused = out_of_step(path, wanted)
        for text, places in missing.items():
            print(f"{path.name}: no Chinese for {text!r} ({', '.join(places)})")
        for text in unused:
            print(f"{path.name}: {text!r} is no longer in the code")
        todo.update({text: "" for text in missing})
        bad = bad or bool(missing or unused)
    if args.todo:
        args.todo.write_text(json.dumps(todo, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
