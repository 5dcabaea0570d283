"""`gpulab preflight [--json [FILE]] [--timeout S]`: will the course run on this machine? Exit 0 only if so.

`gpulab preflight --summary FILES...` sums up a room: the learners' `--json` reports, who is ready, and each
problem with its fix and who has it.
"""

from __future__ import annotations

import argparse
import json
import sys

from gpulab.atomic import write_json
from gpulab.argtypes import positive_float
from gpulab.course.environment import MIN_FREE_GIB, run_checks
from gpulab.course.environment_report import format_check, passed, report, room, summary


def add_parser(subparsers) -> argparse.ArgumentParser:
    """Register `preflight`."""
    parser = subparsers.add_parser(
        "preflight", help="check before class that the course will run on this machine",
        description="Check Python, the packages, free disk, the torch build, a 2-rank gloo rendezvous on "
                    "127.0.0.1 and a notebook kernel. Each line says OK, NOTE or PROBLEM (with its fix); "
                    "the exit status is 0 only when there is no PROBLEM. With --summary, read learners' "
                    "JSON reports instead and print the room.")
    parser.add_argument("--json", nargs="?", const="-", metavar="FILE",
                        help="the report as JSON: on stdout, or written to FILE (the text report still prints)")
    parser.add_argument("--timeout", type=positive_float, default=60.0,
                        help="seconds allowed for the rendezvous and for the kernel, each (default 60)")
    parser.add_argument("--min-free-gib", type=positive_float, default=MIN_FREE_GIB,
                        help=f"free disk space needed, in GiB (default {MIN_FREE_GIB:g})")
    parser.add_argument("--summary", nargs="+", metavar="FILE",
                        help="sum up these --json reports (e.g. reports/*.json) instead of checking this machine; "
                             "exit 0 only when every file is readable and ready")
    parser.set_defaults(func=run)
    return parser


def run_summary(paths: list[str]) -> int:
    """Print the room; one error line per unreadable file on stderr. 0 if all are readable and ready, else 1."""
    text, errors, all_ready = room(paths)
    print(text)
    for line in errors:
        print(line, file=sys.stderr)
    return 0 if all_ready and not errors else 1


def run(args: argparse.Namespace) -> int:
    """Run the checks, printing each line as it is done (unless JSON goes to stdout); 0 if ready, 1 if not."""
    if args.summary:
        if args.json:
            print("error: --summary reads reports; it cannot be combined with --json", file=sys.stderr)
            return 2
        return run_summary(args.summary)
    to_stdout = args.json == "-"
    if not to_stdout:
        print("gpulab preflight: will the course run on this machine?", flush=True)
    checks = []
    for check in run_checks(args.timeout, args.min_free_gib):
        checks.append(check)
        if not to_stdout:
            print(format_check(check), flush=True)
    if to_stdout:
        print(json.dumps(report(checks), indent=2))
    else:
        print(summary(checks))
        if args.json:
            write_json(args.json, report(checks))
            print(f"report written to {args.json}")
    return 0 if passed(checks) else 1
