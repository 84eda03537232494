"""Merges of agents' branches (``shepherd merge``: :mod:`actors.session.git_merge`), as the
session records and tells them.

Rules:

1. **Planned, then done.** Before ``into`` moves, the merge is journaled ``planned`` (its
   ``before`` and the ``commit`` it moves to); once moved, ``done``. A git ref moves at once
   or not at all, so after a ``kill -9`` of the parent the merge is done or not done, never
   half.
2. **The next parent says which.** A merge found ``planned`` without ``done`` in the journal
   is checked at the restart (git reads where ``into`` stands): at ``commit``, it is journaled
   ``done`` and told ``merge_recovered`` as done; anywhere else, ``abandoned`` and told as not
   done (at ``before``: nothing moved; elsewhere: ``into`` moved since, by someone else).
3. **Told.** A merge done is told to the parent as a ``branch_merged`` notice naming the
   other live agents whose worktrees changed paths it changed (each of those is sent a
   message too, by the session's edge).
"""

from __future__ import annotations

import msgspec

from protocol.records.journal import MergeRecord
from protocol.records.notifications import Notice
from protocol.session.effects import Answer, Effect, Journal, Notify, ProbeMerge
from protocol.session.state import Ctx, SessionState

__all__ = ["merged", "replay", "restored", "settle"]


def merged(s: SessionState, record: MergeRecord, cx: Ctx) -> list[Effect]:
    """A merge's record, from the session's edge (rules 1 and 3) or from the restart's check
    (rule 2): journaled, then told; the edge's ask is answered once it is durable."""
    replay(s, record)
    effects: list[Effect] = [Journal(record=record)]
    if record.found is not None:
        effects.append(Notify(note=_recovered(record, cx)))
    elif record.state == "done":
        effects.append(Notify(note=_told(record, cx)))
    return [*effects, Answer(value=None)]


def replay(s: SessionState, record: MergeRecord) -> None:
    """Rule 1: a planned merge is open until its ``done`` or ``abandoned``."""
    if record.state == "planned":
        s.merges[record.commit] = record
    else:
        s.merges.pop(record.commit, None)


def restored(s: SessionState) -> list[Effect]:
    """Rule 2: each merge open in the journal is checked."""
    return [ProbeMerge(record=record) for record in s.merges.values()]


def settle(record: MergeRecord, head: str | None, at: float) -> MergeRecord:
    """Rule 2: what the check found (``head``: ``into``'s commit; None: no such branch)."""
    state = "done" if head == record.commit else "abandoned"
    return msgspec.structs.replace(record, state=state, found=head or "", at=at)


def _said(record: MergeRecord) -> str:
    return f"{record.agent}'s branch {record.branch} into {record.into} ({record.strategy})"


def _told(record: MergeRecord, cx: Ctx) -> Notice:
    text = f"merged {_said(record)}: {record.into} is at {record.commit[:12]}"
    if record.overlaps:
        names = ", ".join(f"{o.agent} ({o.count} path(s))" for o in record.overlaps)
        text += f"; told the agents whose worktrees changed the same paths: {names}"
    return Notice(
        created_at=cx.now,
        code="branch_merged",
        text=text,
        agent_id=record.agent_id,
        refs=(record.commit, *(o.agent for o in record.overlaps)),
    )


def _recovered(record: MergeRecord, cx: Ctx) -> Notice:
    if record.state == "done":
        text = f"the merge of {_said(record)} was done before the restart: at {record.commit[:12]}"
    elif record.found == record.before:
        text = (
            f"the merge of {_said(record)} was not done before the restart: {record.into} is "
            f"still at {record.before[:12]}; merge again"
        )
    else:
        where = record.found[:12] if record.found else "gone"
        text = (
            f"the merge of {_said(record)} was not done before the restart, and {record.into} "
            f"moved since (now {where}); merge again"
        )
    return Notice(
        created_at=cx.now,
        code="merge_recovered",
        text=text,
        agent_id=record.agent_id,
        refs=(record.commit,),
    )
