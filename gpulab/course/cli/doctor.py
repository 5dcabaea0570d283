"""`gpulab doctor [--json]`: report Python, torch build, devices, distributed backends and nvidia-smi."""

from __future__ import annotations

import argparse
import json

from gpulab.course.environment import format_report, report


def add_parser(subparsers) -> argparse.ArgumentParser:
    """Register `doctor`."""
    parser = subparsers.add_parser("doctor", help="what this machine has for deep learning",
                                   description="Report Python, torch build, devices, distributed backends, nvidia-smi.")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.set_defaults(func=run)
    return parser


def run(args: argparse.Namespace) -> int:
    """Print the report; exit status 0."""
    data = report()
    print(json.dumps(data, indent=2) if args.json else format_report(data))
    return 0
