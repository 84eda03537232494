"""A session operation on the command line, from its parsed arguments to its exit status: the
part that ``shepherd`` in a shell (:mod:`actors.surfaces.cli`, through the mailbox) and a
supervisor running a forwarded call (:mod:`actors.surfaces.forwarded`, directly) share."""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from actors.runtime.command_wire import ANSWER_TIMEOUT_S, WAIT_MARGIN_S
from actors.surfaces.cli_output import emit
from protocol import ops

__all__ = [
    "ANSWER_TIMEOUT_S",
    "BLOCKING_TIMEOUT_S",
    "MAX_PAGES",
    "Caller",
    "absolute",
    "answer_timeout",
    "run_operation",
]


def absolute(path: str | None, base: str | None = None, home: str | None = None) -> str | None:
    """A path argument made absolute against the caller's directory (the session runs
    elsewhere): ``base`` (default this process's), ``~`` against ``home`` (default ``$HOME``)."""
    if not path:
        return None
    if home is not None and (path == "~" or path.startswith("~/")):
        given = Path(home + path[1:])
    else:
        given = Path(path).expanduser()
    return str(given if given.is_absolute() else Path(base or os.getcwd()) / given)


#: pages one paged command fetches at most (a session cannot outgrow it: 1000 agents per page
#: is far more than a frame holds, and read lines are bounded by the agent's buffer)
MAX_PAGES = 10_000
#: how long the CLI waits for an answer (the same over the command socket); an operation that
#: blocks (``wait``) waits for its ``timeout_s`` and WAIT_MARGIN_S more, or, without one, a year
BLOCKING_TIMEOUT_S = 365 * 86_400.0


def answer_timeout(op: ops.Op[Any], call_args: dict[str, Any]) -> float:
    """How long a client waits for the answer to ``op`` (the command line and MCP alike):
    ANSWER_TIMEOUT_S, or for an operation that blocks (``wait``) its ``timeout_s`` and
    WAIT_MARGIN_S (a year without one); past it the call is ``session_unavailable``."""
    if not op.blocks:
        return ANSWER_TIMEOUT_S
    limit = call_args.get("timeout_s")
    return BLOCKING_TIMEOUT_S if limit is None else float(limit) + WAIT_MARGIN_S


#: runs one call of the session: (operation, arguments, timeout) -> its answer's data
Caller = Callable[[str, dict[str, Any], float], Any]


def _fetch(call: Caller, op: ops.Op[Any], call_args: dict[str, Any], timeout: float) -> Any:
    """The answer; a paged one (``status``, ``read``) page by page, joined."""
    pages = [call(op.name, call_args, timeout)]
    if op.pager is None:
        return pages[0]
    while len(pages) < MAX_PAGES and (more := op.pager.following(call_args, pages)) is not None:
        pages.append(call(op.name, more, timeout))
    return op.pager.joined(call_args, pages)


def run_operation(
    args: argparse.Namespace,
    caller: Callable[[], Caller],
    resolve: Callable[[str], str | None],
) -> int:
    """A session operation as parsed: its arguments checked (paths made absolute by
    ``resolve``) before ``caller()`` finds the session, then called, printed, its exit status.
    The command line calls through a :class:`~actors.surfaces.client.Client`, the supervisor
    runs forwarded calls itself (:mod:`actors.surfaces.forwarded`)."""
    op = ops.parent_op(args.operation)
    call_args = op.given(vars(args), resolve)
    data = _fetch(caller(), op, call_args, answer_timeout(op, call_args))
    emit(args, data, op.render(data, call_args))
    return op.exit_status(data) if op.exit_status is not None else 0
