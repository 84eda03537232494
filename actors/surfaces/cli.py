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
operations of the session (``serve``, ``demo``, ``top``, ``notifications``, ``tools``,
``tool``, ``mcp``, ``watchdog``) are written by hand. An operation's arguments are checked against
its Args Struct (types and bounds) before anything is sent: a value JSON cannot carry
faithfully (NaN, an infinity) is refused, never sent as ``null``. Answers that are paged
(``status``, ``read``) are fetched page by page until complete.

This module is the entry point (``shepherd = actors.surfaces.cli:main``, ``python -m
actors.surfaces.cli``) and runs the operations; the parser is
:mod:`actors.surfaces.cli_parser`, the other commands are :mod:`actors.surfaces.cli_commands`
(``mcp`` and ``watchdog`` their own modules), and what is printed where, with which exit
status, is :mod:`actors.surfaces.cli_output`.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from actors.surfaces.cli_commands import (
    absolute,
    check_interval,
    run_demo,
    run_notifications,
    run_serve,
    run_tool,
    run_tools,
    run_top,
)
from actors.surfaces.cli_output import emit, fail, say, session_of
from actors.surfaces.cli_parser import build_parser, wants_json
from protocol import ops
from protocol.errors import InvalidArgument, ShepherdError
from protocol.ops import WAIT_TIMED_OUT

__all__ = ["WAIT_TIMED_OUT", "main"]

#: pages one paged command fetches at most (a session cannot outgrow it: 1000 agents per page
#: is far more than a frame holds, and read lines are bounded by the agent's buffer)
MAX_PAGES = 10_000
#: how long the CLI waits for an answer; an operation that blocks (``wait``) waits for its
#: ``timeout_s`` and this much more, or, without one, a year
ANSWER_TIMEOUT_S = 30.0
BLOCKING_TIMEOUT_S = 365 * 86_400.0


def _fetch(client: Any, op: ops.Op[Any], call_args: dict[str, Any], timeout: float) -> Any:
    """The answer; a paged one (``status``, ``read``) page by page, joined."""
    pages = [client.call(op.name, call_args, timeout=timeout)]
    if op.pager is None:
        return pages[0]
    while len(pages) < MAX_PAGES and (more := op.pager.following(call_args, pages)) is not None:
        pages.append(client.call(op.name, more, timeout=timeout))
    return op.pager.joined(call_args, pages)


def main(argv: list[str] | None = None) -> int:
    try:
        args = build_parser(argv).parse_args(argv)
    except InvalidArgument as exc:  # a usage error: reported like any other error
        return fail(argparse.Namespace(json=wants_json(argv)), exc.code, exc.message)
    try:
        if args.command == "serve":
            return run_serve(args)
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
        from actors.surfaces.client import Client

        op = ops.parent_op(args.command.replace("-", "_"))
        call_args = op.given(vars(args), absolute)
        timeout = ANSWER_TIMEOUT_S
        if op.blocks:
            limit = call_args.get("timeout_s")
            timeout = BLOCKING_TIMEOUT_S if limit is None else limit + ANSWER_TIMEOUT_S
        data = _fetch(Client(session_of(args)), op, call_args, timeout)
        emit(args, data, op.view(data))
        return op.exit_status(data) if op.exit_status is not None else 0
    except ShepherdError as exc:
        return fail(args, exc.code, exc.message)
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
