"""Answers that fit their frame: every answer that can grow is cut to a byte budget by design.

An answer crosses the mailbox in one envelope (``max_envelope_bytes``, 64 KiB by default). What
can grow is bounded here, before anything is sent, by the rule of its kind:

=================  ===============================================================================
answer             how it is bounded
=================  ===============================================================================
``status``         paged: as many agents as fit, from ``cursor`` on; ``next_cursor`` says where the
                   next page starts; the session's counts (``summary``) are always whole
``read``           paged: the newest of the asked-for lines that fit; ``next_cursor`` reads older
                   ones; a line too long for any page is cut, saying how long it was
``worktrees``      paged: as many worktrees as fit (at most ``WORKTREES_PAGE``), from ``cursor`` on
``watch``/``wait`` results are previewed (task text dropped, summary and error cut, saying how
``cancel``/...     long they were); the full texts stay in the journal and the task's note
=================  ===============================================================================

An answer still over the budget after that is refused with ``limit_exceeded``, at once, by the
caller of :func:`fit_answer`: never sent, never a silent time-out.

A caller that wants the whole answer (the CLI) follows the pages with the operation's
:class:`Pager` (named in :mod:`protocol.ops`): ``following`` gives the arguments of the next
call, or ``None``; ``joined`` makes one answer of the pages. Sans-IO and pure.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import msgspec

from protocol.calls import api, api_worktrees
from protocol.core.errors import LimitExceeded
from protocol.core.limits import PREVIEW_CHARS, preview
from protocol.records.tasks import TaskResult

__all__ = [
    "READ_PAGES",
    "STATUS_PAGES",
    "WORKTREE_PAGES",
    "Pager",
    "encoded_size",
    "fit_answer",
    "preview_result",
]

_ENCODER = msgspec.json.Encoder()
#: a single output line longer than this is cut in a ``read`` answer
LINE_CHARS = 4000


def encoded_size(value: Any) -> int:
    return len(_ENCODER.encode(value))


def preview_result(result: TaskResult, limit: int = PREVIEW_CHARS) -> TaskResult:
    """``result`` without its task text and with summary and error cut to ``limit``: what a
    receipt or a crowded answer carries (the task id names the rest)."""
    text, error = preview(result.text, limit), preview(result.error, limit)
    # a worktree's changed paths: fewer of them listed (their count stays)
    changes = result.changes.cut(limit // 100) if result.changes is not None else None
    return msgspec.structs.replace(
        result, description=None, text=text, error=error, changes=changes
    )


def _fit_results(results: tuple[TaskResult, ...], budget: int) -> tuple[TaskResult, ...]:
    """Whole results if they fit; else previews, shorter and shorter until they do."""
    if encoded_size(results) <= budget:
        return results
    limit = PREVIEW_CHARS * 4
    while True:
        cut = tuple(preview_result(r, limit) for r in results)
        if encoded_size(cut) <= budget or limit <= 16:
            return cut
        limit //= 2


def _fit_status(answer: api.StatusResult, budget: int) -> api.StatusResult:
    head = msgspec.structs.replace(answer, agents=(), next_cursor=None)
    room = budget - encoded_size(head) - 64  # the next_cursor field
    kept: list[api.AgentStatus] = []
    for whole in answer.agents:
        row = whole
        size = encoded_size(row) + 1
        if size > room and kept:
            break
        if size > room:  # one row alone is too big: show it without its task's result texts
            row = _shrink_row(whole)
            size = encoded_size(row) + 1
            if size > room:
                break
        kept.append(row)
        room -= size
    if len(kept) == len(answer.agents):
        return answer
    if not kept:  # not even one row: paging would never move on
        raise LimitExceeded(
            f"one agent's status does not fit the {budget} bytes an answer may take "
            "(max_envelope_bytes less the envelope's header)"
        )
    return msgspec.structs.replace(
        answer, agents=tuple(kept), next_cursor=answer.cursor + len(kept)
    )


def _shrink_row(row: api.AgentStatus) -> api.AgentStatus:
    task = row.task
    if task is None:
        return row
    result = preview_result(task.result, 100) if task.result is not None else None
    requests = tuple(
        msgspec.structs.replace(r, question=preview(r.question, 100) or "")
        for r in task.pending_requests[:20]
    )
    return msgspec.structs.replace(
        row, task=msgspec.structs.replace(task, result=result, pending_requests=requests)
    )


def _fit_read(answer: api.ReadResult, budget: int) -> api.ReadResult:
    lines = tuple(preview(line, LINE_CHARS) or "" for line in answer.lines)
    room = budget - encoded_size(msgspec.structs.replace(answer, lines=())) - 64
    kept: list[str] = []
    for line in reversed(lines):  # the newest lines first: an older page is one call away
        size = encoded_size(line) + 1
        if size > room:
            break
        kept.append(line)
        room -= size
    kept.reverse()
    if lines and not kept:  # not even one (cut) line: paging would never move on
        raise LimitExceeded(
            f"one output line does not fit the {budget} bytes an answer may take "
            "(max_envelope_bytes less the envelope's header)"
        )
    dropped = len(lines) - len(kept)
    if dropped == 0 and lines == answer.lines:
        return answer
    first = answer.first + dropped
    return msgspec.structs.replace(
        answer,
        lines=tuple(kept),
        first=first,
        next_cursor=first if dropped else answer.next_cursor,
    )


def _fit_worktrees(
    answer: api_worktrees.WorktreesResult, budget: int
) -> api_worktrees.WorktreesResult:
    """As many worktrees as fit (at least one), ``next_cursor`` after the last one kept."""
    room = budget - encoded_size(msgspec.structs.replace(answer, worktrees=())) - 64
    kept: list[api_worktrees.WorktreeStatus] = []
    for row in answer.worktrees:
        size = encoded_size(row) + 1
        if size > room and kept:
            break
        kept.append(row)
        room -= size
    if len(kept) == len(answer.worktrees):
        return answer
    return msgspec.structs.replace(
        answer, worktrees=tuple(kept), next_cursor=answer.cursor + len(kept)
    )


def fit_answer(answer: Any, budget: int) -> Any:
    """``answer`` bounded to ``budget`` bytes by the rule of its kind (see the module table);
    raises :class:`LimitExceeded` if it still does not fit."""
    match answer:
        case api.StatusResult():
            answer = _fit_status(answer, budget)
        case api.ReadResult():
            answer = _fit_read(answer, budget)
        case api.WatchResult() | api.WaitResult():
            answer = msgspec.structs.replace(
                answer, completed=_fit_results(answer.completed, budget - 1024)
            )
        case TaskResult():
            answer = _fit_results((answer,), budget)[0]
        case api_worktrees.WorktreesResult():
            answer = _fit_worktrees(answer, budget)
    size = encoded_size(answer)
    if size > budget:
        raise LimitExceeded(
            f"the answer is {size} bytes, over the {budget} bytes one answer may take "
            "(max_envelope_bytes less the envelope's header)"
        )
    return answer


# ----------------------------------------------------------------------------- following pages

#: an answer's JSON-able form, and the arguments of a call, as the CLI holds them
Data = dict[str, Any]


class Pager(msgspec.Struct, frozen=True):
    """How a caller follows a paged answer: ``following(args, pages)`` is the next call's
    arguments (``None``: complete), ``joined(args, pages)`` the one answer they make."""

    following: Callable[[Data, list[Data]], Data | None]
    joined: Callable[[Data, list[Data]], Data]


def _next_agents(args: Data, pages: list[Data]) -> Data | None:
    cursor = pages[-1].get("next_cursor")
    return None if cursor is None else {**args, "cursor": cursor}


def _all_agents(args: Data, pages: list[Data]) -> Data:
    agents = [row for page in pages for row in page["agents"]]
    return {**pages[-1], "agents": agents, "cursor": args.get("cursor", 0), "next_cursor": None}


def _older_lines(args: Data, pages: list[Data]) -> Data | None:
    wanted = args.get("lines", 50)
    have = sum(len(page["lines"]) for page in pages)
    before = pages[-1].get("next_cursor")
    if have >= wanted or before is None:
        return None
    return {**args, "lines": wanted - have, "before": before}


def _all_lines(args: Data, pages: list[Data]) -> Data:
    # each page is older than the one before it; ``first``/``next_cursor`` are the oldest's
    lines = [line for page in reversed(pages) for line in page["lines"]]
    return {**pages[-1], "lines": lines}


#: ``status``: agents in spawn order, page after page from ``cursor`` on
STATUS_PAGES = Pager(_next_agents, _all_agents)


def _all_worktrees(args: Data, pages: list[Data]) -> Data:
    rows = [row for page in pages for row in page["worktrees"]]
    return {**pages[-1], "worktrees": rows, "cursor": args.get("cursor", 0), "next_cursor": None}


#: ``worktrees``: agents' worktrees in spawn order, page after page from ``cursor`` on
WORKTREE_PAGES = Pager(_next_agents, _all_worktrees)
#: ``read``: the newest lines first, then older pages until ``lines`` are there
READ_PAGES = Pager(_older_lines, _all_lines)
