"""gpulab.atomic: a file is replaced whole or not at all, keeps its mode, and no temporary file lingers."""
from __future__ import annotations

import os
import stat
import sys

import pytest

from gpulab.atomic import atomic_write, write_json


def _mode(path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_writes_and_leaves_no_temporary_file(tmp_path):
    path = write_json(tmp_path / "sub" / "a.json", {"x": 1})
    assert path.read_text(encoding="utf-8") == '{\n  "x": 1\n}\n'
    assert sorted(p.name for p in path.parent.iterdir()) == ["a.json"]


def test_a_failed_write_keeps_the_old_file(tmp_path):
    path = tmp_path / "a.txt"
    path.write_text("old", encoding="utf-8")

    def half(tmp):
        tmp.write_text("half", encoding="utf-8")
        raise RuntimeError("stopped")

    with pytest.raises(RuntimeError, match="stopped"):
        atomic_write(path, half)
    assert path.read_text(encoding="utf-8") == "old" and [p.name for p in tmp_path.iterdir()] == ["a.txt"]


@pytest.mark.skipif(sys.platform == "win32", reason="Windows has no Unix file modes")
def test_keeps_the_mode_of_the_file_it_replaces_and_a_new_file_gets_the_usual_one(tmp_path):
    old = tmp_path / "old.md"
    old.write_text("x", encoding="utf-8")
    os.chmod(old, 0o640)
    atomic_write(old, lambda tmp: tmp.write_text("y", encoding="utf-8"))
    assert _mode(old) == 0o640
    umask = os.umask(0o022)
    try:
        new = atomic_write(tmp_path / "new.md", lambda tmp: tmp.write_text("z", encoding="utf-8"))
    finally:
        os.umask(umask)
    assert _mode(new) == 0o644  # not mkstemp's private 0600


def test_a_folder_is_refused_with_its_name(tmp_path):
    with pytest.raises(ValueError, match=f"{tmp_path.name} is a directory"):
        atomic_write(tmp_path, lambda tmp: None)
