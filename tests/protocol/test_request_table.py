"""The request table: pending requests always kept, closed ones bounded, wait-for edges counted
as requests open and close (protocol/records/request_table.py)."""

from __future__ import annotations

from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from protocol.records.request_table import RequestTable
from protocol.records.requests import RequestRecord, RequestState, resolve

AGENTS = ["a", "b", "c", "d"]


def ask(n: int, sender: str = "a", target: str = "b") -> RequestRecord:
    return RequestRecord(request_id=f"r{n}", sender_id=sender, target_id=target, created_at=n)


def close(record: RequestRecord, state: RequestState = RequestState.REPLIED) -> RequestRecord:
    closed, changed = resolve(record, state, 100.0)
    assert changed
    return closed


def test_closed_requests_beyond_the_bound_are_forgotten_oldest_first() -> None:
    table = RequestTable(closed_kept=2)
    records = [ask(n) for n in range(5)]
    for record in records:
        table.put(record)
    for record in records[:4]:
        table.put(close(record))
    assert list(table) == ["r2", "r3", "r4"]  # r4 pending; only the 2 newest closed remain
    assert table["r4"].pending and not table["r3"].pending
    assert "r0" not in table and table.get("r1") is None
    assert [r.request_id for r in table.pending()] == ["r4"]


def test_pending_requests_are_never_forgotten_however_many_close() -> None:
    table = RequestTable(closed_kept=0)
    table.put(ask(0))
    for n in range(1, 50):
        table.put(ask(n))
        table.put(close(table[f"r{n}"], RequestState.TIMED_OUT))
    assert list(table) == ["r0"]
    assert len(table) == 1


def test_wait_edges_count_parallel_requests_until_the_last_one_closes() -> None:
    table = RequestTable(closed_kept=10)
    first, second = ask(1, "a", "b"), ask(2, "a", "b")
    table.put(first)
    table.put(second)
    table.put(ask(3, "b", "c"))
    assert set(table.wait_edges()) == {("a", "b"), ("b", "c")}
    table.put(close(first))
    assert ("a", "b") in table.wait_edges()  # the second request still waits
    table.put(close(second, RequestState.CANCELLED))
    assert set(table.wait_edges()) == {("b", "c")}


def test_pending_is_a_copy_safe_to_close_while_iterating() -> None:
    table = RequestTable(closed_kept=10)
    for n in range(3):
        table.put(ask(n))
    for record in table.pending():
        table.put(close(record))
    assert table.pending() == [] and not list(table.wait_edges())


@settings(max_examples=300, deadline=None)
@given(
    kept=st.integers(min_value=0, max_value=5),
    steps=st.lists(
        st.tuples(
            st.sampled_from(["open", "close"]),
            st.sampled_from(AGENTS),
            st.sampled_from(AGENTS),
            st.integers(min_value=0, max_value=30),
        ),
        max_size=60,
    ),
)
def test_the_indexes_always_agree_with_the_records(
    kept: int, steps: list[tuple[str, str, str, int]]
) -> None:
    table = RequestTable(closed_kept=kept)
    model: dict[str, RequestRecord] = {}  # every request ever put, in its latest state
    for n, (op, sender, target, pick) in enumerate(steps):
        if op == "open":
            record = ask(n, sender, target)
            table.put(record)
            model[record.request_id] = record
        else:
            open_ids = [r for r, rec in model.items() if rec.pending]
            if not open_ids:
                continue
            closed = close(model[open_ids[pick % len(open_ids)]])
            table.put(closed)
            model[closed.request_id] = closed
        pending = [r for r in model.values() if r.pending]
        closed_ids = [r for r in model if not model[r].pending and r in table]
        assert [r.request_id for r in table.pending()] == [r.request_id for r in pending]
        assert all(table[r.request_id] == r for r in pending)
        assert len(closed_ids) == min(kept, sum(1 for r in model.values() if not r.pending))
        edges = Counter((r.sender_id, r.target_id) for r in pending)
        assert set(table.wait_edges()) == set(edges)
