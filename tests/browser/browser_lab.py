"""Start and stop a private JupyterLab server for the browser tests.

The server runs from the interpreter running pytest (the project's .venv), on a free localhost port,
with a random token, in its own process group, with its own settings, workspaces and runtime folders,
so nothing from the user's JupyterLab setup (or a notebook saved by it) leaks in or out.
"""
from __future__ import annotations

import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

# User settings that keep the page quiet and complete: no news/update toasts (no network here),
# no autosave (nothing is ever written back), every cell attached to the DOM (no lazy windowing).
LAB_SETTINGS = {
    "@jupyterlab/apputils-extension/notification.jupyterlab-settings": {
        "fetchNews": "false",
        "checkForUpdates": False,
    },
    "@jupyterlab/docmanager-extension/plugin.jupyterlab-settings": {"autosave": False},
    "@jupyterlab/notebook-extension/tracker.jupyterlab-settings": {"windowingMode": "none"},
}


@dataclass
class LabServer:
    """A running JupyterLab: where it listens, its token, the folder it serves and its process."""

    port: int
    token: str
    root: Path
    process: subprocess.Popen
    log_path: Path
    marker: str

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def url(self, path: str) -> str:
        """Browser URL of `path` (e.g. '/lab/tree/x.ipynb'), carrying the token."""
        sep = "&" if "?" in path else "?"
        return f"{self.base_url}{path}{sep}token={self.token}"

    def api(self, method: str, path: str, timeout: float = 10.0) -> object:
        """Call the server's REST API; returns the decoded JSON (None for an empty reply)."""
        request = urllib.request.Request(
            self.base_url + path, method=method, headers={"Authorization": f"token {self.token}"}
        )
        with urllib.request.urlopen(request, timeout=timeout) as reply:
            body = reply.read()
        return json.loads(body) if body else None

    def shutdown_kernels(self) -> None:
        """Shut down every kernel this server started (one notebook's kernel must not slow the next)."""
        for kernel in self.api("GET", "/api/kernels") or []:
            try:
                self.api("DELETE", f"/api/kernels/{kernel['id']}", timeout=30)
            except urllib.error.HTTPError as exc:
                if exc.code != 404:  # already gone is fine
                    raise

    def log_tail(self, chars: int = 3000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return "(no log)"


def free_port() -> int:
    """A TCP port on localhost that nobody listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def write_settings(settings_dir: Path) -> None:
    """Write LAB_SETTINGS as JupyterLab user-settings files under `settings_dir`."""
    for relative, values in LAB_SETTINGS.items():
        path = settings_dir / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(values, indent=2))


def start_lab(root: Path, state_dir: Path, timeout: float = 90.0) -> LabServer:
    """Start JupyterLab serving `root`; return once GET /lab answers 200, or raise RuntimeError.

    `state_dir` receives the server's settings, workspaces, runtime files and log.
    """
    if timeout <= 0:
        raise ValueError(f"timeout must be > 0 seconds, got {timeout!r}")
    root, state_dir = Path(root), Path(state_dir)
    if not root.is_dir():
        raise ValueError(f"root {str(root)!r} is not a folder: expected the folder of notebooks to serve")
    write_settings(state_dir / "settings")
    port, token, marker = free_port(), secrets.token_hex(24), secrets.token_hex(8)
    env = dict(os.environ)
    env.pop("MPLBACKEND", None)  # Agg here would leak into kernels and remove every figure
    env.update(
        JUPYTERLAB_SETTINGS_DIR=str(state_dir / "settings"),
        JUPYTERLAB_WORKSPACES_DIR=str(state_dir / "workspaces"),
        JUPYTER_RUNTIME_DIR=str(state_dir / "runtime"),
        JUPYTER_CONFIG_DIR=str(state_dir / "config"),
        GPULAB_BROWSER_TEST=marker,  # inherited by kernels: lets stop_lab find stragglers
    )
    command = [
        sys.executable, "-m", "jupyterlab",
        "--no-browser",
        "--ServerApp.ip=127.0.0.1",
        f"--ServerApp.port={port}",
        "--ServerApp.port_retries=0",
        f"--IdentityProvider.token={token}",
        f"--ServerApp.root_dir={root}",
        "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
    ]
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        command.append("--allow-root")  # containers and CI often run as root
    log_path = state_dir / "jupyterlab.log"
    with open(log_path, "wb") as log:
        process = subprocess.Popen(
            command, cwd=root, env=env, stdin=subprocess.DEVNULL, stdout=log,
            stderr=subprocess.STDOUT, start_new_session=True,
        )
    server = LabServer(port, token, root, process, log_path, marker)
    try:
        _wait_until_up(server, timeout)
    except BaseException:
        stop_lab(server)
        raise
    return server


def _wait_until_up(server: LabServer, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while True:
        if server.process.poll() is not None:
            raise RuntimeError(
                f"JupyterLab exited with code {server.process.returncode} before answering:\n"
                + server.log_tail()
            )
        try:
            with urllib.request.urlopen(server.url("/lab"), timeout=5) as reply:
                if reply.status == 200:
                    server.api("GET", "/api/kernelspecs", timeout=30)  # warm: the first page needs it
                    return
        except (urllib.error.URLError, OSError):
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"JupyterLab did not answer /lab within {timeout:.0f} s:\n" + server.log_tail())
        time.sleep(0.3)


def stop_lab(server: LabServer, timeout: float = 20.0) -> None:
    """Stop the server's process group (TERM, then KILL) and any kernel it left behind."""
    try:
        if server.process.poll() is None:
            try:
                server.shutdown_kernels()
            except Exception:  # the server may be wedged; the signals below still apply
                pass
        _signal_group(server.process.pid, signal.SIGTERM)
        try:
            server.process.wait(timeout)
        except subprocess.TimeoutExpired:
            _signal_group(server.process.pid, signal.SIGKILL)
            server.process.wait(10)
    finally:
        for pid in _pids_with_marker(server.marker):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        pass


def _pids_with_marker(marker: str) -> list[int]:
    """Processes (kernels run in their own sessions) whose environment carries this server's marker."""
    proc = Path("/proc")
    if not proc.is_dir():
        return []
    needle = f"GPULAB_BROWSER_TEST={marker}".encode()
    found = []
    for entry in proc.iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if needle in (entry / "environ").read_bytes().split(b"\0"):
                found.append(int(entry.name))
        except OSError:
            continue
    return found
