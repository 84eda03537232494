"""The command line of the operation table's entries: one ``argparse`` sub-command per entry
(its arguments, help, ``--json`` and ``--session``), shared by the ``shepherd`` parser
(:mod:`actors.surfaces.cli_parser`) and the ``shepherd watchdog`` group
(:mod:`actors.surfaces.watchdog_cli`)."""

from __future__ import annotations

import argparse
from typing import Any

from protocol import ops

__all__ = ["add_common", "add_operation"]


def add_common(p: argparse.ArgumentParser) -> None:
    """What every command that talks to a session takes."""
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--session", metavar="DIR", help="the session directory")


def add_operation(sub: Any, op: ops.Op[Any]) -> None:
    """The command of one entry of the operation table (the last word of a sub-command's, under
    its group's ``sub``): its arguments, help and ``--json``/``--session``; the parsed
    namespace names the entry (``operation``)."""
    extra = {"description": op.description} if op.description else {}
    p = sub.add_parser(op.command.split()[-1], help=op.help, **extra)
    for name, spec in op.arguments():
        p.add_argument(name, **spec)
    p.set_defaults(operation=op.name)
    add_common(p)
