"""Acceptance checks of a task (``delegate --verify CMD``): what is checked (:class:`Check`),
what one run of it showed (:class:`Evidence`), and the event that brings it back to the
session (:class:`CheckDone`). Plain values; the rules over them are
:mod:`protocol.session.task` (the task's ``verifying`` state) and :mod:`protocol.session.checks`
(what the session does around it).

Rules:

1. **A claim is checked, not taken.** A task with a check that its agent says ``completed``
   is ``verifying`` until the check has run: exit status 0 completes it, with the evidence;
   anything else (a non-zero status, a signal, the check's timeout, a check that could not
   start) is a failed attempt.
2. **Attempts are counted per task**, from 1; a failed attempt with attempts left sends the
   task back to ``running`` and its agent is told why; the last one fails the task with
   ``verification_failed``. ``blocked`` and ``failed`` are never checked.
3. **Evidence is bounded**: the output's last :data:`EVIDENCE_LINES` lines, each cut to
   :data:`EVIDENCE_LINE_CHARS` characters, from at most the last 8 KiB the check printed.
4. A check's answer names its attempt: one that comes for an attempt no longer running (the
   task settled, or a restarted parent runs it again) changes nothing.
"""

from __future__ import annotations

from typing import Final

import msgspec

from protocol.core.limits import (
    MAX_VERIFY_ATTEMPTS,
    VerifyAttempts,
    VerifyCommand,
    VerifyTimeout,
)

__all__ = [
    "DEFAULT_VERIFY_ATTEMPTS",
    "DEFAULT_VERIFY_TIMEOUT_S",
    "EVIDENCE_LINES",
    "EVIDENCE_LINE_CHARS",
    "MAX_VERIFY_ATTEMPTS",
    "Check",
    "CheckDone",
    "Evidence",
    "tail_lines",
]

#: attempts a check gets when the caller names none
DEFAULT_VERIFY_ATTEMPTS: Final = 2
#: seconds one run of a check may take when the caller names none
DEFAULT_VERIFY_TIMEOUT_S: Final = 600.0
#: the output lines evidence keeps (rule 3)
EVIDENCE_LINES: Final = 20
#: the characters each kept line keeps
EVIDENCE_LINE_CHARS: Final = 400


class Check(msgspec.Struct, frozen=True, kw_only=True):
    """A task's acceptance check: a shell command run in its agent's directory."""

    command: VerifyCommand
    attempts: VerifyAttempts = DEFAULT_VERIFY_ATTEMPTS
    timeout_s: VerifyTimeout = DEFAULT_VERIFY_TIMEOUT_S


class Evidence(msgspec.Struct, frozen=True, kw_only=True):
    """What one run of a check showed (rule 3)."""

    command: str
    attempt: int
    #: the exit status; None when it did not exit by itself (killed, timed out, not started)
    exit_status: int | None
    duration_s: float
    #: the last lines it printed (stdout and stderr together)
    output_tail: tuple[str, ...] = ()
    timed_out: bool = False
    #: why it has no exit status of its own (could not start, killed at its timeout)
    error: str | None = None

    @property
    def passed(self) -> bool:
        return self.exit_status == 0 and not self.timed_out

    def outcome(self) -> str:
        """One line: what the check ended with."""
        if self.timed_out:
            return f"timed out after {self.duration_s:.1f} s"
        if self.exit_status is None:
            return self.error or "did not run"
        return f"exit status {self.exit_status} after {self.duration_s:.1f} s"


class CheckDone(msgspec.Struct, frozen=True, kw_only=True):
    """A check's run ended: handed back to the session's rules by whoever ran it."""

    task_id: str
    evidence: Evidence


def tail_lines(text: str) -> tuple[str, ...]:
    """The evidence's lines of ``text`` (rule 3): the last :data:`EVIDENCE_LINES`, each cut."""
    lines = text.rstrip("\n").splitlines()[-EVIDENCE_LINES:] if text.strip() else []
    return tuple(
        line if len(line) <= EVIDENCE_LINE_CHARS else f"{line[:EVIDENCE_LINE_CHARS]}…"
        for line in lines
    )


assert MAX_VERIFY_ATTEMPTS >= DEFAULT_VERIFY_ATTEMPTS
