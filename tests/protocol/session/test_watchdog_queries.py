"""protocol.session.watchdog_queries: only an agent spawned with role ``watchdog`` is answered;
each question takes exactly its arguments; an agent that is not in the session, a blank alert,
a query without a reply inbox are refused with typed errors and change nothing; the bounds are
the envelope's own; and nothing a watchdog agent can send steers, cancels or closes anyone."""

from __future__ import annotations

import typing
from typing import Any

import msgspec
import pytest

from protocol.calls import api
from protocol.core.errors import InvalidArgument, InvalidEnvelope
from protocol.core.ids import IdKind
from protocol.core.limits import MAX_WATCHDOG_ALERT_CHARS, MAX_WATCHDOG_EVENTS, answer_budget
from protocol.ops.spawn import SPAWN
from protocol.records.journal import AgentRecord
from protocol.session import agents, status
from protocol.session.effects import WatchdogAgent, WatchdogQuery
from protocol.wire.envelopes import QueryEnvelope, WatchdogQueryOp, decode_envelope, encode_envelope

from .harness import Session, answer, of, snapshot
from .test_restore import restart


def _spawn(s: Session, name: str, role: str = "worker") -> str:
    result = answer(s.call(api.SpawnArgs(name=name, role=role)))  # type: ignore[arg-type]
    return str(result.agent_id)


def _query(s: Session, sender: str, op: str, *, inbox: bool = True, **fields: Any) -> QueryEnvelope:
    message_id = s.ids.new(IdKind.MESSAGE)
    return s.envelope(
        QueryEnvelope,
        sender,
        message_id=message_id,
        reply_inbox=message_id if inbox else None,
        op=op,
        **fields,
    )


@pytest.fixture
def s() -> Session:
    return Session()


def test_the_role_is_recorded_with_the_agent_shown_in_status_and_told_the_watchdog(
    s: Session,
) -> None:
    effects = s.call(api.SpawnArgs(name="wd", role="watchdog"))
    (told,) = of(effects, WatchdogAgent)
    assert told.role == "watchdog"
    (record,) = [r for r in s.journal if isinstance(r, AgentRecord)]
    assert record.options["role"] == "watchdog"
    _spawn(s, "scout")
    rows = {a.name: a.role for a in status.view(s.state, None, s.now).agents}
    assert rows == {"wd": "watchdog", "scout": "worker"}


def test_a_restarted_parent_knows_the_role_and_still_answers_only_the_watchdog(
    s: Session,
) -> None:
    wd = _spawn(s, "wd", "watchdog")
    worker = _spawn(s, "worker")
    t, effects = restart(s)
    told = {e.agent_id: e.role for e in of(effects, WatchdogAgent)}
    assert told == {wd: "watchdog", worker: "worker"}
    (asked,) = t.send(_query(t, wd, "status"))
    assert isinstance(asked, WatchdogQuery)
    t.send_refused(_query(t, worker, "status"), "forbidden_sender")


def test_an_agent_recorded_before_roles_existed_is_a_worker(s: Session) -> None:
    agent_id = _spawn(s, "old")
    row = s.state.agents[agent_id]
    s.state.agents[agent_id] = msgspec.structs.replace(row, options={"adapter": "scripted"})
    assert s.state.agents[agent_id].role == "worker"
    assert agents.record_of(s.state.agents[agent_id]).options.get("role") is None


@pytest.mark.parametrize("role", ["boss", "", "WATCHDOG", "watchdog ", 1, None])
def test_spawn_refuses_any_other_role(role: object) -> None:
    with pytest.raises(InvalidArgument, match=r"role"):
        SPAWN.build({"name": "wd", "role": role})


def test_a_watchdog_agents_question_goes_to_the_watchdog_with_its_receipt(s: Session) -> None:
    wd = _spawn(s, "wd", "watchdog")
    scout = _spawn(s, "scout")
    before = snapshot(s.state, activity=False)
    env = _query(s, wd, "events", agent="scout", limit=5)
    effects = s.send(env)
    (asked,) = effects
    assert isinstance(asked, WatchdogQuery)
    assert (asked.asker_id, asked.asker_name, asked.op) == (wd, "wd", "events")
    assert (asked.agent_id, asked.limit, asked.text) == (scout, 5, None)  # the name resolved
    assert asked.inbox == env.message_id
    receipt = asked.receipt
    assert receipt.accepted and receipt.ack_for == env.message_id and receipt.target_id == wd
    assert receipt.capability == s.state.agents[wd].capability  # stamped for its reply inbox
    assert asked.budget == answer_budget(s.state.settings.max_envelope_bytes)
    assert snapshot(s.state, activity=False) == before  # a question changes nothing


@pytest.mark.parametrize(
    ("op", "fields"),
    [
        ("status", {}),
        ("events", {"agent": "scout"}),
        ("stuck", {}),
        ("alert", {"agent": "scout", "text": "scout loops"}),
    ],
)
def test_a_worker_is_refused_whatever_it_asks(s: Session, op: str, fields: dict[str, Any]) -> None:
    worker = _spawn(s, "worker")
    _spawn(s, "scout")
    ack = s.send_refused(_query(s, worker, op, **fields), "forbidden_sender")
    assert ack.error is not None
    assert "worker is a worker agent" in ack.error.message
    assert "role watchdog" in ack.error.message


@pytest.mark.parametrize(
    ("op", "fields", "code", "says"),
    [
        ("events", {}, "invalid_argument", "name the agent"),
        ("alert", {"text": "x"}, "invalid_argument", "name the agent"),
        ("status", {"agent": "scout"}, "invalid_argument", "takes no agent"),
        ("stuck", {"limit": 3}, "invalid_argument", "takes no limit"),
        ("events", {"agent": "scout", "text": "x"}, "invalid_argument", "takes no text"),
        ("alert", {"agent": "scout"}, "invalid_argument", "text is empty"),
        ("alert", {"agent": "scout", "text": " \n\t "}, "invalid_argument", "text is empty"),
        ("events", {"agent": "nobody"}, "invalid_handle", "no agent 'nobody'"),
        ("stuck", {"agent": "shepherd-task-00000abc"}, "invalid_handle", "not an agent"),
        ("alert", {"agent": "nobody", "text": "x"}, "invalid_handle", "no agent"),
    ],
)
def test_a_question_that_does_not_fit_is_refused_and_changes_nothing(
    s: Session, op: str, fields: dict[str, Any], code: str, says: str
) -> None:
    wd = _spawn(s, "wd", "watchdog")
    _spawn(s, "scout")
    ack = s.send_refused(_query(s, wd, op, **fields), code)
    assert ack.error is not None and says in ack.error.message, ack.error


def test_a_question_without_a_reply_inbox_is_refused(s: Session) -> None:
    wd = _spawn(s, "wd", "watchdog")
    ack = s.send_refused(_query(s, wd, "status", inbox=False), "invalid_argument")
    assert ack.error is not None and "one-shot inbox" in ack.error.message


def test_a_closed_agents_history_is_still_readable(s: Session) -> None:
    wd = _spawn(s, "wd", "watchdog")
    scout = _spawn(s, "scout")
    s.call(api.CloseArgs(agent="scout"))
    (asked,) = s.send(_query(s, wd, "stuck", agent=scout))
    assert isinstance(asked, WatchdogQuery) and asked.agent_id == scout


# --- the envelope's own bounds: out of them, it does not decode (quarantined and told)


def _raw(op: str, **fields: Any) -> bytes:
    env = QueryEnvelope(
        message_id="shepherd-message-00000001",
        session_id="shepherd-session-00000000",
        sender_id="shepherd-agent-00000002",
        target_id="shepherd",
        created_at=1.0,
        op="status",
    )
    data = msgspec.json.decode(encode_envelope(env))
    return msgspec.json.encode({**data, "op": op, **fields})


@pytest.mark.parametrize(
    "fields",
    [
        {"limit": 0},
        {"limit": -1},
        {"limit": MAX_WATCHDOG_EVENTS + 1},
        {"limit": 10**18},
        {"limit": 2.5},
        {"limit": "5"},
        {"text": ""},
        {"text": "x" * (MAX_WATCHDOG_ALERT_CHARS + 1)},
        {"agent": ""},
        {"agent": "a" * 201},
        {"surprise": True},
    ],
)
def test_out_of_bounds_values_do_not_decode(fields: dict[str, Any]) -> None:
    with pytest.raises(InvalidEnvelope):
        decode_envelope(_raw("events", **fields))


def test_the_bounds_themselves_decode() -> None:
    ok = decode_envelope(
        _raw("alert", agent="scout", limit=MAX_WATCHDOG_EVENTS, text="x" * MAX_WATCHDOG_ALERT_CHARS)
    )
    assert isinstance(ok, QueryEnvelope) and ok.limit == MAX_WATCHDOG_EVENTS


@pytest.mark.parametrize("op", ["steer", "cancel", "close", "message", "set", "pause", "config"])
def test_no_question_acts_on_anyone(op: str) -> None:
    """Read-only by construction: the only questions are the four, none of which acts."""
    assert set(typing.get_args(WatchdogQueryOp)) == {"status", "events", "stuck", "alert"}
    with pytest.raises(InvalidEnvelope):
        decode_envelope(_raw(op, agent="scout"))
