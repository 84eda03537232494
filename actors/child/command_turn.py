"""The ``command`` adapter's turns: one running process (:class:`Turn`) and one queued
delivery (:class:`Queued`); the rules are :mod:`actors.child.command`'s."""

from __future__ import annotations

import codecs
import subprocess
import threading
from typing import NamedTuple

from actors.runtime.clock import TimerHandle
from actors.runtime.procs import OutputTail

__all__ = ["STDERR_TAIL_BYTES", "Queued", "Turn", "shorten"]

#: The tail of a failed turn's stderr quoted in its error output.
STDERR_TAIL_BYTES = 2048


class Queued(NamedTuple):
    text: str
    #: the task this delivery is about (a task envelope, or a message or reply about it)
    task_id: str | None = None
    is_task: bool = False


class Turn:
    __slots__ = (
        "command",
        "decoder",
        "finished",
        "flush_timer",
        "interrupted",
        "kill_timer",
        "number",
        "pending",
        "proc",
        "reader",
        "report",
        "stderr_tail",
        "task_id",
    )

    def __init__(
        self,
        number: int,
        proc: subprocess.Popen[bytes],
        task_id: str | None = None,
        *,
        command: str = "",
        report: str = "",
    ) -> None:
        self.number = number
        self.proc = proc
        #: the command line it runs (run again as it is when the provider refused the turn)
        self.command = command
        #: where ``shepherd-child rate-limited|provider-error`` writes its report
        self.report = report
        #: the task this turn works for (its envelope went into this turn or an earlier one)
        self.task_id = task_id
        self.decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self.pending = ""
        self.flush_timer: TimerHandle | None = None
        self.kill_timer: TimerHandle | None = None
        self.interrupted: str | None = None
        self.finished = False
        self.stderr_tail = OutputTail(STDERR_TAIL_BYTES)
        self.reader: threading.Thread | None = None

    @property
    def pgid(self) -> int:
        return self.proc.pid  # process_group=0: the turn leads its own group


def shorten(text: str, limit: int) -> str:
    """Cut an oversized delivery (it cannot be passed on one command line)."""
    note = "\n[… cut by shepherd: too long for one command line …]"
    return text if len(text) <= limit else text[:limit] + note
