"""What ``shepherd serve --recover`` reads from the machine before the session's rules decide
(:mod:`protocol.session.recover`), and what it clears before an agent starts again.

Rules:
- **Which bridges are running** is read once, from ``/proc``: a process that leads its own
  session and carries this session's id and an agent's id in its environment (how a bridge is
  started). A zombie is not running.
- **What an agent told the parent** during each open task is read from the notifications
  file (``agent_message`` lines): the task's history, at most :data:`TOLD_PER_TASK` per task
  (the newest).
- **Before an agent starts again**, whatever its previous incarnation left is cleared: any
  process still carrying its agent id (a command turn in a group of its own survives its
  bridge's SIGKILL) is killed, so a task never runs twice at once, and the envelopes left
  unread in its inbox (addressed to the dead process; its task is handed again with its
  history) are moved to ``<session>/agents/<agent>/unread-before-recovery-<n>/`` and kept,
  never delivered to the new process: the transport's ``set_aside`` does it (the mailbox's
  ``new/`` files; on NATS, what the agent's consumer still holds, also what was handed to the
  dead process and never acknowledged).
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable, Iterable
from pathlib import Path

from actors.child.env import ENV_AGENT_ID, ENV_SESSION_ID
from actors.records.notifications import Deliveries
from actors.runtime.log import logger
from actors.session.records import Records
from protocol.records.notifications import AgentMessage, AnyNotification
from protocol.records.settings import Settings
from protocol.session.restore import Restore, fold
from protocol.session.state import SessionState

__all__ = [
    "TOLD_PER_TASK",
    "clear_leftovers",
    "live_bridges",
    "read_restore",
    "told_per_task",
]

#: What an agent told the parent, kept per open task for its history (the newest).
TOLD_PER_TASK = 50


def _environ(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes()
    return dict(
        item.split("=", 1) for item in raw.decode(errors="replace").split("\0") if "=" in item
    )


def _zombie(pid: int) -> bool:
    stat = Path(f"/proc/{pid}/stat").read_bytes()
    return stat[stat.rindex(b")") + 2 :].startswith(b"Z")


def live_bridges(session_id: str, agent_ids: Iterable[str]) -> frozenset[str]:
    """The agents of ``agent_ids`` whose bridge is running (one pass over ``/proc``)."""
    wanted = set(agent_ids)
    found: set[str] = set()
    me = os.getpid()
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == me:
            continue
        pid = int(entry)
        try:
            if os.getsid(pid) != pid or _zombie(pid):
                continue
            env = _environ(pid)
        except OSError:
            continue
        agent_id = env.get(ENV_AGENT_ID)
        if env.get(ENV_SESSION_ID) == session_id and agent_id in wanted:
            found.add(agent_id)
    return frozenset(found)


def told_per_task(
    notes: Iterable[AnyNotification], task_ids: Iterable[str]
) -> dict[str, list[str]]:
    """Per task of ``task_ids``, what its agent told the parent (newest
    :data:`TOLD_PER_TASK`), from the record of delivery's ``notes`` (as its reader read them:
    an unreadable line is not among them, and the reader counted it)."""
    wanted = set(task_ids)
    told: dict[str, list[str]] = {}
    if not wanted:
        return told
    for note in notes:
        if type(note) is AgentMessage and note.task_id in wanted:
            kept = told.setdefault(note.task_id, [])
            kept.append(note.content)
            del kept[:-TOLD_PER_TASK]
    return told


def clear_leftovers(
    session_id: str,
    agent_id: str,
    set_aside: Callable[[Path], int],
    keep: Path,
    incarnation: int,
) -> None:
    """Before an agent starts again: kill what its previous incarnation left running and move
    its unread envelopes aside (see the module rules). ``set_aside(directory)``: the
    transport's (the file mailbox's :func:`~actors.transports.mailbox.files.move_unread`), which
    makes the directory only when something was left, and says how many envelopes it kept there."""
    tag = (f"{ENV_AGENT_ID}={agent_id}".encode(), f"{ENV_SESSION_ID}={session_id}".encode())
    me = os.getpid()
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == me:
            continue
        try:
            environ = Path(f"/proc/{entry}/environ").read_bytes().split(b"\0")
            if all(t in environ for t in tag):
                os.kill(int(entry), signal.SIGKILL)
                logger.bind(agent_id=agent_id).warning("killed pid {} left by its last run", entry)
        except (OSError, ProcessLookupError):
            continue
    aside = keep / f"unread-before-recovery-{incarnation}"
    kept = set_aside(aside)
    if kept:
        logger.bind(agent_id=agent_id).warning(
            "{} envelopes left unread by its last run kept in {}", kept, aside
        )


def read_restore(
    records: Records,
    session_id: str,
    settings: Settings,
    recover: bool,
    given: Deliveries,
) -> Restore:
    """What the session's records say, for a restarted parent (damaged lines are counted; each
    was logged with where it is); with ``recover``, also which bridges are still running and
    what each open task's agent told the parent (its history). ``given``: the record of
    delivery, as the restart read it (once, for this and ``Records.catch_up``)."""
    state = fold(records.journal.read(), SessionState(session_id, settings))
    restore = Restore(
        state=state,
        delivered=given.delivered,
        stale_noticed=given.stale,
        warned=given.warned,
        problems=len(records.journal.problems) + len(records.delivered.problems),
    )
    if recover:
        open_tasks = [t for t, r in state.tasks.items() if not r.terminal]
        restore.recover = True
        restore.live = live_bridges(session_id, state.agents)
        restore.told = told_per_task(given.notes, open_tasks)
    return restore
