"""``shepherd watchdog ...``: the watchdog's command line, its session routing, and the loop demo.

Commands (each takes ``--json`` and ``--session DIR`` like every other ``shepherd`` command)::

    shepherd watchdog status              enabled / paused, alert mode, alerts sent, targets
    shepherd watchdog config              every setting in effect, every rule's threshold
    shepherd watchdog set KEY VALUE...    change one setting for this session only
                                          (a rule's threshold: ``set monologue.threshold 5``)
    shepherd watchdog pause | resume      suppress / restore alerts (detection keeps running)
    shepherd watchdog inspect AGENT       an agent's event window and the detector's verdict
    shepherd watchdog replay FILE         run the detector over a JSON-lines transcript

``replay`` runs locally, without a session: a verdict after each event, then the final
verdict (with ``--json`` one JSON object per line, the last one ``{"final": true, ...}``). It
starts from the default settings, or with ``--session`` from that live session's settings;
``--set KEY=VALUE`` overrides fields (``--set monologue.threshold=5`` as well). Errors exit
with status 2 and, with ``--json``, print ``{"error": {"code", "message"}}`` on stdout.

The other commands are the watchdog's entries of the operation table
(:mod:`protocol.ops.watchdog`): their sub-commands, arguments, help, checks and views (what a
command prints without ``--json``) are generated from it. They run in the session:
:func:`run_watchdog` takes a ``call(op, args)`` function with the watchdog actor's operation
names (:func:`client_call` for the CLI; ``lambda op, a: session.watchdog(op, **a)`` in process).
:func:`actors.session.watchdog.session_call` is the session side, for ``Supervisor.call``.
``shepherd demo --loop`` is :mod:`actors.surfaces.loop_demo`.

``python -m actors.surfaces.watchdog_cli replay FILE ...`` (or any other watchdog command) runs this
module directly.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TextIO

import msgspec

from actors.surfaces.cli_table import add_operation
from protocol import ops
from protocol import watchdog as wd
from protocol.calls.watchdog import WatchdogArgs, watchdog_call
from protocol.calls.watchdog_views import replay_table
from protocol.core.errors import InvalidArgument, ShepherdError
from protocol.ops import watchdog as wops
from protocol.watchdog.replay import replay

__all__ = [
    "Call",
    "add_watchdog_parser",
    "client_call",
    "main",
    "parse_set_options",
    "run_watchdog",
]

#: ``call(op, args)``: run one watchdog operation in a session and return its JSON-able result
Call = Callable[[str, dict[str, Any]], Any]


# ----------------------------------------------------------------------------- parser


def add_watchdog_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add ``watchdog`` and its subcommands to the ``shepherd`` parser's subparsers: one per
    entry of the operation table with a command (:mod:`protocol.ops.watchdog`), and
    ``replay``."""
    word, help_text, description = wops.GROUP
    parser: argparse.ArgumentParser = subparsers.add_parser(
        word, help=help_text, description=description
    )
    sub = parser.add_subparsers(dest="watchdog_command", required=True, metavar="COMMAND")
    for op in wops.WATCHDOG:
        if op.help:  # else a tool only
            add_operation(sub, op)
    p = sub.add_parser(
        "replay",
        help="run the detector over a JSON-lines transcript (no session needed)",
        description=(
            "One event per line: {kind: tool_call|tool_result|error|message|user_input|"
            "rescue|condensation|output, tool, command?, args?, output?, text?, exit_code?, "
            "is_error?, source?: user|agent|watchdog, ts?}. Prints the verdict after each "
            "event, then the final verdict. FILE '-' reads standard input."
        ),
    )
    p.add_argument("file", metavar="FILE")
    p.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help=(
            "override a watchdog setting (repeatable), e.g. --set repeat_threshold=5 or "
            "--set monologue.threshold=4"
        ),
    )
    p.add_argument("--json", action="store_true", help="print JSON (one object a line)")
    p.add_argument(
        "--session",
        metavar="DIR",
        help="start from this live session's watchdog settings (default: the built-in defaults)",
    )
    return parser


# ----------------------------------------------------------------------------- output


def _emit(out: TextIO, as_json: bool, data: Any, human: str) -> None:
    out.write((msgspec.json.encode(data).decode() if as_json else human) + "\n")
    out.flush()


def _fail(args: argparse.Namespace, exc: ShepherdError, out: TextIO, err: TextIO) -> int:
    if getattr(args, "json", False):
        out.write(msgspec.json.encode({"error": exc.info()}).decode() + "\n")
        out.flush()
    else:
        err.write(f"shepherd: {exc.code}: {exc.message}\n")
        err.flush()
    return 2


# ----------------------------------------------------------------------------- replay


def parse_set_options(
    pairs: Sequence[str], base: wd.WatchdogConfig | None = None
) -> wd.WatchdogConfig:
    """Apply ``KEY=VALUE`` overrides (``watchdog.KEY`` accepted) onto ``base``; a bad pair
    raises :class:`~protocol.core.errors.InvalidArgument` naming it."""
    config = base if base is not None else wd.WatchdogConfig()
    for pair in pairs:
        key, eq, text = pair.partition("=")
        key = key.strip().removeprefix("watchdog.")
        if not eq or not key:
            raise InvalidArgument(f"--set expects KEY=VALUE, got {pair!r}")
        config = wd.set_config_value(config, key, text)
    return config


def _read_transcript(path: str) -> list[bytes]:
    try:
        data = sys.stdin.buffer.read() if path == "-" else Path(path).read_bytes()
    except OSError as exc:
        raise InvalidArgument(f"cannot read {path}: {exc.strerror or exc}") from None
    return data.splitlines()


def _replay(args: argparse.Namespace, call: Call | None, out: TextIO) -> int:
    base: wd.WatchdogConfig | None = None
    if args.session and call is not None:
        try:
            base = msgspec.convert(call("config", {}), wd.WatchdogConfig)
        except msgspec.ValidationError as exc:
            raise InvalidArgument(f"the session's watchdog settings are unusable: {exc}") from None
    config = parse_set_options(args.overrides, base)
    lines = _read_transcript(args.file)
    results = replay(lines, config)
    if args.json:
        for r in results:
            out.write(msgspec.json.encode(r).decode() + "\n")
        out.flush()
    else:
        _emit(out, False, None, replay_table(lines, results))
    return 0


# ----------------------------------------------------------------------------- commands


def run_watchdog(
    args: argparse.Namespace,
    call: Call | None,
    *,
    out: TextIO | None = None,
    err: TextIO | None = None,
) -> int:
    """Run one parsed ``shepherd watchdog ...`` command; 0 on success, 2 on an error."""
    out = out or sys.stdout
    err = err or sys.stderr
    command = args.watchdog_command
    try:
        if command == "replay":
            return _replay(args, call, out)
        if call is None:
            raise InvalidArgument(f"watchdog {command} needs a session")
        op = ops.parent_op(args.operation)
        call_args = op.given(vars(args), lambda path: path)
        checked = op.build(call_args)
        assert isinstance(checked, WatchdogArgs)
        data = call(*watchdog_call(checked))
        _emit(out, args.json, data, op.render(data, call_args))
        return 0
    except ShepherdError as exc:
        return _fail(args, exc, out, err)


def client_call(session: str | None, announce: Callable[[str], None] | None = None) -> Call:
    """The CLI's ``call``: op ``watchdog`` to the session found from ``--session`` (lazily;
    ``announce`` is told which session when it was not named)."""

    found: list[Any] = []  # the session, found once (and announced once)

    def call(op: str, args: dict[str, Any]) -> Any:
        from actors.surfaces.client import Client, find_session

        if not found:
            found.append(find_session(session, announce=announce))
        return Client(found[0]).call("watchdog", {"op": op, "args": args})

    return call


# ----------------------------------------------------------------------------- module entry


def main(argv: list[str] | None = None) -> int:
    """``python -m actors.surfaces.watchdog_cli COMMAND ...``: the ``shepherd watchdog``
    commands."""
    parser = argparse.ArgumentParser(prog="shepherd")
    add_watchdog_parser(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["watchdog", *(sys.argv[1:] if argv is None else argv)])
    call = client_call(args.session) if args.session or args.watchdog_command != "replay" else None
    return run_watchdog(args, call)


if __name__ == "__main__":
    sys.exit(main())
