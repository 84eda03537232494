"""Many agents, one provider, with REAL Pi children against the scripted model server: a 429
with Retry-After starts the provider's cool-down, the other agent of the same provider starts
no turn until it ends, and both tasks then complete; a model server that keeps failing with
500 is retried with backoff and the task ends ``failed`` with ``provider_error``, never left
open. Nothing sleeps: the test waits on the session's own ``wait`` and the model's requests."""

from __future__ import annotations

import pytest

from actors.child.scripted_model import Fail, Text, ToolCall
from protocol.records.notifications import Notice

# ``team``: the live scenarios' fixture (a real supervisor whose agents are real Pi processes)
from .test_pi_live import Team, team  # noqa: F401

pytestmark = [pytest.mark.pi, pytest.mark.timeout(180)]

RATE_LIMIT = "Rate limit reached for fake-model on requests per min (RPM). Please try again in 2s."


def _notices(team: Team, code: str) -> list[Notice]:  # noqa: F811
    return [n for n in team.sink.items if isinstance(n, Notice) and n.code == code]


def test_a_rate_limit_holds_the_providers_agents_then_every_task_completes(team: Team) -> None:  # noqa: F811
    first = team.spawn_pi(
        "first",
        Fail(429, RATE_LIMIT, retry_after=2),
        ToolCall("shepherd_done", {"status": "completed", "summary": "first done"}),
        Text("ok"),
    )
    second = team.spawn_pi(
        "second",
        ToolCall("shepherd_done", {"status": "completed", "summary": "second done"}),
        Text("ok"),
    )
    s = team.session
    one = s.delegate("first", "Do the first thing").task_id
    first.wait_for_requests(1, timeout=60)
    assert team.sink.wait_for(lambda _: bool(_notices(team, "provider_cooldown")), timeout=60)
    (started,) = _notices(team, "provider_cooldown")
    assert started.refs == ("fake",) and "2 agent(s)" in started.text
    two = s.delegate("second", "Do the second thing").task_id  # held: the provider cools down
    waited = s.wait([one, two], timeout_s=120)
    assert not waited.timed_out
    assert {r.task_id: r.status for r in waited.completed} == {one: "completed", two: "completed"}
    (ended,) = _notices(team, "provider_cooldown_ended")
    # the second agent's model was asked nothing before the cool-down ended
    assert second.request_times[0] >= ended.created_at - 0.05
    assert len(_notices(team, "provider_cooldown")) == 1


def test_a_provider_that_keeps_failing_ends_the_task_with_provider_error(team: Team) -> None:  # noqa: F811
    failing = team.spawn_pi("worker", *([Fail(500, "Internal server error")] * 4), Text("never"))
    s = team.session
    task_id = s.delegate("worker", "Try").task_id
    waited = s.wait([task_id], timeout_s=150)
    assert not waited.timed_out
    (result,) = waited.completed
    assert (result.status, result.reason) == ("failed", "provider_error")
    assert result.error is not None and "fake" in result.error
    assert "Internal server error" in result.error and "retried 3 times" in result.error
    assert len(failing.requests) == 4  # the first call and its three retries, then no more
