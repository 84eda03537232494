"""Watchdog events: event building, the ring buffer, episodes, logical calls."""

from __future__ import annotations

import msgspec
import pytest

from protocol.watchdog import (
    EventWindow,
    ToolEvent,
    WatchdogConfig,
    hash_output,
    is_instruction,
    make_event,
    pair_calls,
    since_last_instruction,
)

CONFIG = WatchdogConfig()


def ev(seq: int, kind: str = "tool_call", **fields: object) -> ToolEvent:
    base: dict[str, object] = {"agent_id": "a", "seq": seq, "ts": float(seq), "kind": kind}
    return msgspec.convert({**base, **fields}, type=ToolEvent)


# --- building events -----------------------------------------------------------------------


def test_make_event_normalises_and_never_keeps_the_whole_output() -> None:
    output = "\n".join(f"line {i} SECRET-{i}" for i in range(500))
    event = make_event(
        agent_id="a",
        seq=1,
        ts=2.0,
        kind="tool_result",
        tool="bash",
        command="  rg   foo \x1b[0m",
        output=output,
        exit_code=0,
        config=WatchdogConfig(max_preview_lines=5),
    )
    assert event.command == "rg foo"
    assert event.output_hash == hash_output(output)
    assert len(event.preview.split("\n")) <= 5
    encoded = msgspec.json.encode(event).decode()
    assert "SECRET-250" not in encoded  # the middle of the output is nowhere
    assert len(encoded) < 1000
    assert event.is_error is False


@pytest.mark.parametrize(
    ("kind", "exit_code", "is_error", "expected"),
    [
        ("tool_result", 0, None, False),
        ("tool_result", 2, None, True),
        ("tool_result", None, None, False),
        ("error", None, None, True),
        ("tool_result", 0, True, True),
    ],
)
def test_failure_comes_from_kind_exit_code_or_flag(
    kind: str, exit_code: int | None, is_error: bool | None, expected: bool
) -> None:
    event = make_event(
        agent_id="a",
        seq=0,
        ts=0.0,
        kind=kind,  # type: ignore[arg-type]
        tool="bash",
        output="x",
        exit_code=exit_code,
        is_error=is_error,
        config=CONFIG,
    )
    assert event.is_error is expected


def test_call_events_have_no_output_hash_and_messages_do() -> None:
    call = make_event(
        agent_id="a", seq=0, ts=0, kind="tool_call", tool="bash", command="ls", config=CONFIG
    )
    assert call.output_hash is None and call.command == "ls"
    msg = make_event(agent_id="a", seq=1, ts=1, kind="message", output="hello", config=CONFIG)
    assert msg.output_hash == hash_output("hello") and msg.command == "" and not msg.blank
    empty = make_event(agent_id="a", seq=2, ts=2, kind="message", output="  \n", config=CONFIG)
    assert empty.blank
    silent = make_event(agent_id="a", seq=3, ts=3, kind="message", config=CONFIG)
    assert silent.blank


def test_result_of_a_failed_typecheck_carries_its_error_signature() -> None:
    event = make_event(
        agent_id="a",
        seq=0,
        ts=0,
        kind="tool_result",
        tool="bash",
        command="mypy src",
        output="src/a.py:3: error: Name 'x' is not defined  [name-defined]",
        exit_code=1,
        config=CONFIG,
    )
    assert event.error_signature is not None
    assert "Name 'x' is not defined" in event.error_line


def test_structured_call_command_comes_from_args() -> None:
    event = make_event(
        agent_id="a",
        seq=0,
        ts=0,
        kind="tool_call",
        tool="read",
        args={"path": "a.py"},
        config=CONFIG,
    )
    assert event.command == "read a.py"


# --- instructions and episodes ---------------------------------------------------------------


def test_only_user_messages_are_instructions() -> None:
    assert is_instruction(ev(0, "message", source="user"))
    assert not is_instruction(ev(0, "message", source="agent"))
    assert not is_instruction(ev(0, "tool_call", source="user"))


def test_an_instruction_is_kept_without_a_hash() -> None:
    """No rule compares instructions (they open episodes), so none is normalised and hashed;
    the agent's own message of the same text is."""
    config = WatchdogConfig()
    text = "\x1b[31mfix the build\x1b[0m in /tmp/tmpab12cd34\n" * 50
    told = make_event(
        agent_id="a", seq=0, ts=0.0, kind="message", output=text, source="user", config=config
    )
    said = make_event(agent_id="a", seq=1, ts=0.0, kind="message", output=text, config=config)
    assert told.output_hash is None and said.output_hash is not None
    assert told.preview == said.preview and told.preview.startswith("fix the build")


def test_since_last_instruction() -> None:
    events = [ev(0), ev(1, "message", source="user"), ev(2), ev(3, "message"), ev(4)]
    assert [e.seq for e in since_last_instruction(events)] == [1, 2, 3, 4]
    assert [e.seq for e in since_last_instruction(events[2:])] == [2, 3, 4]
    assert since_last_instruction([]) == []


# --- the ring buffer -------------------------------------------------------------------------


def test_ring_buffer_is_bounded_and_drops_oldest_first() -> None:
    window = EventWindow("a", max_events=200)
    window.extend(ev(i) for i in range(250))
    assert len(window) == 200
    assert window.dropped == 50
    assert [e.seq for e in window.events()][:2] == [50, 51]
    assert window.events()[-1].seq == 249
    assert window.max_events == 200
    assert window.next_seq == 250


def test_ring_buffer_bound_comes_from_config() -> None:
    config = WatchdogConfig(max_events_per_agent=5)
    window = EventWindow("a", config.max_events_per_agent)
    window.extend(ev(i) for i in range(12))
    assert len(window) == 5


def test_ring_buffer_rejects_a_zero_bound() -> None:
    with pytest.raises(ValueError, match="max_events"):
        EventWindow("a", 0)


def test_window_episode_restarts_on_a_new_instruction() -> None:
    window = EventWindow("a", max_events=50)
    window.extend([ev(0), ev(1), ev(2)])
    assert window.started_at == 0.0
    assert [e.seq for e in window.episode()] == [0, 1, 2]
    window.append(ev(3, "message", source="user"))
    window.append(ev(4))
    assert [e.seq for e in window.episode()] == [3, 4]
    assert window.started_at == 3.0
    assert len(window.events()) == 5  # older events stay inspectable


def test_agent_messages_do_not_restart_the_episode() -> None:
    window = EventWindow("a")
    window.extend([ev(0), ev(1, "message", source="agent"), ev(2)])
    assert [e.seq for e in window.episode()] == [0, 1, 2]


def test_episode_survives_eviction_of_its_instruction() -> None:
    window = EventWindow("a", max_events=3)
    window.extend([ev(0), ev(1, "message", source="user"), ev(2), ev(3), ev(4)])
    assert [e.seq for e in window.episode()] == [2, 3, 4]
    window.append(ev(5, "message", source="user"))
    assert [e.seq for e in window.episode()] == [5]


# --- logical calls ---------------------------------------------------------------------------


def test_a_call_and_its_result_are_one_logical_call() -> None:
    calls = pair_calls(
        [
            ev(0, tool="bash", command="rg x"),
            ev(1, "tool_result", tool="bash", output_hash="h1", exit_code=0),
            ev(2, tool="bash", command="rg y"),
            ev(3, "tool_result", tool="bash", output_hash="h2", exit_code=0),
        ]
    )
    assert [(c.seq, c.result_seq, c.command, c.output_hash) for c in calls] == [
        (0, 1, "rg x", "h1"),
        (2, 3, "rg y", "h2"),
    ]
    assert not any(c.pending for c in calls)


def test_results_pair_fifo_by_tool_and_by_call_id() -> None:
    calls = pair_calls(
        [
            ev(0, tool="bash", command="one", call_id="c1"),
            ev(1, tool="read", command="read a", call_id="c2"),
            ev(2, tool="bash", command="two", call_id="c3"),
            ev(3, "tool_result", tool="bash", output_hash="h3", call_id="c3"),
            ev(4, "tool_result", tool="read", output_hash="h2", call_id="c2"),
            ev(5, "error", tool="bash", output_hash="h1", call_id="c1", is_error=True),
        ]
    )
    assert [(c.command, c.output_hash, c.is_error) for c in calls] == [
        ("one", "h1", True),
        ("read a", "h2", False),
        ("two", "h3", False),
    ]
    fifo = pair_calls(
        [
            ev(0, tool="bash", command="one"),
            ev(1, tool="bash", command="two"),
            ev(2, "tool_result", tool="bash", output_hash="first"),
            ev(3, "tool_result", tool="bash", output_hash="second"),
        ]
    )
    assert [(c.command, c.output_hash) for c in fifo] == [("one", "first"), ("two", "second")]


def test_orphan_results_and_pending_calls() -> None:
    calls = pair_calls(
        [
            ev(0, "tool_result", tool="bash", command="ls", output_hash="h"),
            ev(1, "message", source="agent"),
            ev(2, tool="bash", command="sleep 100"),
            ev(3, "tool_result", tool="read", output_hash="r"),  # no open read call
        ]
    )
    assert [(c.command, c.pending) for c in calls] == [
        ("ls", False),
        ("sleep 100", True),
        ("", False),
    ]
    assert calls[1].output_hash is None


def test_result_without_tool_name_closes_the_oldest_open_call() -> None:
    calls = pair_calls(
        [ev(0, tool="bash", command="a"), ev(1, "error", output_hash="e", is_error=True)]
    )
    assert len(calls) == 1
    assert calls[0].command == "a" and calls[0].is_error
