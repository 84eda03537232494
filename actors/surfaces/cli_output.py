"""What the ``shepherd`` command prints, where, and with which exit status.

Rules: stdout carries exactly the answer: one JSON object under ``--json``, else the human
view. An error exits with status 2 and is printed as ``{"error": {"code", "message"}}`` on
stdout under ``--json``, else as ``shepherd: CODE: MESSAGE`` on stderr. A session found
without ``--session`` or ``$SHEPHERD_SESSION`` is named on stderr, with and without
``--json``, so the JSON on stdout keeps its documented shape.
"""

from __future__ import annotations

import argparse
import contextlib
import contextvars
import io
import sys
from collections.abc import Iterator
from typing import Any, TextIO

import msgspec

__all__ = ["captured", "emit", "fail", "say", "session_of"]

#: where this thread's command prints (:func:`captured`); unset: the process's stdout / stderr
_streams: contextvars.ContextVar[tuple[TextIO, TextIO]] = contextvars.ContextVar("streams")


def _out() -> TextIO:
    got = _streams.get(None)
    return sys.stdout if got is None else got[0]


def _err() -> TextIO:
    got = _streams.get(None)
    return sys.stderr if got is None else got[1]


@contextlib.contextmanager
def captured() -> Iterator[tuple[io.StringIO, io.StringIO]]:
    """What a command prints in this block (this thread only) goes to the two buffers: how the
    supervisor runs a forwarded ``shepherd`` call (:mod:`actors.surfaces.forwarded`)."""
    out, err = io.StringIO(), io.StringIO()
    token = _streams.set((out, err))
    try:
        yield out, err
    finally:
        _streams.reset(token)


def emit(args: argparse.Namespace, data: Any, human: str) -> None:
    """The answer on stdout: ``data`` as JSON under ``--json``, else ``human``."""
    out = _out()
    if args.json:
        out.write(msgspec.json.encode(data).decode() + "\n")
    else:
        out.write(human + "\n")
    out.flush()


def fail(args: argparse.Namespace, code: str, message: str) -> int:
    """Report an error as ``--json`` asks; the exit status for it (2)."""
    if getattr(args, "json", False):
        _out().write(
            msgspec.json.encode({"error": {"code": code, "message": message}}).decode() + "\n"
        )
    else:
        _err().write(f"shepherd: {code}: {message}\n")
    return 2


def say(text: str) -> None:
    """A word to the person on stderr (never on stdout, which carries the answer)."""
    err = _err()
    err.write(f"shepherd: {text}\n")
    err.flush()


def session_of(args: argparse.Namespace) -> Any:
    """The session for this command (:func:`actors.surfaces.client.find_session`), named on stderr
    when it was not chosen explicitly."""
    from actors.surfaces.client import find_session

    return find_session(args.session, announce=say)
