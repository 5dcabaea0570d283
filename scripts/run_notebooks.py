"""Execute notebooks top to bottom with nbclient, saving each executed copy and its run time.

    python scripts/run_notebooks.py OUTDIR NOTEBOOK... [--jobs N] [--timeout S] [--cell-timeout S]

For each notebook: OUTDIR/NAME.ipynb (the executed copy, also when a cell failed) and one entry in
OUTDIR/times.json (``{"notebook", "status", "seconds", "error"}``). Cells tagged ``skip-execution``
are skipped and ``raises-exception`` cells may raise (nbclient's rules). Notebooks run in their own
folder, each in its own process, ``--jobs`` at a time. Needs nbclient, nbformat and ipykernel; no
Jupyter server, no nbval. Exit status 1 if any notebook failed.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from gpulab.argtypes import positive_int  # noqa: E402
from gpulab.atomic import atomic_write, write_json  # noqa: E402


def execute_one(notebook: Path, outdir: Path, cell_timeout: int) -> int:
    """Run one notebook in this process; write its executed copy; 0 if every cell behaved."""
    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError

    nb = nbformat.read(notebook, as_version=4)
    client = NotebookClient(nb, timeout=cell_timeout, kernel_name="python3",
                            resources={"metadata": {"path": str(notebook.parent)}})
    status = 0
    try:
        client.execute()
    except CellExecutionError as exc:
        print(str(exc).strip().splitlines()[-1] if str(exc).strip() else "a cell failed", file=sys.stderr)
        status = 1
    finally:
        atomic_write(outdir / notebook.name, lambda tmp: nbformat.write(nb, tmp))
    return status


def run_child(notebook: Path, outdir: Path, timeout: int, cell_timeout: int) -> dict:
    """Run :func:`execute_one` in a fresh process with a wall-clock limit; the entry for times.json."""
    start = time.monotonic()
    cmd = [sys.executable, __file__, "--one", str(outdir), str(notebook), "--cell-timeout", str(cell_timeout)]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
        status = "pass" if done.returncode == 0 else "fail"
        last = (re.sub(r"\x1b\[[0-9;]*m", "", done.stderr).strip().splitlines() or ["?"])[-1]  # no colour codes
        error = "" if done.returncode == 0 else last[:300]
    except subprocess.TimeoutExpired:
        status, error = "fail", f"timed out after {timeout} s"
    entry = {"notebook": notebook.name, "status": status, "seconds": round(time.monotonic() - start, 1),
             "error": error}
    print(f"{status.upper():<5} {notebook.name} ({entry['seconds']:.0f} s){': ' + error if error else ''}", flush=True)
    return entry


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("outdir", type=Path)
    parser.add_argument("notebooks", nargs="+", type=Path)
    parser.add_argument("--jobs", type=positive_int, default=1)
    parser.add_argument("--timeout", type=positive_int, default=300, help="seconds per notebook")
    parser.add_argument("--cell-timeout", type=positive_int, default=240)
    parser.add_argument("--one", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    missing = [str(p) for p in args.notebooks if not p.is_file()]
    if missing:
        parser.error(f"no such notebook: {', '.join(missing)}")
    args.outdir.mkdir(parents=True, exist_ok=True)
    if args.one:
        return execute_one(args.notebooks[0].resolve(), args.outdir, args.cell_timeout)
    os.environ.pop("MPLBACKEND", None)  # it would remove the figures from the executed copies
    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        entries = list(pool.map(lambda nb: run_child(nb.resolve(), args.outdir, args.timeout, args.cell_timeout),
                                args.notebooks))
    write_json(args.outdir / "times.json", entries)
    return 0 if all(e["status"] == "pass" for e in entries) else 1


if __name__ == "__main__":
    sys.exit(main())
