"""protocol.scripted.script: parsing scripts (JSON and TOML) and the sans-IO ScriptMachine."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol.core.errors import InvalidArgument
from protocol.scripted.script import Script, ScriptError, load_script_text, parse_script
from protocol.scripted.script_machine import (
    Delivered,
    Effect,
    Exit,
    Output,
    RunCommand,
    ScriptMachine,
    SendDone,
    SendMessage,
    SendReply,
    Sleep,
    TurnEnd,
    TurnStart,
)

TASK = "shepherd-task-0000aaaa"
PARENT = "shepherd"
PEER = "shepherd-agent-0000bbbb"

ALL_STEPS: list[dict[str, Any]] = [
    {"await": "task"},
    {"await": "message"},
    {"await": "reply"},
    {"await": "any"},
    {"say": "hello {last}"},
    {"run": "pytest -q"},
    {"message": {"to": "planner", "text": "which file?"}},
    {"message": {"to": PEER, "text": "now!", "expects_reply": True, "steer": True}},
    {"reply": {"text": "src/app.py"}},
    {"done": {"status": "completed"}},
    {"done": {"status": "blocked", "summary": "need {last}", "cancel_requests": True}},
    {"done": {"status": "failed"}},
    {"sleep": 1.5},
    {"sleep": 0},
    {"sleep": 86_400},
    {"exit": 3},
    {"repeat": {"times": 2, "steps": [{"run": "ls"}, {"say": "again"}]}},
]

TOML_SCRIPT = """
[[steps]]
await = "task"

[[steps]]
say = "got {last}"

[[steps]]
run = "make test"

[[steps]]
message = { to = "planner", text = "ok?", expects_reply = true }

[[steps]]
await = "reply"

[[steps]]
reply = { text = "thanks" }

[[steps]]
sleep = 0.25

[[steps]]
repeat = { times = 3, steps = [ { run = "ls" } ] }

[[steps]]
done = { status = "completed", summary = "{last}" }

[[steps]]
exit = 0
"""


def machine(*steps: dict[str, Any]) -> ScriptMachine:
    return ScriptMachine(parse_script({"steps": list(steps)}))


def waiting_for(m: ScriptMachine) -> str | None:
    """What ``m`` waits for, read afresh (mypy keeps an attribute narrowed by an assert across
    the calls that change it)."""
    return m.waiting_for


def task(text: str = "do the thing", *, task_id: str = TASK, **kw: Any) -> Delivered:
    return Delivered(
        kind="task", text=text, task_id=task_id, message_id="m-task", sender_id=PARENT, **kw
    )


def message(text: str, *, mid: str = "m-1", sender: str = PEER, **kw: Any) -> Delivered:
    return Delivered(kind="message", text=text, message_id=mid, sender_id=sender, **kw)


def reply(text: str, *, mid: str = "m-r") -> Delivered:
    return Delivered(kind="reply", text=text, message_id=mid, sender_id=PEER)


def notice(text: str = "request timed out", *, closes_request: bool = False) -> Delivered:
    return Delivered(
        kind="notice",
        text=text,
        message_id="m-n",
        sender_id=PARENT,
        closes_request=closes_request,
    )


# ----------------------------------------------------------------------------- parsing


def test_every_step_kind_parses() -> None:
    script = parse_script({"steps": ALL_STEPS})
    # repeat is expanded: 16 plain steps + 2 x 2 repeated ones
    assert len(script.steps) == len(ALL_STEPS) - 1 + 4


def test_json_text_parses() -> None:
    script = load_script_text('{"steps": [{"await": "task"}, {"say": "hi"}]}', toml=False)
    assert isinstance(script, Script)
    assert len(script.steps) == 2


def test_toml_text_parses_with_steps_tables() -> None:
    script = load_script_text(TOML_SCRIPT, toml=True)
    assert len(script.steps) == 9 + 3
    m = ScriptMachine(script)
    assert m.start() == []
    assert m.waiting_for == "task"
    effects = m.deliver(task("T"))
    assert effects == [TurnStart(), Output("got T"), RunCommand("make test")]


def test_empty_script_is_valid() -> None:
    assert parse_script({"steps": []}).steps == ()


def test_repeat_zero_times_adds_nothing() -> None:
    assert parse_script({"steps": [{"repeat": {"times": 0, "steps": [{"say": "x"}]}}]}).steps == ()


def test_nested_repeat_expands() -> None:
    inner = {"repeat": {"times": 3, "steps": [{"say": "a"}]}}
    script = parse_script({"steps": [{"repeat": {"times": 2, "steps": [inner, {"say": "b"}]}}]})
    assert len(script.steps) == 8


def test_script_errors_are_invalid_arguments() -> None:
    assert issubclass(ScriptError, InvalidArgument)
    with pytest.raises(ScriptError) as info:
        parse_script({"steps": [{"dance": 1}]})
    assert info.value.code == "invalid_argument"


@pytest.mark.parametrize(
    ("steps", "where", "what"),
    [
        ([{"say": "a"}, {"say": "b"}, {"dance": 1}], "steps[2]", "unknown step kind 'dance'"),
        ([{"say": "a", "run": "b"}], "steps[0]", "exactly one key"),
        ([{}], "steps[0]", "exactly one key"),
        (["say hi"], "steps[0]", "exactly one key"),
        ([{"say": "a"}, None], "steps[1]", "exactly one key"),
        ([{"say": 5}], "steps[0].say", "Expected `str`"),
        ([{"run": ["ls"]}], "steps[0].run", "Expected `str`"),
        ([{"await": "lunch"}], "steps[0].await", "lunch"),
        ([{"message": {"to": "x"}}], "steps[0].message", "text"),
        ([{"message": {"to": "x", "text": "y", "cc": "z"}}], "steps[0].message", "cc"),
        ([{"message": {"to": "x", "text": "y", "steer": "yes"}}], "steps[0].message", "steer"),
        ([{"reply": "hi"}], "steps[0].reply", "Expected `object`"),
        ([{"done": {"status": "finished"}}], "steps[0].done", "finished"),
        ([{"done": {}}], "steps[0].done", "status"),
        ([{"exit": "1"}], "steps[0].exit", "Expected `int`"),
        ([{"sleep": "1"}], "steps[0].sleep", "Expected `float`"),
        ([{"sleep": -0.1}], "steps[0]", "sleep must be 0..86400"),
        ([{"sleep": 86_400.5}], "steps[0]", "sleep must be 0..86400"),
        ([{"sleep": float("inf")}], "steps[0]", "sleep must be 0..86400"),
        ([{"sleep": float("nan")}], "steps[0]", "sleep must be 0..86400"),
        (
            [{"say": "a"}, {"repeat": {"times": 1, "steps": [{"dance": 1}]}}],
            "steps[1].repeat.steps[0]",
            "unknown step kind",
        ),
        (
            [{"say": "a"}, {"repeat": {"times": 1, "steps": [{"say": 1}]}}],
            "steps[1].repeat.steps[0].say",
            "Expected `str`",
        ),
        (
            [
                {
                    "repeat": {
                        "times": 1,
                        "steps": [{"say": "a"}, {"repeat": {"times": 1, "steps": [{"sleep": -1}]}}],
                    }
                }
            ],
            "steps[0].repeat.steps[1].repeat.steps[0]",
            "sleep",
        ),
        ([{"repeat": {"times": 10_001, "steps": []}}], "steps[0]", "0..10000"),
        ([{"repeat": {"times": -1, "steps": []}}], "steps[0]", "0..10000"),
        ([{"repeat": {"times": 2, "steps": {"say": "a"}}}], "steps[0]", "list of steps"),
        ([{"repeat": {"times": "2", "steps": []}}], "steps[0].repeat", "Expected `int`"),
        ([{"repeat": {"steps": []}}], "steps[0]", "'times' and 'steps'"),
        ([{"repeat": {"times": 1, "steps": [], "x": 1}}], "steps[0]", "'times' and 'steps'"),
        ([{"repeat": [1]}], "steps[0]", "'times' and 'steps'"),
        (
            [{"repeat": {"times": 10_000, "steps": [{"say": "x"}] * 11}}],
            "steps[0]",
            "longer than 100000",
        ),
    ],
)
def test_errors_name_the_step(steps: list[Any], where: str, what: str) -> None:
    with pytest.raises(ScriptError) as info:
        parse_script({"steps": steps})
    assert info.value.message.startswith(where + ":") or info.value.message.startswith(
        where + "."
    ), info.value.message
    assert what in info.value.message


def test_repeat_nesting_is_bounded() -> None:
    step: dict[str, Any] = {"say": "deep"}
    for _ in range(9):
        step = {"repeat": {"times": 1, "steps": [step]}}
    with pytest.raises(ScriptError, match="nested deeper than 8"):
        parse_script({"steps": [step]})


def test_repeat_nesting_up_to_the_limit_is_fine() -> None:
    step: dict[str, Any] = {"say": "deep"}
    for _ in range(8):
        step = {"repeat": {"times": 1, "steps": [step]}}
    assert len(parse_script({"steps": [step]}).steps) == 1


def test_total_length_is_bounded_across_repeats() -> None:
    block = {"repeat": {"times": 10_000, "steps": [{"say": "x"}] * 6}}
    with pytest.raises(ScriptError, match="longer than 100000"):
        parse_script({"steps": [block, block]})


@pytest.mark.parametrize(
    "document",
    [None, [], "steps", {}, {"steps": [], "name": "x"}, {"step": []}, {"steps": {"say": "x"}}],
)
def test_document_shape(document: object) -> None:
    with pytest.raises(ScriptError, match="steps"):
        parse_script(document)


@pytest.mark.parametrize(
    ("text", "toml", "fmt"),
    [
        ("{not json", False, "JSON"),
        ("", False, "JSON"),
        ("[[steps]\nsay = 1", True, "TOML"),
        ("steps = [", True, "TOML"),
    ],
)
def test_load_script_text_syntax_errors(text: str, toml: bool, fmt: str) -> None:
    with pytest.raises(ScriptError, match=f"not valid {fmt}"):
        load_script_text(text, toml=toml)


def test_load_script_text_step_errors_name_the_step() -> None:
    with pytest.raises(ScriptError, match=r"steps\[1\]"):
        load_script_text('[[steps]]\nsay = "a"\n\n[[steps]]\nsay = "b"\nrun = "c"\n', toml=True)


# ----------------------------------------------------------------------------- the machine


def test_script_starting_with_await_is_idle_until_delivery() -> None:
    m = machine({"await": "task"}, {"say": "working on {last}"}, {"await": "any"})
    assert m.start() == []
    assert m.idle
    assert (m.waiting_for, m.finished) == ("task", False)
    assert m.deliver(task("T1")) == [TurnStart(), Output("working on T1"), TurnEnd()]
    assert m.idle
    assert (m.waiting_for, m.finished) == ("any", False)


def test_script_starting_with_a_step_opens_a_turn_at_start() -> None:
    m = machine({"say": "booting"}, {"await": "task"})
    assert m.start() == [TurnStart(), Output("booting"), TurnEnd()]
    assert m.idle


def test_await_task_consumes_only_a_task() -> None:
    m = machine({"await": "task"}, {"say": "{last}"}, {"await": "message"}, {"say": "{last}"})
    m.start()
    assert m.deliver(message("early note")) == []
    assert m.queued == 1
    assert m.idle
    effects = m.deliver(task("T"))
    # the task runs first; the queued message then satisfies the next await in the same turn
    assert effects == [TurnStart(), Output("T"), Output("early note"), TurnEnd()]
    assert m.queued == 0
    assert m.finished


@pytest.mark.parametrize(
    ("want", "kind", "matches"),
    [
        ("task", "task", True),
        ("task", "message", False),
        ("task", "reply", False),
        ("task", "notice", False),
        ("message", "message", True),
        ("message", "reply", False),
        ("message", "task", False),
        ("message", "notice", False),
        ("reply", "reply", True),
        ("reply", "notice", False),  # a notice that closes no question of the script's
        ("reply", "message", False),
        ("reply", "task", False),
        ("any", "task", True),
        ("any", "message", True),
        ("any", "reply", True),
        ("any", "notice", True),
    ],
)
def test_which_deliveries_satisfy_which_await(want: str, kind: str, matches: bool) -> None:
    m = machine({"await": want}, {"say": "got {last}"})
    m.start()
    effects = m.deliver(Delivered(kind=kind, text="X", message_id="m", sender_id=PEER))  # type: ignore[arg-type]
    if matches:
        assert effects == [TurnStart(), Output("got X"), TurnEnd()]
        assert m.queued == 0
    else:
        assert effects == []
        assert m.queued == 1
        assert m.waiting_for == want


def test_turns_are_bracketed() -> None:
    m = machine(
        {"await": "task"},
        {"say": "a"},
        {"await": "message"},
        {"say": "b"},
        {"await": "message"},
        {"done": {"status": "completed"}},
    )
    assert m.start() == []
    assert m.deliver(task()) == [TurnStart(), Output("a"), TurnEnd()]
    assert m.deliver(message("x")) == [TurnStart(), Output("b"), TurnEnd()]
    assert m.deliver(message("y")) == [
        TurnStart(),
        SendDone(task_id=TASK, status="completed", summary=None, cancel_requests=False),
        TurnEnd(),
    ]
    assert m.finished
    assert m.idle


def test_last_substitution_in_say_message_reply_and_done() -> None:
    m = machine(
        {"await": "task"},
        {"message": {"to": "planner", "text": "about {last}: {last}?", "expects_reply": True}},
        {"await": "message"},
        {"reply": {"text": "re: {last}"}},
        {"done": {"status": "completed", "summary": "did {last}"}},
    )
    m.start()
    assert m.deliver(task("T")) == [
        TurnStart(),
        SendMessage(
            to="planner", text="about T: T?", task_id=TASK, expects_reply=True, steer=False
        ),
        TurnEnd(),
    ]
    effects = m.deliver(message("Q", mid="m-q", expects_reply=True))
    assert effects == [
        TurnStart(),
        SendReply(to=PEER, text="re: Q", reply_to="m-q", task_id=TASK),
        SendDone(task_id=TASK, status="completed", summary="did Q", cancel_requests=False),
        TurnEnd(),
    ]


def test_reply_answers_the_last_request() -> None:
    m = machine(
        {"await": "message"},
        {"await": "message"},
        {"await": "message"},
        {"reply": {"text": "answer"}},
        {"reply": {"text": "again"}},
    )
    m.start()
    m.deliver(message("q1", mid="m-1", sender="shepherd-agent-00000001", expects_reply=True))
    m.deliver(message("q2", mid="m-2", sender="shepherd-agent-00000002", expects_reply=True))
    effects = m.deliver(message("fyi", mid="m-3", sender="shepherd-agent-00000003"))
    # the last *request* (not the last message) is answered, once
    assert effects == [
        TurnStart(),
        SendReply(to="shepherd-agent-00000002", text="answer", reply_to="m-2", task_id=None),
        Output("script error: reply step with no request to answer"),
        TurnEnd(),
    ]


def test_reply_without_any_request_is_reported_not_sent() -> None:
    m = machine({"reply": {"text": "x"}})
    effects = m.start()
    assert not any(isinstance(e, SendReply) for e in effects)
    assert Output("script error: reply step with no request to answer") in effects


def test_done_carries_the_task_id_of_the_last_task() -> None:
    m = machine(
        {"await": "task"},
        {"await": "task"},
        {"message": {"to": "shepherd", "text": "hi"}},
        {"done": {"status": "failed"}},
    )
    m.start()
    m.deliver(task("one", task_id="shepherd-task-00000001"))
    effects = m.deliver(task("two", task_id="shepherd-task-00000002"))
    assert effects[1] == SendMessage(
        to="shepherd", text="hi", task_id="shepherd-task-00000002", expects_reply=False, steer=False
    )
    assert effects[2] == SendDone(
        task_id="shepherd-task-00000002", status="failed", summary=None, cancel_requests=False
    )
    assert m.task_id == "shepherd-task-00000002"


def test_done_before_any_task_has_no_task_id() -> None:
    m = machine({"done": {"status": "completed", "cancel_requests": True}})
    assert m.start() == [
        TurnStart(),
        SendDone(task_id=None, status="completed", summary=None, cancel_requests=True),
        TurnEnd(),
    ]


def test_a_message_does_not_change_the_task_id() -> None:
    m = machine({"await": "task"}, {"await": "any"}, {"done": {"status": "completed"}})
    m.start()
    m.deliver(task(task_id="shepherd-task-00000001"))
    effects = m.deliver(message("x", task_id="shepherd-task-00000009"))
    assert effects[1] == SendDone(
        task_id="shepherd-task-00000001", status="completed", summary=None, cancel_requests=False
    )


def test_steer_jumps_ahead_of_queued_follow_ups() -> None:
    m = machine(
        {"await": "task"},
        {"run": "slow"},
        {"await": "message"},
        {"say": "first {last}"},
        {"await": "message"},
        {"say": "then {last}"},
    )
    m.start()
    m.deliver(task())
    assert m.deliver(message("f1", mid="m-f1")) == []
    assert m.deliver(message("f2", mid="m-f2")) == []
    assert m.deliver(message("urgent", mid="m-s", steer=True)) == []
    assert m.queued == 3
    effects = m.resume()
    assert effects == [Output("first urgent"), Output("then f1"), TurnEnd()]
    assert m.queued == 1


def test_run_is_busy_until_resume() -> None:
    m = machine({"await": "task"}, {"run": "pytest"}, {"say": "after {last}"}, {"await": "any"})
    m.start()
    assert m.deliver(task("T")) == [TurnStart(), RunCommand("pytest")]
    assert not m.idle
    assert m.deliver(message("while busy")) == []  # queued, not acted on
    assert m.queued == 1
    # {last} stays the last *delivery*: a command's output is a tool result, not remembered;
    # the queued message satisfies `await any` only once the run has finished
    assert m.resume() == [Output("after T"), TurnEnd()]
    assert m.queued == 0
    assert m.finished


def test_resume_when_not_busy_does_nothing() -> None:
    m = machine({"await": "task"}, {"say": "x"})
    m.start()
    assert m.resume() == []
    assert m.idle
    assert m.waiting_for == "task"


def test_sleep_is_busy_until_resume() -> None:
    m = machine({"sleep": 2.5}, {"say": "awake"})
    assert m.start() == [TurnStart(), Sleep(2.5)]
    assert m.deliver(message("x")) == []
    assert m.resume() == [Output("awake"), TurnEnd()]
    assert m.finished


def test_sleep_keeps_last() -> None:
    m = machine({"await": "task"}, {"sleep": 1}, {"say": "{last}"})
    m.start()
    m.deliver(task("T"))
    assert m.resume() == [Output("T"), TurnEnd()]


def test_exit_stops_the_machine() -> None:
    m = machine({"await": "task"}, {"exit": 7}, {"say": "never"})
    m.start()
    assert m.deliver(task()) == [TurnStart(), Exit(7)]
    assert m.finished
    assert m.deliver(message("after")) == []
    assert m.resume() == []


def test_end_of_script_ends_the_turn_and_finishes() -> None:
    m = machine({"await": "task"}, {"say": "bye"})
    m.start()
    assert m.deliver(task()) == [TurnStart(), Output("bye"), TurnEnd()]
    assert m.finished
    assert m.idle
    assert m.waiting_for is None
    assert m.deliver(task()) == []


def test_empty_script_finishes_at_start_without_a_turn() -> None:
    m = machine()
    assert m.start() == []
    assert m.finished


def test_notice_satisfies_await_reply_and_any_but_not_message() -> None:
    m = machine(
        {"await": "reply"},
        {"say": "r {last}"},
        {"await": "any"},
        {"say": "a {last}"},
        {"await": "message"},
        {"say": "m {last}"},
    )
    m.start()
    # a notice about something else (a wait cycle, a stale wait) does not end a wait for a
    # reply; the notice that closes the script's question without a reply does
    assert m.deliver(notice("wait cycle")) == []
    assert waiting_for(m) == "reply"
    closed = notice("timed out", closes_request=True)
    assert m.deliver(closed) == [
        TurnStart(),
        Output("r timed out"),
        Output("a wait cycle"),  # then `await any` takes the notice that waited
        TurnEnd(),
    ]
    assert m.deliver(notice("again")) == []
    assert waiting_for(m) == "message"
    assert m.queued == 1


def test_a_notice_closing_a_question_ends_await_reply() -> None:
    m = machine({"await": "reply"}, {"say": "r {last}"}, {"await": "any"})
    m.start()
    effects = m.deliver(notice("timed out", closes_request=True))
    assert effects == [TurnStart(), Output("r timed out"), TurnEnd()]


def test_await_takes_the_first_matching_item_in_queue_order() -> None:
    m = machine({"await": "task"}, {"run": "x"}, {"await": "reply"}, {"say": "{last}"})
    m.start()
    m.deliver(task())
    m.deliver(message("m1"))
    m.deliver(reply("r1"))
    m.deliver(reply("r2"))
    assert m.resume() == [Output("r1"), TurnEnd()]
    assert m.queued == 2


# ----------------------------------------------------------------------------- property

simple_steps = st.one_of(
    st.sampled_from(["task", "message", "reply", "any"]).map(lambda k: {"await": k}),
    st.just({"say": "s {last}"}),
    st.just({"run": "cmd"}),
    st.just({"sleep": 1}),
    st.just({"reply": {"text": "r"}}),
    st.just({"message": {"to": "planner", "text": "m", "expects_reply": True}}),
    st.just({"done": {"status": "completed"}}),
    st.just({"exit": 1}),
)
operations = st.lists(
    st.one_of(
        st.tuples(
            st.just("deliver"),
            st.sampled_from(["task", "message", "reply", "notice"]),
            st.booleans(),
            st.booleans(),
        ),
        st.tuples(st.just("resume")),
    ),
    max_size=25,
)


@settings(max_examples=300, deadline=None)
@given(steps=st.lists(simple_steps, max_size=15), ops=operations)
def test_turns_always_alternate_and_effects_happen_inside_turns(
    steps: list[dict[str, Any]], ops: list[tuple[Any, ...]]
) -> None:
    m = machine(*steps)
    in_turn = False
    busy = False

    def check(effects: list[Effect]) -> None:
        nonlocal in_turn, busy
        for effect in effects:
            if isinstance(effect, TurnStart):
                assert not in_turn
                in_turn = True
            elif isinstance(effect, TurnEnd):
                assert in_turn
                in_turn = False
            else:
                assert in_turn, f"{effect} outside a turn"
            if isinstance(effect, RunCommand | Sleep):
                assert effect is effects[-1]  # nothing happens while busy
                busy = True
        assert m.idle == (not in_turn)

    check(m.start())
    for op in ops:
        was_finished = m.finished
        if op[0] == "deliver":
            _, kind, steer, expects = op
            item = Delivered(
                kind=kind,
                text="t",
                message_id="m",
                sender_id=PEER,
                task_id=TASK if kind == "task" else None,
                steer=steer,
                expects_reply=expects,
            )
            effects = m.deliver(item)
            if busy or was_finished:
                assert effects == []
        else:
            was_busy = busy
            effects = m.resume()
            busy = False
            if not was_busy or was_finished:
                assert effects == []
        check(effects)
        if was_finished:
            assert effects == []


@pytest.mark.parametrize("code", [-1, 256, 10**20])
def test_an_exit_code_a_process_cannot_have_is_a_script_error(code: int) -> None:
    with pytest.raises(ScriptError, match=r"steps\[0\]: exit needs a code of 0\.\.255"):
        parse_script({"steps": [{"exit": code}]})
