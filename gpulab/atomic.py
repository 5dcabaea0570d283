"""Write files atomically: to a temporary file beside the target, then rename.

A reader never sees a half-written file: it sees the old one or the new one.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any, Callable


def atomic_write(path: str | Path, write: Callable[[Path], None]) -> Path:
    """Call ``write(tmp_path)`` then rename ``tmp_path`` to ``path``; the temporary file never lingers."""
    path = Path(path)
    if path.exists() and path.is_dir():
        raise ValueError(f"{path} is a directory: give a file name")
    path.parent.mkdir(parents=True, exist_ok=True)
    mode = path.stat().st_mode & 0o777 if path.exists() else _default_mode()
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        write(Path(tmp))
        os.chmod(tmp, mode)  # mkstemp makes the file private (0600); keep the old file's mode, or the usual one
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def _default_mode() -> int:
    """The mode ``open()`` would give a new file: 0666 less the process's umask."""
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


def write_json(path: str | Path, obj: Any) -> Path:
    """Write ``obj`` as indented JSON, atomically."""
    text = json.dumps(obj, indent=2, sort_keys=False) + "\n"
    return atomic_write(path, lambda tmp: tmp.write_text(text, encoding="utf-8"))


def torch_save(path: str | Path, obj: Any) -> Path:
    """``torch.save(obj)`` to ``path``, atomically."""
    import torch

    return atomic_write(path, lambda tmp: torch.save(obj, tmp))
