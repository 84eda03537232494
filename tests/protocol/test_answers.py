"""Answers fit their frame by design (protocol/calls/answers.py): status and read are paged without
losing or repeating anything, results are previewed, and what cannot be cut is refused."""

from __future__ import annotations

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol.calls import api
from protocol.calls.answers import encoded_size, fit_answer, preview_result
from protocol.core.errors import LimitExceeded
from protocol.core.limits import PREVIEW_CHARS, answer_budget
from protocol.records.tasks import TaskResult, TaskState


def _row(i: int, description: str = "task") -> api.AgentStatus:
    return api.AgentStatus(
        agent_id=f"shepherd-agent-{i:016x}",
        name=f"a{i}",
        adapter="scripted",
        process_state="idle",
        task=api.TaskStatus(
            task_id=f"shepherd-task-{i:016x}",
            state=TaskState.RUNNING,
            description=description,
            created_at=1.0,
        ),
    )


def _status(rows: list[api.AgentStatus], cursor: int = 0) -> api.StatusResult:
    return api.StatusResult(
        session_id="shepherd-session-0000000000000000",
        now=2.0,
        agents=tuple(rows[cursor:]),
        cursor=cursor,
        summary=api.StatusSummary(agents=len(rows)),
    )


def _all_pages(rows: list[api.AgentStatus], budget: int) -> list[str]:
    seen: list[str] = []
    cursor = 0
    for _ in range(len(rows) + 1):
        page = fit_answer(_status(rows, cursor), budget)
        assert encoded_size(page) <= budget
        seen.extend(a.agent_id for a in page.agents)
        if page.next_cursor is None:
            return seen
        assert page.next_cursor > cursor, "paging must move on"
        cursor = page.next_cursor
    raise AssertionError("paging did not end")


def test_a_thousand_agents_are_paged_within_the_default_frame() -> None:
    rows = [_row(i, "x" * 400) for i in range(1000)]
    budget = answer_budget(64 * 1024)
    assert encoded_size(_status(rows)) > budget  # the case that once timed out
    assert _all_pages(rows, budget) == [r.agent_id for r in rows]


@settings(max_examples=200, deadline=None)
@given(
    sizes=st.lists(st.integers(0, 3000), min_size=0, max_size=60),
    budget=st.integers(4000, 70_000),
)
def test_paging_returns_every_agent_exactly_once_in_order(sizes: list[int], budget: int) -> None:
    rows = [_row(i, "d" * n) for i, n in enumerate(sizes)]
    assert _all_pages(rows, budget) == [r.agent_id for r in rows]


def test_a_status_row_that_cannot_fit_at_all_is_limit_exceeded_not_an_endless_page() -> None:
    with pytest.raises(LimitExceeded, match="does not fit"):
        fit_answer(_status([_row(0, "x" * 5000)]), 600)


def test_read_keeps_the_newest_lines_and_points_at_the_older_ones() -> None:
    lines = tuple(f"{i:05d} " + "y" * 100 for i in range(2000))
    answer = api.ReadResult(agent_id="shepherd-agent-0000000000000000", lines=lines, first=0)
    page = fit_answer(answer, answer_budget(64 * 1024))
    assert page.lines == lines[-len(page.lines) :]
    assert page.first == 2000 - len(page.lines) and page.next_cursor == page.first
    assert encoded_size(page) <= answer_budget(64 * 1024)


def test_read_cuts_a_line_longer_than_any_page() -> None:
    answer = api.ReadResult(agent_id="shepherd-agent-0000000000000000", lines=("z" * 200_000,))
    page = fit_answer(answer, answer_budget(64 * 1024))
    assert len(page.lines) == 1 and "200000 characters in all" in page.lines[0]


def _result(text: str) -> TaskResult:
    return TaskResult(
        task_id="shepherd-task-0000000000000000",
        agent_id="shepherd-agent-0000000000000000",
        status="completed",
        ok=True,
        return_code=0,
        completed_at=1.0,
        text=text,
        description="the task " * 5000,
    )


def test_a_preview_names_the_task_and_says_how_long_the_texts_were() -> None:
    shown = preview_result(_result("s" * 30_000))
    assert shown.description is None
    assert shown.text is not None and shown.text.endswith("[30000 characters in all]")
    assert len(shown.text) < PREVIEW_CHARS + 40


def test_results_are_whole_when_they_fit_and_previews_when_they_do_not() -> None:
    small = api.WaitResult(ids=("a",), completed=(_result("ok"),), pending=(), timed_out=False)
    assert fit_answer(small, 10**6) == small
    big = msgspec.structs.replace(small, completed=tuple(_result("s" * 30_000) for _ in range(8)))
    fitted = fit_answer(big, answer_budget(64 * 1024))
    assert encoded_size(fitted) <= answer_budget(64 * 1024)
    assert all(r.text and "characters in all" in r.text for r in fitted.completed)
