"""The board over raw HTTP: the token, the lanes, the live stream, the actions and hostile
input, against a live session with scripted agents."""

from __future__ import annotations

import json
import shlex
import socket
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest

from actors.records.session_info import load_info
from actors.surfaces.listening import check_listen
from actors.surfaces.web import MAX_WEB_REQUEST_BYTES, lane_of
from protocol.core.errors import InvalidArgument
from protocol.core.ids import PARENT_ID
from protocol.core.tracecontext import task_trace_id
from tests.processes.test_approvals import ASKING_AGENT
from tests.web.conftest import SCRIPTS, Team

pytestmark = pytest.mark.timeout(180)

#: a ceiling for one wait, not a pace
WAIT_S = 60.0


def _events(team: Team, **filters: str) -> Iterator[dict[str, Any]]:
    """The notifications of the board's stream, as they come (its other events skipped)."""
    with (
        httpx.Client(timeout=httpx.Timeout(WAIT_S)) as http,
        http.stream(
            "GET", team.web.url + "api/events", headers=team.web.headers(), params=filters
        ) as stream,
    ):
        assert stream.status_code == 200
        assert stream.headers["content-type"].startswith("text/event-stream")
        buffer = b""
        for chunk in stream.iter_raw():  # each event as soon as it comes, not a line late
            buffer += chunk
            *frames, buffer = buffer.split(b"\n\n")
            for frame in frames:
                lines = frame.decode().splitlines()
                if "event: notification" in lines:
                    yield from (json.loads(x[6:]) for x in lines if x.startswith("data: "))
                elif any(x.startswith(": following") for x in lines):
                    yield {"kind": "_following"}
                elif any(x.startswith(": keep-alive") for x in lines):
                    yield {"kind": "_keepalive"}  # lets the reader look at its deadline


def _until(
    events: Iterator[dict[str, Any]], ok: Callable[[dict[str, Any]], bool]
) -> dict[str, Any]:
    deadline = time.monotonic() + WAIT_S
    seen = []
    for note in events:
        if note["kind"] != "_keepalive":
            seen.append(note)
            if ok(note):
                return note
        assert time.monotonic() < deadline, f"no such notification in {seen}"
    raise AssertionError(f"the stream ended; seen {seen}")


def _act(team: Team, op: str, fields: Any, **kw: Any) -> httpx.Response:
    return httpx.post(
        team.web.url + f"api/op/{op}",
        json=fields,
        headers=team.web.headers(),
        timeout=WAIT_S,
        **kw,
    )


def _rows(team: Team) -> dict[str, dict[str, Any]]:
    answer = httpx.get(team.web.url + "api/status", headers=team.web.headers(), timeout=WAIT_S)
    assert answer.status_code == 200, answer.text
    return {row["name"]: row for row in answer.json()["agents"]}


def test_every_request_needs_the_token(team: Team) -> None:
    url = team.web.url
    for path in ("", "api/status", "api/events", "api/task/x"):
        answer = httpx.get(url + path, timeout=WAIT_S)
        assert answer.status_code == 401, path
        assert answer.json()["error"]["code"] == "unauthorized"
    wrong = httpx.get(url + "api/status", headers={"X-Shepherd-Token": "nope"}, timeout=WAIT_S)
    assert wrong.status_code == 401
    # the page with the token sets the cookie; the cookie reads but never acts (CSRF)
    with httpx.Client(timeout=WAIT_S) as browser:
        page = browser.get(url, params={"token": team.web.token})
        assert page.status_code == 200
        assert "<title>Shepherd board</title>" in page.text
        assert "http://" not in page.text.replace(url, "")  # nothing from the network
        assert browser.get(url + "api/status").status_code == 200
        refused = browser.post(url + "api/op/close", json={"agent": "idle"})
        assert refused.status_code == 401
    assert "idle" in _rows(team)  # the refused close did nothing
    assert _rows(team)["idle"]["lane"] != "exited"


def test_a_card_moves_lanes_live_and_a_question_is_answered(team: Team) -> None:
    events = _events(team)
    _until(events, lambda n: n["kind"] == "_following")
    answer = _act(team, "delegate", {"target": "asker", "task": "pick a branch"})
    assert answer.status_code == 200, answer.text
    task_id = answer.json()["answer"]["task_id"]
    asked = _until(events, lambda n: "which branch?" in json.dumps(n))
    row = _rows(team)["asker"]
    assert row["lane"] == "needs_parent", row
    (request,) = row["task"]["pending_requests"]
    request_id = request.get("request_id") or request.get("message_id") or request.get("id")
    assert request_id, (request, asked)
    replied = _act(team, "message", {"target": "asker", "message": "main", "reply_to": request_id})
    assert replied.status_code == 200, replied.text
    _until(events, lambda n: task_id in json.dumps(n) and "went with main" in json.dumps(n))
    assert _rows(team)["asker"]["lane"] == "idle"
    shown = httpx.get(
        team.web.url + f"api/task/{task_id}", headers=team.web.headers(), timeout=WAIT_S
    )
    assert shown.status_code == 200
    page = shown.json()
    assert page["result"]["status"] == "completed"
    # the task's page: its text, its note's log, the notifications about it, its trace
    assert page["description"] == "pick a branch"
    assert page["state"] == "completed"
    assert any("which branch?" in line for line in page["note"]["log"])
    kinds = {n["kind"] for n in page["history"]["notifications"]}
    assert {"agent_message", "task_completion"} <= kinds, kinds
    assert page["trace"] == {
        "trace_id": task_trace_id(load_info(team.session_dir).session_id, task_id),
        "exported": load_info(team.session_dir).traced,
        "attribute": "shepherd.task.id",
        "value": task_id,
    }
    # the history: the question, and the parent's reply to it, in the task's note
    assert any("which branch?" in line for line in page["note"]["log"])
    assert any("replied" in line and line.endswith(": main") for line in page["note"]["log"])


def test_cancel_and_close_from_the_board(team: Team) -> None:
    answer = _act(team, "delegate", {"target": "idle", "task": "wait forever"})
    assert answer.status_code == 200, answer.text
    task_id = answer.json()["answer"]["task_id"]
    assert _rows(team)["idle"]["lane"] == "working"
    cancelled = _act(team, "cancel", {"task_id": task_id, "reason": "from the board"})
    assert cancelled.status_code == 200, cancelled.text
    assert _rows(team)["idle"]["lane"] == "idle"
    shown = httpx.get(
        team.web.url + f"api/task/{task_id}", headers=team.web.headers(), timeout=WAIT_S
    )
    assert shown.json()["result"]["status"] == "cancelled", shown.text
    closed = _act(team, "close", {"agent": "worker"})
    assert closed.status_code == 200, closed.text
    assert _rows(team).get("worker", {"lane": "exited"})["lane"] == "exited"


@pytest.mark.parametrize(
    ("op", "body", "status", "code"),
    [
        ("cancel", {"task_id": "t-no-such-task"}, 404, "invalid_handle"),
        ("approve", {"request_id": "r-nope"}, 404, "invalid_handle"),
        ("cancel", {"task_id": 12}, 400, "invalid_argument"),
        ("delegate", {"target": "worker", "task": "x" * 10_000_000}, 413, "limit_exceeded"),
        ("delegate", {"target": "worker"}, 400, "invalid_argument"),
        ("shutdown", {}, 400, "invalid_argument"),
        ("spawn", {"name": "evil", "adapter": "command"}, 400, "invalid_argument"),
        ("cancel", [1, 2], 400, "invalid_argument"),
        ("cancel", {"task_id": "a" * 100_000}, 400, "invalid_argument"),
    ],
)
def test_hostile_actions_get_typed_errors(
    team: Team, op: str, body: Any, status: int, code: str
) -> None:
    answer = _act(team, op, body)
    assert answer.status_code == status, answer.text
    assert answer.json()["error"]["code"] == code


@pytest.mark.parametrize(
    ("content", "content_type", "code"),
    [
        (b"{not json", "application/json", "invalid_argument"),
        (b"[" * 10_000 + b"]" * 10_000, "application/json", "invalid_argument"),
        (b"task_id=x", "application/x-www-form-urlencoded", "invalid_argument"),
        (b"\xff\xfe", "application/json", "invalid_argument"),
    ],
)
def test_malformed_raw_bodies_get_typed_errors(
    team: Team, content: bytes, content_type: str, code: str
) -> None:
    answer = httpx.post(
        team.web.url + "api/op/cancel",
        content=content,
        headers={**team.web.headers(), "content-type": content_type},
        timeout=WAIT_S,
    )
    assert answer.status_code == 400, answer.text
    assert answer.json()["error"]["code"] == code


def test_a_body_declared_too_large_is_refused_unread(team: Team) -> None:
    """A raw request that says its body is too large, and sends none of it: answered at once."""
    host, port = urlsplit(team.web.url).hostname, urlsplit(team.web.url).port
    assert host is not None and port is not None
    with socket.create_connection((host, port), timeout=WAIT_S) as sock:
        sock.sendall(
            (
                "POST /api/op/cancel HTTP/1.1\r\n"
                f"Host: {host}\r\nX-Shepherd-Token: {team.web.token}\r\n"
                "Content-Type: application/json\r\n"
                f"Content-Length: {MAX_WEB_REQUEST_BYTES + 1}\r\nConnection: close\r\n\r\n"
            ).encode()
        )
        answer = b""
        while b"\r\n\r\n" not in answer or not answer.rstrip().endswith(b"}"):
            chunk = sock.recv(65536)
            if not chunk:
                break
            answer += chunk
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 413"), answer
    assert json.loads(body)["error"]["code"] == "limit_exceeded"


def test_bad_reads_get_typed_errors(team: Team) -> None:
    h = team.web.headers()
    bad = httpx.get(team.web.url + "api/status?cursor=-1", headers=h, timeout=WAIT_S)
    assert (bad.status_code, bad.json()["error"]["code"]) == (400, "invalid_argument")
    huge = httpx.get(team.web.url + "api/events?kind=" + "k" * 5000, headers=h, timeout=WAIT_S)
    assert (huge.status_code, huge.json()["error"]["code"]) == (400, "invalid_argument")
    gone = httpx.get(team.web.url + "no/such/page", headers=h, timeout=WAIT_S)
    assert gone.status_code == 404
    for task_id in ("t-unknown", "shepherd-task-0000000000000000", "shepherd-task-zz", "x" * 5000):
        unknown = httpx.get(team.web.url + f"api/task/{task_id}", headers=h, timeout=WAIT_S)
        assert (unknown.status_code, unknown.json()["error"]["code"]) == (404, "invalid_handle")
    around = httpx.get(team.web.url + "api/task/..%2F..%2Fsession.json", headers=h, timeout=WAIT_S)
    assert around.status_code == 404


def test_lanes_of_status_rows() -> None:
    assert lane_of({"closed": True}) == "exited"
    assert lane_of({"state": "exited"}) == "exited"
    assert lane_of({"state": "idle"}) == "idle"
    to_parent = {"kind": "approval", "target_id": PARENT_ID, "state": "pending"}
    asking = {"task_id": "t", "state": "waiting", "pending_requests": [to_parent]}
    assert lane_of({"task": asking}) == "needs_parent"
    answered = {**asking, "pending_requests": [{**to_parent, "state": "approved"}]}
    assert lane_of({"task": answered}) == "waiting_peer"
    peer = {"task_id": "t", "state": "waiting", "pending_requests": [{"target_id": "a-planner"}]}
    assert lane_of({"task": peer}) == "waiting_peer"
    assert lane_of({"task": {"task_id": "t", "state": "running"}}) == "working"
    assert lane_of({"task": {"task_id": "t", "state": "queued"}}) == "queued"  # not handed over
    assert lane_of({"task": {"task_id": "t", "state": "verifying"}}) == "working"  # its check


def test_listen_is_loopback_unless_allowed() -> None:
    assert check_listen("127.0.0.1:0", allow_remote=False) == ("127.0.0.1", 0)
    assert check_listen("[::1]:8080", allow_remote=False) == ("::1", 8080)
    with pytest.raises(InvalidArgument, match="loopback"):
        check_listen("0.0.0.0:8080", allow_remote=False)
    assert check_listen("0.0.0.0:8080", allow_remote=True) == ("0.0.0.0", 8080)
    with pytest.raises(InvalidArgument, match="HOST:PORT"):
        check_listen("nonsense", allow_remote=False)


def _asked_for_approval(task_id: str) -> Callable[[dict[str, Any]], bool]:
    return lambda n: n.get("code") == "approval_requested" and task_id in n.get("text", "")


def _completed(task_id: str) -> Callable[[dict[str, Any]], bool]:
    return lambda n: n["kind"] == "task_completion" and task_id in n["ids"]


def test_approve_one_and_deny_another_from_the_board(team: Team, tmp_path: Path) -> None:
    agent = tmp_path / "asking_agent.py"
    agent.write_text(ASKING_AGENT)
    cmd = f"{shlex.quote(sys.executable)} {shlex.quote(str(agent))} {{message}}"
    team.cli("spawn", "builder", "--adapter", "command", "--cmd", cmd)
    events = _events(team)
    _until(events, lambda n: n["kind"] == "_following")
    outcomes = {}
    for text, op, fields in (
        ("release 1.2", "approve", {"note": "tag first"}),
        ("release 1.3", "deny", {"reason": "not on a Friday"}),
    ):
        answer = _act(team, "delegate", {"target": "builder", "task": text})
        assert answer.status_code == 200, answer.text
        task_id = answer.json()["answer"]["task_id"]
        _until(events, _asked_for_approval(task_id))
        row = _rows(team)["builder"]
        assert row["lane"] == "needs_parent", row
        (pending,) = row["task"]["pending_requests"]
        assert pending["kind"] == "approval"
        decided = _act(team, op, {"request_id": pending["request_id"], **fields})
        assert decided.status_code == 200, decided.text
        again = _act(team, op, {"request_id": pending["request_id"], **fields})
        assert (again.status_code, again.json()["error"]["code"]) == (400, "invalid_transition")
        _until(events, _completed(task_id))
        shown = httpx.get(
            team.web.url + f"api/task/{task_id}", headers=team.web.headers(), timeout=WAIT_S
        )
        outcomes[op] = shown.json()["result"]
    assert outcomes["approve"]["status"] == "completed"
    assert "pushed: tag first" in json.dumps(outcomes["approve"])
    assert outcomes["deny"]["status"] == "blocked"
    assert "denied: not on a Friday" in json.dumps(outcomes["deny"])


def _notifications(team: Team, **query: str) -> httpx.Response:
    return httpx.get(
        team.web.url + "api/notifications", params=query, headers=team.web.headers(), timeout=WAIT_S
    )


def test_notifications_filtered_by_agent_task_and_kind(team: Team) -> None:
    completions = _events(team, kind="task_completion")
    _until(completions, lambda n: n["kind"] == "_following")
    asked = _act(team, "delegate", {"target": "asker", "task": "pick a branch"}).json()
    done = _act(team, "delegate", {"target": "worker", "task": "build"}).json()
    done_id = done["answer"]["task_id"]
    # the stream filtered on a kind: the worker's completion, and nothing else before it
    first = _until(completions, lambda n: True)
    assert first["kind"] == "task_completion" and done_id in first["ids"], first
    by_kind = _notifications(team, kind="task_completion").json()["notifications"]
    assert by_kind and {n["kind"] for n in by_kind} == {"task_completion"}
    by_task = _notifications(team, task=done_id).json()["notifications"]
    assert by_task and all(done_id in json.dumps(n) for n in by_task)
    asker_id = _rows(team)["asker"]["agent_id"]
    assert asked["answer"]["task_id"]
    by_agent = _notifications(team, agent="asker").json()["notifications"]
    assert by_agent and all(asker_id in json.dumps(n) for n in by_agent), by_agent
    assert _notifications(team, agent="asker", kind="task_completion").json()["notifications"] == []
    assert len(_notifications(team, limit="1").json()["notifications"]) == 1


@pytest.mark.parametrize(
    "query",
    [
        {"agent": "no such agent!"},
        {"task": "shepherd-agent-0123456789abcdef"},
        {"kind": "<script>"},
        {"kind": "k" * 5000},
        {"limit": "999999"},
        {"limit": "-1"},
        {"before": "1e9"},
        {"sort": "up"},
    ],
)
def test_bad_notification_filters_get_typed_errors(team: Team, query: dict[str, str]) -> None:
    answer = _notifications(team, **query)
    assert (answer.status_code, answer.json()["error"]["code"]) == (400, "invalid_argument")
    stream = httpx.get(
        team.web.url + "api/events", params=query, headers=team.web.headers(), timeout=WAIT_S
    )
    assert (stream.status_code, stream.json()["error"]["code"]) == (400, "invalid_argument")


def test_board_pages_are_checked(team: Team) -> None:
    h = team.web.headers()
    page = httpx.get(team.web.url + "api/board", headers=h, timeout=WAIT_S).json()
    assert sum(page["counts"].values()) == page["summary"]["agents"] == len(SCRIPTS)
    for query in ("working=-1", "working=x", "nowhere=0", "inbox=1" + "0" * 20):
        bad = httpx.get(team.web.url + "api/board?" + query, headers=h, timeout=WAIT_S)
        assert (bad.status_code, bad.json()["error"]["code"]) == (400, "invalid_argument"), query
    far = httpx.get(team.web.url + "api/board?idle=5000", headers=h, timeout=WAIT_S).json()
    assert far["lanes"]["idle"]["cards"] == [] and far["counts"] == page["counts"]
