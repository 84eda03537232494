"""Recovering a session whose agents' bridges are gone too (``shepherd serve --recover``).

A restarted parent adopts the bridges that outlived it (:mod:`protocol.session.restore`). After
a reboot they are gone as well, and without recovery their open tasks fail. With recovery:

Rules:

1. **Only when asked.** Without ``--recover`` (``Restore.recover`` false) nothing here
   changes what a restart does, except for an agent a previous recovery started (rule 4).
2. **Which agents start again:** every agent that is neither closed nor known to have exited,
   whose bridge was not found running when the parent restarted (``Restore.live``). It is
   started with the same ``SpawnAgent`` effect a spawn uses: the same adapter, capability and
   options, plus ``recovered`` (its new incarnation: 1 the first time, and so on) so that its
   adapter resumes (the command adapter runs ``resume_cmd`` from its first turn). The new
   incarnation is journaled first (``agent_recover``). A bridge found running is adopted,
   never started a second time: a task never runs twice at once.
3. **Which tasks are handed again:** every open task of an agent started again, once per
   incarnation: a new task envelope marked ``resumed`` whose text says so and carries the
   task's history (:func:`history`: its requests with their replies and what its agent told
   the parent, newest kept, at most :data:`HISTORY_CHARS`), journaled first
   (``task_resume``, with the envelope's id).
4. **Never twice to one incarnation.** A task its agent's current incarnation already had
   (re-handed to it, then a crash during the recovery and a restart that finds that
   incarnation running; or delegated to it after the recovery) is sent again with the same
   envelope id, which the agent's inbox drops if it had it. This holds with or without
   ``--recover``: the fold knows each task's incarnation from the journal's order.
5. An agent that cannot start again (its script, directory or Pi binary gone) exits before
   it is ready, and the usual exit rule fails its task with the reason (watchers are told).
6. **No request outlives the incarnation that knew it** (:func:`orphan`). When an agent starts
   again, every request still open that it asked (a question, an approval) is closed as
   cancelled, ``orphaned``, journaled before the new process starts: its task is ``running``
   again (a recovered task can always complete), the resumed history quotes each one ("->
   cancelled"), and the agent asks again if it still needs to; a late reply to the old id
   finds the request closed and reopens nothing. Every request still open that was asked *of*
   it is closed the same way, its asker told (the new process never saw the question, which
   was set aside with its dead process's unread envelopes), so nobody waits on it for ever.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import msgspec

from protocol.core.errors import LimitExceeded
from protocol.core.ids import IdKind
from protocol.records.journal import AgentRecoverRecord, TaskResumeRecord
from protocol.records.requests import RequestState
from protocol.records.tasks import TaskRecord
from protocol.session import outbox, requests, tasks
from protocol.session.effects import Deliver, Effect, Journal, SpawnAgent, Story
from protocol.session.state import AgentRow, Ctx, SessionState
from protocol.wire.envelopes import TaskEnvelope

__all__ = [
    "HISTORY_CHARS",
    "HISTORY_LINE_CHARS",
    "ORPHANED",
    "hand",
    "history",
    "orphan",
    "replay_delegation",
    "replay_recover",
    "replay_resume",
    "respawn",
    "resumed_text",
    "wants_respawn",
]

#: The history in a resumed task's text is at most this many characters (the newest entries
#: are kept; the text says how many were left out).
HISTORY_CHARS = 8000
#: Each entry of the history is cut to this many characters.
HISTORY_LINE_CHARS = 500


def _cut(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def wants_respawn(row: AgentRow, live: frozenset[str]) -> bool:
    """Rule 2: not closed, not exited, and no bridge of it running."""
    return not row.closed and row.process_state != "exited" and row.agent_id not in live


def respawn(s: SessionState, row: AgentRow, cx: Ctx) -> list[Effect]:
    """Start the agent again as its next incarnation (rule 2)."""
    incarnation = row.incarnation + 1
    record = AgentRecoverRecord(agent_id=row.agent_id, incarnation=incarnation, at=cx.now)
    replay_recover(s, record)
    row = s.agents[row.agent_id]
    return [
        Journal(record=record),
        *orphan(s, row.agent_id, cx),
        SpawnAgent(
            agent_id=row.agent_id,
            name=row.name,
            adapter=row.adapter,
            capability=row.capability,
            options={**row.options, "recovered": incarnation},
        ),
        Story(text=f"{row.name}: its bridge was gone; started again (incarnation {incarnation})"),
    ]


#: why an orphaned request was closed (rule 6), as its asker and the history read it
ORPHANED = "orphaned: {name}'s process was gone when the session restarted; ask again if needed"


def orphan(s: SessionState, agent_id: str, cx: Ctx) -> list[Effect]:
    """Rule 6: the open requests asked by or of ``agent_id``, closed as cancelled (orphaned)."""
    effects: list[Effect] = []
    why = ORPHANED.format(name=s.name_of(agent_id))
    for request in list(s.requests.pending()):
        if agent_id not in (request.sender_id, request.target_id):
            continue
        asked_of_it = request.target_id == agent_id and request.sender_id != agent_id
        effects += requests.close(
            s,
            request.request_id,
            RequestState.CANCELLED,
            cx,
            notify_sender=asked_of_it,
            why=why,
        )
    return effects


def replay_recover(s: SessionState, record: AgentRecoverRecord) -> None:
    """The agent's new incarnation: a new process, starting, whose pid is not known yet."""
    row = s.agents.get(record.agent_id)
    if row is None:
        return
    s.agents[record.agent_id] = msgspec.structs.replace(
        row, incarnation=record.incarnation, pid=None, process_state="starting"
    )


def replay_resume(s: SessionState, record: TaskResumeRecord) -> None:
    s.handed[record.task_id] = (record.incarnation, record.message_id)


def replay_delegation(s: SessionState, record: TaskRecord) -> None:
    """A task read back from the journal, delegated to an agent started again: that
    incarnation had its envelope (rule 4). Called before the record is folded in."""
    row = s.agents.get(record.agent_id)
    if record.task_id in s.tasks or row is None or row.incarnation == 0:
        return
    if record.message_id is not None:
        s.handed[record.task_id] = (row.incarnation, record.message_id)


def history(s: SessionState, record: TaskRecord, told: Iterable[str] = ()) -> tuple[list[str], int]:
    """The task's history, oldest first: each request of the task (who asked whom, what, and
    how it ended, with the reply's start), then what its agent told the parent (``told``, as
    read from the notifications), newest kept within :data:`HISTORY_CHARS`. Returns the lines
    kept and how many were left out."""
    lines: list[str] = []
    asked = [r for r in s.requests.values() if r.task_id == record.task_id]
    for request in sorted(asked, key=lambda r: r.created_at):
        line = (
            f"{s.name_of(request.sender_id)} asked {s.name_of(request.target_id)} "
            f"({request.request_id}): {request.question}"
        )
        if request.state is RequestState.REPLIED:
            line += f" -> replied: {request.reply_text}"
        elif request.state is not RequestState.PENDING:
            line += f" -> {request.state.value.replace('_', ' ')}"
        else:
            line += " -> no reply yet"
        lines.append(_cut(line, HISTORY_LINE_CHARS))
    lines += [
        _cut(f"{record.agent_name or 'the agent'} told the parent: {t}", HISTORY_LINE_CHARS)
        for t in told
    ]
    kept: list[str] = []
    size = 0
    for line in reversed(lines):
        if size + len(line) + 1 > HISTORY_CHARS:
            break
        kept.append(line)
        size += len(line) + 1
    kept.reverse()
    return kept, len(lines) - len(kept)


def resumed_text(record: TaskRecord, lines: list[str], left_out: int) -> str:
    """A resumed task's text: what happened, the task, and its history."""
    text = (
        "[resumed] This task was interrupted (your process was gone when the session "
        "restarted) and is handed to you again. Carry on from where it stopped; do not redo "
        f"what is already done.\n\nTask {record.task_id}:\n{record.description}"
    )
    if lines or left_out:
        head = "\n\nHistory so far (oldest first"
        head += f"; {left_out} earlier entries left out):" if left_out else "):"
        text += head + "".join(f"\n- {line}" for line in lines)
    return text


def hand(
    s: SessionState, record: TaskRecord, cx: Ctx, told: Mapping[str, Iterable[str]]
) -> list[Effect]:
    """The open task handed to its agent after a restart (rules 3 and 4); an agent never
    started again gets today's envelope, with its old id."""
    row = s.agents[record.agent_id]
    if row.incarnation == 0:
        return [Deliver(agent_id=row.agent_id, envelope=tasks.task_envelope(s, record, cx))]
    effects: list[Effect] = []
    given = s.handed.get(record.task_id)
    if given is not None and given[0] == row.incarnation:
        if given[1] == record.message_id:  # delegated to this incarnation: as any restart does
            return [Deliver(agent_id=row.agent_id, envelope=tasks.task_envelope(s, record, cx))]
        message_id = given[1]  # this incarnation had it (or has it waiting): its inbox drops it
    else:
        message_id = cx.ids.new(IdKind.MESSAGE)
        resume = TaskResumeRecord(
            task_id=record.task_id,
            agent_id=row.agent_id,
            incarnation=row.incarnation,
            message_id=message_id,
            at=cx.now,
        )
        replay_resume(s, resume)
        effects += [
            Journal(record=resume),
            Story(text=f"{row.name}: task {record.task_id} handed again (resumed)"),
        ]
    lines, left_out = history(s, record, told.get(record.task_id, ()))
    envelope = _fitting(s, record, message_id, lines, left_out, cx)
    return [*effects, Deliver(agent_id=row.agent_id, envelope=envelope)]


def _fitting(
    s: SessionState,
    record: TaskRecord,
    message_id: str,
    lines: list[str],
    left_out: int,
    cx: Ctx,
) -> TaskEnvelope:
    """The resumed envelope, with as much of the history as fits one envelope (the task's
    own text fitted when it was delegated)."""
    while True:
        envelope = outbox.from_parent(
            TaskEnvelope,
            s,
            cx,
            record.agent_id,
            message_id=message_id,
            task_id=record.task_id,
            content=resumed_text(record, lines, left_out),
            deadline_at=record.deadline_at,
            resumed=True,
        )
        try:
            outbox.check_fits(s, envelope, "the resumed task")
        except LimitExceeded:
            if not lines:
                return msgspec.structs.replace(envelope, content=record.description)
            drop = max(1, len(lines) // 2)
            lines, left_out = lines[drop:], left_out + drop
            continue
        return envelope
