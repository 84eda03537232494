"""Budgets with a REAL Pi child: the scripted model server reports usage on every answer, Pi's
assistant messages carry it, the bridge reports it, and a task that goes over its token limit
is ended ``failed`` with reason ``budget_exceeded`` while its run is still going (the run is
aborted, as for a cancel). Nothing sleeps: the test waits on the story, the parent's runtime
events and the model's recorded requests."""

from __future__ import annotations

import threading

import pytest

from actors.child.scripted_model import Gate, Text, ToolCall
from protocol.records.notifications import Notice
from protocol.records.tasks import TaskState

# ``team``: the live scenarios' fixture (a real supervisor whose agents are real Pi processes)
from .test_pi_live import Team, completions, team, text_has  # noqa: F401

pytestmark = [pytest.mark.pi, pytest.mark.timeout(90)]


def test_a_pi_task_over_its_token_limit_is_ended_and_its_run_aborted(team: Team) -> None:  # noqa: F811
    never = threading.Event()  # the fourth answer is never given: the run must be stopped
    # each tool-call answer is reported as 21 tokens (10 prompt + 11 completion)
    step = ToolCall("bash", {"command": "echo step"})
    model = team.spawn_pi("worker", step, step, step, Gate(never, then=Text("late")))
    s = team.session
    task = s.delegate("worker", "Run the steps", max_tokens=50)
    assert task.budget is not None and task.budget.max_tokens == 50
    s.watch(task.task_id)

    team.story.wait("worker: budget_exceeded: the task used 63 tokens, over its max_tokens of 50")
    # the run is stopped as a cancel stops it
    team.events.wait("worker", "output", where=text_has("aborting the running turn"))
    team.events.wait("worker", "turn_end")
    result = s.result(task.task_id)
    assert result is not None and result.status == "failed" and result.reason == "budget_exceeded"
    assert result.usage is not None and result.usage.tokens == 63 and result.usage.turns == 1
    # the soft warning came first, once (42 of 50 is past 80%)
    soft = [n for n in team.sink.items if isinstance(n, Notice) and n.code == "budget_soft_limit"]
    assert len(soft) == 1 and soft[0].task_id == task.task_id
    # stopped before its fourth answer (the abort may come before or while it is asked for)
    assert len(model.requests) in (3, 4)
    status = s.status("worker").agents[0]
    assert status.task is not None and status.task.state is TaskState.FAILED
    assert status.usage is not None and status.usage.tokens == 63
    team.story.wait("worker: process idle")
    done = [r for r in completions(team.sink) if r.task_id == task.task_id]
    assert len(done) <= 1 and all(r.status == "failed" for r in done)
