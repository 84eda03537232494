"""Acceptance checks over MCP (the MCP SDK's client against ``python -m
actors.surfaces.mcp_server``) and the Python API (``Session.delegate(..., verify=...)``): a
check that fails then passes, one that fails every attempt (a ``delegate_many`` item's own
check), a program that does not exist, and every hostile value of the three new fields
refused naming the field, with no task started."""

from __future__ import annotations

import json
import sys

import anyio
import pytest

from protocol.core.errors import InvalidArgument
from protocol.records.notifications import Notice

from .conftest import Running
from .test_mcp_server import DEADLINE_S, _server_log, call, call_error, mcp_session

pytestmark = pytest.mark.processes

#: claims completed; after a notice (its check failed), makes the file and claims again
FIXER = {
    "steps": [
        {"await": "task"},
        {"done": {"status": "completed", "summary": "first claim"}},
        {"await": "any"},
        {"run": "touch fixed"},
        {"done": {"status": "completed", "summary": "fixed"}},
        {"await": "any"},
    ]
}

HOSTILE = {
    "verify": ("", "   ", "x" * 70_000, None, 5, True),
    "verify_attempts": (0, 11, -1, 1.5, "2", None, float("nan")),
    "verify_timeout_s": (0, -1, 1e9, float("nan"), float("inf"), "10", None),
}


def _agents(running: Running, *names: str) -> None:
    for name in names:
        work = running.root / f"work-{name}"
        work.mkdir()
        (running.root / f"{name}.json").write_text(json.dumps(FIXER))


def test_checks_over_mcp_fail_then_pass_fail_every_attempt_and_refuse_hostile_values(
    running: Running,
) -> None:
    _agents(running, "fixer", "stuck", "idle")

    async def scenario() -> None:
        with anyio.fail_after(DEADLINE_S * 2):
            async with mcp_session(running.root, running.supervisor.session_dir) as session:
                for name in ("fixer", "stuck", "idle"):
                    spawned = {"name": name, "script": f"{name}.json", "cwd": f"work-{name}"}
                    await call(session, "shepherd_spawn", spawned)
                for field, values in HOSTILE.items():
                    for bad in values:
                        args = {"target": "idle", "task": "x", "verify": "true", field: bad}
                        err = await call_error(session, "shepherd_delegate", args)
                        assert err["code"] == "invalid_argument", (field, bad, err)
                        assert field in err["message"], (field, bad, err)
                status = await call(session, "shepherd_status", {})
                assert [a["task"] for a in status["agents"]] == [None, None, None]

                check = "test -f fixed || { echo no fixed here; exit 4; }"
                fixer = await call(
                    session,
                    "shepherd_delegate",
                    {"target": "fixer", "task": "fix", "verify": check, "verify_timeout_s": 30},
                )
                many = await call(
                    session,
                    "shepherd_delegate_many",
                    {
                        "items": [
                            {"target": "stuck", "task": "t", "verify": "exit 9"},
                            {"target": "idle", "task": "t", "verify_attempts": 1},
                        ],
                        "verify": "no-such-program-x1",
                    },
                )
                stuck, idle = many["task_ids"]
                ids = [fixer["task_id"], stuck, idle]
                # settled: the session's own wait (in this process), then MCP's watch answers
                # with the results at once
                waited = await anyio.to_thread.run_sync(
                    lambda: running.supervisor.session.wait(ids, timeout_s=DEADLINE_S)
                )
                assert not waited.timed_out, waited
                watched = await call(session, "shepherd_watch", {"ids": ids})
                results = {r["task_id"]: r for r in watched["completed"]}
                assert set(results) == set(ids)

                passed = results[fixer["task_id"]]
                assert (passed["status"], passed["text"]) == ("completed", "fixed")
                assert passed["evidence"]["attempt"] == 2
                assert passed["evidence"]["exit_status"] == 0

                failed = results[stuck]
                assert (failed["status"], failed["reason"]) == ("failed", "verification_failed")
                assert failed["evidence"]["exit_status"] == 9
                assert "attempt 2 of 2" in failed["error"]

                missing = results[idle]
                assert missing["reason"] == "verification_failed"
                assert missing["evidence"]["exit_status"] == 127
                assert "attempt 1 of 1" in missing["error"]

    try:
        anyio.run(scenario)
    except BaseException:
        print(_server_log(running.root), file=sys.stderr)
        raise
    told = [
        n for n in running.sink.items if isinstance(n, Notice) and n.code == "verification_failed"
    ]
    # the fixer's first attempt and the stuck agent's first (the last ones fail the tasks)
    assert len(told) == 2 and all("1 left" in n.text for n in told), told


def test_the_python_api_takes_a_check_and_refuses_hostile_ones(running: Running) -> None:
    _agents(running, "fixer")
    session = running.supervisor.session
    session.spawn(
        "fixer", script=str(running.root / "fixer.json"), cwd=str(running.root / "work-fixer")
    )
    for bad in ({"verify": ""}, {"verify": "true", "verify_attempts": 0}):
        with pytest.raises(InvalidArgument, match="verify"):
            session.delegate("fixer", "x", **bad)
    task = session.delegate("fixer", "fix", verify="test -f fixed", verify_attempts=2)
    waited = session.wait([task.task_id], timeout_s=DEADLINE_S)
    (result,) = waited.completed
    assert result.status == "completed" and result.evidence is not None
    assert result.evidence.attempt == 2 and result.evidence.command == "test -f fixed"
