"""``shepherd`` calls run by the session's own supervisor: what ``shepherd serve`` gives its
command socket (:mod:`actors.runtime.command_socket`; the calling side is
:mod:`actors.surfaces.entry`).

Rules:
- The command line's own code runs the call (:func:`actors.surfaces.cli_ops.run_operation`: the
  same parser, checks, paging, views, output and exit status), with its output captured
  (:func:`actors.surfaces.cli_output.captured`); the only difference is the last step: the
  operation is called on this supervisor directly instead of through the mailbox, its answer
  cut to fit an envelope as the mailbox's answers are (:func:`protocol.calls.answers.fit_answer`).
- Paths are made absolute against the caller's directory, ``~`` against its ``HOME``.
- A call that names another session (``--session``, or ``SHEPHERD_SESSION`` in the caller's
  environment, that is not this session's directory) is not run here: the answer is
  ``elsewhere`` and the caller runs it itself. A caller that found this session as the one live
  one is told so on stderr, as the command line does.
"""

from __future__ import annotations

import argparse
import functools
import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import msgspec

from actors.runtime.command_socket import Request
from actors.surfaces.cli_ops import Caller, absolute, run_operation
from actors.surfaces.cli_output import captured, fail, say
from actors.surfaces.cli_parser import build_parser, wants_json
from actors.surfaces.client import ENV_SESSION, announcement
from protocol.calls.answers import fit_answer
from protocol.core.errors import InvalidArgument, ShepherdError
from protocol.core.limits import answer_budget

if TYPE_CHECKING:
    from actors.session.supervisor import Supervisor

__all__ = ["run_forwarded"]


@functools.lru_cache(maxsize=64)
def _parser(command: str) -> argparse.ArgumentParser:
    """A command's parser, built once (its building costs more than most calls; parsing does
    not change a parser, so the socket's threads share it). ``command`` is one of the socket's
    commands (:data:`~actors.runtime.command_wire.PARENT_COMMANDS`)."""
    return build_parser([command])


def _resolver(request: Request) -> Callable[[str], str | None]:
    home = request.env.get("HOME") or None
    return functools.partial(absolute, base=request.cwd, home=home)


def _named_elsewhere(args: argparse.Namespace, request: Request, own: str) -> bool:
    named = args.session if args.session is not None else request.env.get(ENV_SESSION, "")
    if not named.strip():
        return False
    resolved = _resolver(request)(named.strip())
    return resolved is None or os.path.realpath(resolved) != os.path.realpath(own)


def _caller(supervisor: Supervisor) -> Caller:
    budget = answer_budget(supervisor.settings.max_envelope_bytes)

    def call(name: str, call_args: dict[str, Any], timeout: float) -> Any:
        given = {k: v for k, v in call_args.items() if v is not None}  # as a Client sends them
        return msgspec.to_builtins(fit_answer(supervisor.call(name, given), budget))

    return call


def run_forwarded(supervisor: Supervisor, request: Request) -> tuple[int, str, str] | None:
    """Run one forwarded ``shepherd`` call (module rules): (exit status, stdout, stderr), or
    None if it names another session."""
    with captured() as (out, err):
        try:
            args = _parser(request.argv[0]).parse_args(request.argv)
        except InvalidArgument as exc:
            code = fail(argparse.Namespace(json=wants_json(request.argv)), exc.code, exc.message)
            return code, out.getvalue(), err.getvalue()
        if _named_elsewhere(args, request, str(supervisor.session_dir)):
            return None
        if request.announce:
            say(announcement(supervisor.info))
        try:
            code = run_operation(args, lambda: _caller(supervisor), _resolver(request))
        except ShepherdError as exc:
            code = fail(args, exc.code, exc.message)
        return code, out.getvalue(), err.getvalue()
