"""What the ``shepherd`` command prints, where, and with which exit status.

Rules: stdout carries exactly the answer: one JSON object under ``--json``, else the human
view. An error exits with status 2 and is printed as ``{"error": {"code", "message"}}`` on
stdout under ``--json``, else as ``shepherd: CODE: MESSAGE`` on stderr. A session found
without ``--session`` or ``$SHEPHERD_SESSION`` is named on stderr, with and without
``--json``, so the JSON on stdout keeps its documented shape.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

import msgspec

__all__ = ["emit", "fail", "say", "session_of"]


def emit(args: argparse.Namespace, data: Any, human: str) -> None:
    """The answer on stdout: ``data`` as JSON under ``--json``, else ``human``."""
    if args.json:
        sys.stdout.write(msgspec.json.encode(data).decode() + "\n")
    else:
        sys.stdout.write(human + "\n")
    sys.stdout.flush()


def fail(args: argparse.Namespace, code: str, message: str) -> int:
    """Report an error as ``--json`` asks; the exit status for it (2)."""
    if getattr(args, "json", False):
        sys.stdout.write(
            msgspec.json.encode({"error": {"code": code, "message": message}}).decode() + "\n"
        )
    else:
        sys.stderr.write(f"shepherd: {code}: {message}\n")
    return 2


def say(text: str) -> None:
    """A word to the person on stderr (never on stdout, which carries the answer)."""
    sys.stderr.write(f"shepherd: {text}\n")
    sys.stderr.flush()


def session_of(args: argparse.Namespace) -> Any:
    """The session for this command (:func:`actors.surfaces.client.find_session`), named on stderr
    when it was not chosen explicitly."""
    from actors.surfaces.client import find_session

    return find_session(args.session, announce=say)
