"""What torchrun needs on each OS to rendezvous, decided in one pure function (launcher and doctor use it).

What torch 2.13's ``torch/distributed/run.py`` does on one machine: ``--standalone`` hosts the
rendezvous store at ``localhost:0``; the ranks then meet at ``MASTER_ADDR``, which rank 0's node
fills with ``--local-addr`` or else ``socket.getfqdn()``, a name that macOS often cannot resolve back
(and ``--master-addr`` is ignored by this rendezvous). So a single-machine launch adds
``--local-addr 127.0.0.1``. gloo picks the network interface for its own connections by resolving
the hostname unless ``GLOO_SOCKET_IFNAME`` names one: the loopback interface is ``lo`` on Linux and
``lo0`` on macOS. torch's Windows builds have no libuv, which TCPStore asks for by default:
``USE_LIBUV=0`` (pytorch#139990). Settings already in the environment are never overridden.
"""

from __future__ import annotations

import ipaddress
import socket
import sys
from dataclasses import dataclass, field

LOOPBACK = "127.0.0.1"
LOOPBACK_INTERFACE = {"linux": "lo", "darwin": "lo0"}


@dataclass(frozen=True)
class RendezvousPlan:
    """torchrun flags and environment for one platform, each with the reason it is there."""

    platform: str
    single_machine: bool
    flags: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    reasons: dict[str, str] = field(default_factory=dict)  # flag or variable -> why

    def to_dict(self) -> dict:
        """A JSON-friendly dict."""
        return {"platform": self.platform, "single_machine": self.single_machine, "flags": list(self.flags),
                "env": dict(self.env), "reasons": dict(self.reasons)}


def platform_family(platform: str) -> str:
    """``sys.platform`` reduced to ``linux``, ``darwin``, ``win32`` or ``other``."""
    if not isinstance(platform, str) or not platform:
        raise ValueError(f"platform={platform!r} must be a sys.platform string such as linux, darwin or win32")
    if platform.startswith("linux"):
        return "linux"
    if platform in ("darwin", "win32"):
        return platform
    return "other"


def rendezvous_plan(platform: str, single_machine: bool = True) -> RendezvousPlan:
    """What a torchrun launch on ``platform`` (a ``sys.platform`` value) should add, and why."""
    family = platform_family(platform)
    flags: list[str] = []
    env: dict[str, str] = {}
    reasons: dict[str, str] = {}
    if single_machine:
        flags += ["--local-addr", LOOPBACK]
        reasons["--local-addr"] = (f"the ranks meet at {LOOPBACK}, not at this machine's network name, "
                                   "which macOS often cannot resolve")
        if family in LOOPBACK_INTERFACE:
            env["GLOO_SOCKET_IFNAME"] = LOOPBACK_INTERFACE[family]
            reasons["GLOO_SOCKET_IFNAME"] = ("gloo connects the ranks over the loopback interface, not the "
                                             "address the hostname resolves to (missing or changing with the network)")
    if family == "win32":
        env["USE_LIBUV"] = "0"
        reasons["USE_LIBUV"] = ("torch's Windows builds have no libuv, which TCPStore asks for by default "
                                "(pytorch#139990)")
    return RendezvousPlan(platform, single_machine, flags, env, reasons)


def current_plan(single_machine: bool = True) -> RendezvousPlan:
    """``rendezvous_plan`` for this machine."""
    return rendezvous_plan(sys.platform, single_machine)


def is_loopback(host: str | None) -> bool:
    """True for ``localhost`` and loopback IP addresses (127.x.x.x, ::1)."""
    if host is None:
        return False
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def port_free(port: int, host: str = LOOPBACK) -> bool:
    """True if a server could listen on ``host:port`` now (as torch's TCPStore would: address reuse on POSIX)."""
    if not isinstance(port, int) or isinstance(port, bool) or not 1 <= port <= 65535:
        raise ValueError(f"port={port!r} must be an integer in 1..65535")
    with socket.socket() as s:
        if sys.platform != "win32":  # on Windows SO_REUSEADDR would let two servers share a port
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def free_port(host: str = LOOPBACK) -> int:
    """A TCP port that was free a moment ago (for a rendezvous between two launches)."""
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]
