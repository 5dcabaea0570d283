"""Generate the README's notebook index and each notebook's previous/next links from the title cells.

    python scripts/readme_index.py            # rewrite the index block in README.md
    python scripts/readme_index.py --check    # exit 1 if README.md is stale (CI, hygiene tests)
    python scripts/readme_index.py --nav      # also rewrite the navigation line in each notebook's last cell

The Chinese edition's index in README.zh-CN.md is generated the same way from notebooks/zh/*.ipynb, whose
title cells read ``# NN · 标题`` / ``**你将学到**：…`` / ``**运行时间**：在只有 CPU 的笔记本电脑上约 N 秒……`` (the colon
outside the bold: a bold span that ends in a full-width colon does not close before a Chinese character).

Every notebook's first cell is markdown of this shape (one line each):

    # NN · Title
    **You will learn:** one sentence.
    **Runs in:** about N s on a CPU laptop, about N s on a GPU.

tests/test_hygiene.py uses the same functions, so the index and links are never maintained by hand.
"""
from __future__ import annotations

import argparse
import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
START, END = "<!-- index:start -->", "<!-- index:end -->"
NAME_RE = re.compile(r"^(\d{2})_[a-z0-9]+(?:_[a-z0-9]+)*\.ipynb$")
TITLE_RE = re.compile(r"^# (\d{2}) · (\S.*?)\s*$")
NAV_LINK_RE = re.compile(r"\]\(\d{2}_[A-Za-z0-9_]+\.ipynb\)")


@dataclass(frozen=True)
class Header:
    """What a notebook's title cell says."""

    filename: str
    number: str
    title: str
    learn: str
    cpu_time: str


def notebook_paths(folder: Path) -> list[Path]:
    """All .ipynb files directly in ``folder``, sorted by name."""
    return sorted(Path(folder).glob("*.ipynb"))


def load_cells(path: Path) -> list[dict]:
    """The notebook's cells as plain dicts."""
    return json.loads(Path(path).read_text(encoding="utf-8")).get("cells", [])


def source(cell: dict) -> str:
    """A cell's source as one string."""
    src = cell.get("source", "")
    return "".join(src) if isinstance(src, list) else str(src)


@dataclass(frozen=True)
class Edition:
    """How one language's title cells read, and where its notebooks are listed."""

    learn: re.Pattern
    runs: re.Pattern
    shape: str
    prefix: str  # before a file name in errors: "" or "zh/"


EN = Edition(re.compile(r"^\*\*You will learn:\*\* (\S.*?)\s*$"),
             re.compile(r"^\*\*Runs in:\*\* (about \S.*?) on a CPU laptop, (\S.*?)\s*$"),
             "'# NN · Title' / '**You will learn:** ...' / '**Runs in:** about N s on a CPU laptop, ...'", "")
ZH = Edition(re.compile(r"^\*\*你将学到\*\*：\s*(\S.*?)\s*$"),
             re.compile(r"^\*\*运行时间\*\*：\s*在只有 CPU 的笔记本电脑上(约[^，。]*)"),
             "'# NN · 标题' / '**你将学到**：……' / '**运行时间**：在只有 CPU 的笔记本电脑上约 N 秒……'", "zh/")


def parse_header(filename: str, cell: dict, edition: Edition = EN) -> Header:
    """Parse a title cell; ValueError naming the file and the expected shape when it does not match."""
    lines = [ln for ln in source(cell).splitlines() if ln.strip()]
    name, shape = edition.prefix + filename, edition.shape
    if cell.get("cell_type") != "markdown" or len(lines) < 3:
        raise ValueError(f"{name}: first cell must be markdown with three lines {shape}")
    title, learn, runs = TITLE_RE.match(lines[0]), edition.learn.match(lines[1]), edition.runs.match(lines[2])
    if not (title and learn and runs):
        raise ValueError(f"{name}: first cell {lines[:3]!r} does not match {shape}")
    number = NAME_RE.match(filename)
    if not number or number.group(1) != title.group(1):
        raise ValueError(f"{name}: title number {title.group(1)!r} must match the file name's NN")
    return Header(filename, title.group(1), title.group(2), learn.group(1), runs.group(1).strip())


def read_header(path: Path, edition: Edition = EN) -> Header:
    """The parsed title cell of the notebook at ``path``."""
    cells = load_cells(path)
    if not cells:
        raise ValueError(f"{edition.prefix}{Path(path).name}: notebook has no cells")
    return parse_header(Path(path).name, cells[0], edition)


# The course's two parts, by notebook number: (first number, heading). A part with no notebook is left out.
PARTS = (("01", "**Part 1 · The course:** the article's topics, rebuilt and measured."),
         ("08", "**Part 2 · Going further:** sharding, collectives, debugging, profiling, tensor and pipeline parallelism, choosing a layout, Triton kernels, and long sequences and mixtures of experts; all real on a CPU (ranks as processes, kernels in Triton's interpreter)."))


PARTS_ZH = (("01", "**第一部分 · 课程**：原文的各个主题，逐一重建并实测。"),
            ("08", "**第二部分 · 进阶**：分片、集合通信、调试、性能分析、张量并行与流水线并行、如何选择并行布局、Triton 核函数，以及长序列与混合专家；全部在 CPU 上真实运行（多个进程充当各个 rank，核函数在 Triton 解释器中运行）。"))
HEAD_EN = "| # | Notebook | What you will learn | CPU run time |"
HEAD_ZH = "| # | 笔记本 | 你将学到 | CPU 运行时间 |"


def part_of(number: str) -> int:
    """Index in ``PARTS`` of the part that notebook ``number`` belongs to."""
    return max((i for i, (first, _) in enumerate(PARTS) if number >= first), default=0)


def index_table(headers: list[Header], link_dir: str = "notebooks", zh: bool = False) -> str:
    """The README's index: one markdown table per part (a short line when there are no notebooks)."""
    if not headers:
        return "_暂无笔记本。_" if zh else "_No notebooks yet._"

    def esc(text: str) -> str:
        return text.replace("|", r"\|")

    blocks = []
    for i, (_, heading) in enumerate(PARTS_ZH if zh else PARTS):
        part = [h for h in headers if part_of(h.number) == i]
        if not part:
            continue
        rows = [heading, "", HEAD_ZH if zh else HEAD_EN, "|---|---|---|---|"]
        for h in part:
            link = f"[{esc(h.title)}]({link_dir}/{h.filename})"
            rows.append(f"| {h.number} | {link} | {esc(h.learn)} | {esc(h.cpu_time)} |")
        blocks.append("\n".join(rows))
    return "\n\n".join(blocks)


def render_readme(readme: str, table: str) -> str:
    """``readme`` with the text between the index markers replaced by ``table``."""
    if readme.count(START) != 1 or readme.count(END) != 1 or readme.index(START) > readme.index(END):
        raise ValueError(f"README must contain {START} then {END}, once each")
    head, rest = readme.split(START)
    _, tail = rest.split(END)
    return f"{head}{START}\n{table}\n{END}{tail}"


def nav_line(headers: list[Header], i: int) -> str:
    """The navigation line for notebook ``headers[i]``: links to the previous and next notebooks."""
    parts = []
    if i > 0:
        p = headers[i - 1]
        parts.append(f"[← {p.number} · {p.title}]({p.filename})")
    if i + 1 < len(headers):
        n = headers[i + 1]
        parts.append(f"[Next: {n.number} · {n.title} →]({n.filename})")
    return " | ".join(parts)


def nav_lines_in(cell: dict) -> list[str]:
    """Lines of ``cell`` that link to a notebook (the navigation line, if present)."""
    return [ln.strip() for ln in source(cell).splitlines() if NAV_LINK_RE.search(ln)]


def with_nav(text: str, nav: str) -> str:
    """Markdown ``text`` with its notebook-link lines removed and ``nav`` appended as the last line."""
    kept = [ln for ln in text.splitlines() if not NAV_LINK_RE.search(ln)]
    body = "\n".join(kept).rstrip()
    return f"{body}\n\n{nav}" if nav else body


def write_atomic(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` whole or not at all (gpulab.atomic)."""
    if str(ROOT) not in sys.path:  # run as a script from a checkout
        sys.path.insert(0, str(ROOT))
    from gpulab.atomic import atomic_write

    atomic_write(path, lambda tmp: tmp.write_text(text, encoding="utf-8", newline=""))


def fix_nav(paths: list[Path], headers: list[Header]) -> list[str]:
    """Rewrite the navigation line of each notebook whose last cell is stale; returns the changed names."""
    import nbformat  # a test dependency; only needed when rewriting notebooks

    changed = []
    for i, path in enumerate(paths):
        nb = nbformat.read(str(path), as_version=4)
        last = nb.cells[-1] if nb.cells else None
        if last is None or last.cell_type != "markdown":
            raise ValueError(f"{path.name}: last cell must be markdown (summary + navigation line)")
        new = with_nav(last.source, nav_line(headers, i))
        if new != last.source:
            last.source = new
            text = nbformat.writes(nb)
            write_atomic(path, text if text.endswith("\n") else text + "\n")
            changed.append(path.name)
    return changed


def zh_readme(root: Path) -> tuple[Path, str, str] | None:
    """(README.zh-CN.md, its text, the text it should have), or None when there is no Chinese README."""
    path = root / "README.zh-CN.md"
    if not path.is_file():
        return None
    headers = [read_header(p, ZH) for p in notebook_paths(root / "notebooks" / "zh")]
    text = path.read_text(encoding="utf-8")
    return path, text, render_readme(text, index_table(headers, "notebooks/zh", zh=True))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if README.md is stale; write nothing")
    parser.add_argument("--nav", action="store_true", help="also rewrite each notebook's navigation line")
    parser.add_argument("--root", type=Path, default=ROOT, help="repository root (default: this checkout)")
    args = parser.parse_args(argv)
    readme_path, folder = args.root / "README.md", args.root / "notebooks"
    try:
        paths = notebook_paths(folder)
        headers = [read_header(p) for p in paths]
        readme = readme_path.read_text(encoding="utf-8")
        wanted = render_readme(readme, index_table(headers))
        zh = zh_readme(args.root)
    except (OSError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.check:
        if wanted != readme or (zh is not None and zh[1] != zh[2]):
            stale = "README.md" if wanted != readme else "README.zh-CN.md"
            print(f"{stale} notebook index is stale: run `python scripts/readme_index.py`", file=sys.stderr)
            return 1
        print(f"README.md index is up to date ({len(headers)} notebooks)")
        return 0
    if wanted != readme:
        write_atomic(readme_path, wanted)
        print(f"README.md index rewritten ({len(headers)} notebooks)")
    if zh is not None and zh[1] != zh[2]:
        write_atomic(zh[0], zh[2])
        print("README.zh-CN.md index rewritten")
    if args.nav:
        try:
            for name in fix_nav(paths, headers):
                print(f"{name}: navigation line rewritten")
        except ValueError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
