"""The ``shepherd`` command line: the parent's operations from any shell.

Every command takes ``--json`` (one JSON object on stdout) and ``--session DIR`` (else
``$SHEPHERD_SESSION``, else the one live session of this user: several live ones are refused
with their list, see :func:`actors.surfaces.client.find_session`). Errors exit with status 2 and,
with ``--json``, print ``{"error": {"code", "message"}}`` — usage errors included. ``wait`` exits
:data:`WAIT_TIMED_OUT` (124, as ``timeout(1)`` does) when its timeout passed with ids still
pending.

A session found without ``--session`` or ``$SHEPHERD_SESSION`` is named on stderr, with and
without ``--json``: stdout keeps exactly the documented JSON object (a field added to every
answer would change the shape every ``--json`` consumer parses), and a person still sees which
session answered.

The session's operations (``spawn``, ``delegate``, ``message`` ...) are generated from the
operation table (:mod:`protocol.ops`): each one's positional arguments, options, help, the
flags-to-arguments mapping, its paging and its human view; only the commands that are not
operations of the session (``serve``, ``node``, ``demo``, ``top``, ``notifications``, ``tools``,
``tool``, ``mcp``, ``a2a``, ``web``, ``watchdog``) are written by hand. An operation's arguments are
checked against its Args Struct (types and bounds) before anything is sent: a value JSON cannot
carry faithfully (NaN, an infinity) is refused, never sent as ``null``. Answers that are paged
(``status``, ``read``) are fetched page by page until complete.

This module is the entry point (``shepherd = actors.surfaces.cli:main``, ``python -m
actors.surfaces.cli``) and runs the operations; the parser is
:mod:`actors.surfaces.cli_parser`, the other commands are :mod:`actors.surfaces.cli_commands`
(``mcp``, ``a2a`` and ``watchdog`` their own modules), and what is printed where, with which exit
status, is :mod:`actors.surfaces.cli_output`.
"""

from __future__ import annotations

import argparse
import sys

from actors.surfaces.cli_commands import (
    check_interval,
    run_demo,
    run_node,
    run_notifications,
    run_serve,
    run_tool,
    run_tools,
    run_top,
)
from actors.surfaces.cli_ops import Caller, absolute, run_operation
from actors.surfaces.cli_output import fail, say, session_of
from actors.surfaces.cli_parser import build_parser, wants_json
from protocol.core.errors import InvalidArgument, ShepherdError
from protocol.ops import WAIT_TIMED_OUT

__all__ = ["WAIT_TIMED_OUT", "main"]


def _client_caller(args: argparse.Namespace) -> Caller:
    from actors.surfaces.client import Client

    client = Client(session_of(args))
    return lambda name, call_args, timeout: client.call(name, call_args, timeout=timeout)


def main(argv: list[str] | None = None) -> int:
    try:
        args = build_parser(argv).parse_args(argv)
    except InvalidArgument as exc:  # a usage error: reported like any other error
        return fail(argparse.Namespace(json=wants_json(argv)), exc.code, exc.message)
    try:
        if args.command == "serve":
            return run_serve(args)
        if args.command == "node":
            return run_node(args)
        if args.command == "demo":
            return run_demo(args)
        if args.command == "notifications":
            return run_notifications(args)
        if args.command == "top":
            check_interval(args.interval)
            return run_top(args)
        if args.command == "watchdog":
            from actors.surfaces.watchdog_cli import client_call, run_watchdog

            return run_watchdog(args, client_call(args.session, announce=say))
        if args.command == "tools":
            return run_tools(args)
        if args.command == "tool":
            return run_tool(args)
        if args.command == "mcp":
            from actors.surfaces.mcp_server import serve_stdio

            return serve_stdio(args.session, args.client)
        if args.command == "a2a":
            try:
                from actors.surfaces.a2a_server import serve as serve_a2a
            except ImportError as exc:
                raise InvalidArgument(
                    f"a2a needs the a2a extra ({exc.name} is missing): pip install 'shepherd[a2a]'"
                ) from None
            return serve_a2a(
                args.session, args.listen, allow_remote=args.allow_remote, json_out=args.json
            )
        if args.command == "web":
            from actors.surfaces.web import serve as serve_web

            return serve_web(
                args.session, args.listen, allow_remote=args.allow_remote, json_out=args.json
            )
        return run_operation(args, lambda: _client_caller(args), absolute)
    except ShepherdError as exc:
        return fail(args, exc.code, exc.message)
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
