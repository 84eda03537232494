"""protocol.records.requests: a request is pending, then ends exactly once."""

from __future__ import annotations

import itertools

import msgspec
import pytest

from protocol.core.errors import InvalidTransition
from protocol.records.requests import REQUEST_TRANSITIONS, RequestRecord, RequestState, resolve

RS = RequestState
TERMINAL = [RS.REPLIED, RS.CANCELLED, RS.TIMED_OUT]
REQ = "shepherd-message-0000abcd"
REPLY = "shepherd-message-0000beef"


def pending() -> RequestRecord:
    return RequestRecord(
        request_id=REQ,
        sender_id="shepherd-agent-0000aaaa",
        target_id="shepherd-agent-0000bbbb",
        created_at=1.0,
        question="which file?",
        task_id="shepherd-task-0000cccc",
        deadline_at=60.0,
    )


def test_table() -> None:
    expected = {
        RS.PENDING: frozenset(TERMINAL),
        RS.REPLIED: frozenset(),
        RS.CANCELLED: frozenset(),
        RS.TIMED_OUT: frozenset(),
    }
    assert expected == REQUEST_TRANSITIONS


def test_new_request_is_pending() -> None:
    rec = pending()
    assert rec.state is RS.PENDING
    assert rec.pending
    assert rec.resolved_at is None
    assert rec.reply_id is None


@pytest.mark.parametrize("target", TERMINAL)
def test_pending_to_each_terminal_state(target: RequestState) -> None:
    before = pending()
    reply_id = REPLY if target is RS.REPLIED else None
    after, changed = resolve(before, target, 5.0, reply_id=reply_id)
    assert changed
    assert after.state is target
    assert not after.pending
    assert after.resolved_at == 5.0
    assert after.reply_id == reply_id
    # everything else is kept, and the old record is untouched
    assert msgspec.structs.replace(after, state=RS.PENDING, resolved_at=None, reply_id=None) == (
        before
    )
    assert before.state is RS.PENDING


@pytest.mark.parametrize(("first", "second"), list(itertools.product(TERMINAL, TERMINAL)))
def test_terminal_request_never_moves_again(first: RequestState, second: RequestState) -> None:
    done, _ = resolve(pending(), first, 5.0, reply_id=REPLY)
    again, changed = resolve(done, second, 9.0, reply_id="shepherd-message-0000ffff")
    assert again is done
    assert not changed
    assert again.state is first
    assert again.resolved_at == 5.0
    assert again.reply_id == REPLY


@pytest.mark.parametrize("state", list(RequestState))
def test_moving_back_to_pending_is_invalid(state: RequestState) -> None:
    rec = msgspec.structs.replace(pending(), state=state)
    with pytest.raises(InvalidTransition) as info:
        resolve(rec, RS.PENDING, 5.0)
    assert info.value.code == "invalid_transition"
    assert REQ in info.value.message
