"""The board's other views in a real headless browser: a task's page, the notifications
filtered by agent, task and kind, and hostile input from the page's forms answered with the
project's typed errors, shown on the page."""

from __future__ import annotations

from typing import Any

import pytest
from selenium.webdriver.common.by import By

from actors.records.session_info import load_info
from protocol.core.tracecontext import task_trace_id
from tests.web.conftest import Team
from tests.web.pages import (
    acted,
    answer_request,
    card,
    click,
    error_line,
    fill,
    in_lane,
    lane_of,
    open_board,
    wait,
)

pytestmark = pytest.mark.timeout(240)


def _feed(driver: Any, query: str | None = None) -> list[dict[str, Any]]:
    """The notifications listed, once the backlog is read; with ``query`` (``agent=asker``),
    only once the list shows those filters (a submitted form changes the view a moment later:
    until then the list is the last filters')."""
    rows: list[dict[str, Any]] = driver.execute_script(
        "const list = document.querySelector('#feed');"
        "if (!list.dataset.loaded) return null;"
        "if (arguments[0] !== null && list.dataset.query !== arguments[0]) return null;"
        "return [...list.children].map((li) => ({kind: li.dataset.kind, code: li.dataset.code,"
        " task: li.dataset.task, text: li.textContent}));",
        query,
    )
    return rows


def _task_page(driver: Any) -> dict[str, Any]:
    """The task's page as shown, read in one script (it is drawn again on each change)."""
    shown: dict[str, Any] = driver.execute_script(
        "const t = document.querySelector('#task');"
        "const status = t.querySelector('[data-result-status]');"
        "return {state: t.dataset.state || null, text: t.innerText,"
        " task_text: (t.querySelector('pre.text') || {}).textContent,"
        " result: status ? status.dataset.resultStatus : null,"
        " trace_id: (t.querySelector('[data-trace-id]') || {dataset: {}}).dataset.traceId,"
        " replies: [...t.querySelectorAll('[data-reply]')].map((b) => b.dataset.reply)};"
    )
    return shown


def test_a_tasks_page_shows_its_text_history_result_and_note(team: Team, browser: Any) -> None:
    _, asked = team.cli("delegate", "asker", "pick a branch\nfor the release")
    task_id = asked["task_id"]
    open_board(browser, team)
    wait(browser, in_lane("asker", "needs_parent"), "the asker's question")
    wait(browser, lambda d: click(d, f'[data-task-link="{task_id}"]'), "the card's task link")
    page = wait(browser, lambda d: (p := _task_page(d))["state"] == "waiting" and p, "the page")
    assert page["task_text"] == "pick a branch\nfor the release"
    assert "which branch?" in page["text"]  # the note's log and the question to the parent
    assert "shepherd.task.id = " + task_id in page["text"]
    trace_id = task_trace_id(load_info(team.session_dir).session_id, task_id)
    assert page["trace_id"] == trace_id
    assert "not stuck" in page["text"]  # the watchdog's verdict on its agent
    # the question answered from the task's own page; the page follows the task to its end
    (request_id,) = page["replies"]
    answer_request(browser, request_id, "reply", "release-2")
    page = wait(browser, lambda d: (p := _task_page(d))["result"] == "completed" and p, "done")
    assert page["state"] == "completed"
    assert "went with release-2" in page["text"]
    assert "replied" in page["text"] and ": release-2" in page["text"]  # the reply, in the log
    assert "## Result" in page["text"]  # the note, finalised
    assert "task_completion" not in page["text"] or "went with" in page["text"]
    assert error_line(browser) == ""


def test_notifications_filtered_by_agent_task_and_kind(team: Team, browser: Any) -> None:
    _, worked = team.cli("delegate", "worker", "build it")
    team.cli("delegate", "idle", "wait")  # its turn ends without done: a notice with a code
    _, asked = team.cli("delegate", "asker", "pick a branch")
    open_board(browser, team)
    wait(browser, in_lane("asker", "needs_parent"), "the asker's question")
    browser.find_element(By.ID, "nav-feed").click()
    fill(browser, "feed-form", agent="asker")
    shown = wait(browser, lambda d: (rows := _feed(d, "agent=asker")) and rows, "the asker's")
    assert all(asked["task_id"] in r["text"] or r["task"] == asked["task_id"] for r in shown), shown
    assert any(r["kind"] == "agent_message" for r in shown)
    # the same filters shown again (another spelling of them): the list is read back, not
    # left empty (its stream is the one already open, which says hello only when opened)
    browser.execute_script("location.hash = '#notifications?agent=%61sker'")
    again = wait(browser, lambda d: (rows := _feed(d, "agent=asker")) and rows, "read back")
    assert len(again) == len(shown)
    # live: the asker's completion comes into the filtered list as it happens
    team.cli("message", "asker", "main", "--reply-to", _request_of(team))
    wait(
        browser,
        lambda d: any(r["kind"] == "task_completion" for r in _feed(d, "agent=asker") or []),
        "the asker's completion streamed in",
    )
    assert all(worked["task_id"] not in r["text"] for r in _feed(browser))
    # by task, then by kind (a notice's code)
    fill(browser, "feed-form", agent="", task=asked["task_id"])
    by_task = f"task={asked['task_id']}"
    rows = wait(browser, lambda d: len(found := _feed(d, by_task) or []) >= 2 and found, "by task")
    assert {r["task"] for r in rows} == {asked["task_id"]}
    fill(browser, "feed-form", task="", kind="turn_ended_without_done")
    by_code = "kind=turn_ended_without_done"
    rows = wait(browser, lambda d: (found := _feed(d, by_code)) is not None and found, "by code")
    assert {r["code"] for r in rows} == {"turn_ended_without_done"}
    # a bad filter is refused with its typed error, shown
    fill(browser, "feed-form", kind="", task="not-a-task")
    wait(browser, lambda d: error_line(d).startswith("invalid_argument: task 'not-a-task'"))


def _request_of(team: Team) -> str:
    _, status = team.cli("status", "asker")
    (request,) = status["agents"][0]["task"]["pending_requests"]
    return str(request["request_id"])


@pytest.mark.parametrize(
    ("form", "values", "code"),
    [
        ("delegate-form", {"target": "no-such-agent", "task": "x"}, "invalid_handle"),
        (
            "delegate-form",
            {"target": "worker", "task": "x", "max_turns": "lots"},
            "invalid_argument",
        ),
        ("delegate-form", {"target": "worker", "task": "x", "max_cost": "-5"}, "invalid_argument"),
        ("delegate-form", {"target": "../../etc", "task": "x"}, "invalid_handle"),
        ("message-form", {"target": "worker", "message": "x" * 300_000}, "limit_exceeded"),
        ("message-form", {"target": "<img src=x onerror=alert(1)>", "message": "x"}, "invalid_"),
    ],
)
def test_hostile_input_from_the_forms_gets_a_typed_error_shown(
    team: Team, browser: Any, form: str, values: dict[str, str], code: str
) -> None:
    open_board(browser, team)
    before = acted(browser)
    big = {k: v for k, v in values.items() if len(v) > 1000}
    if big:  # typed by a script: send_keys of 300,000 characters is a test of the driver
        browser.execute_script(
            "for (const [k, v] of Object.entries(arguments[1]))"
            " document.getElementById(arguments[0])[k].value = v;",
            form,
            big,
        )
    fill(browser, form, **{k: v for k, v in values.items() if k not in big})
    wait(browser, lambda d: acted(d) > before, "the page's answer")
    assert error_line(browser).startswith(code), error_line(browser)
    assert browser.find_elements(By.CSS_SELECTOR, "img") == []  # text, never markup
    # the board is still there, its counts whole
    assert browser.execute_script("return document.querySelectorAll('.card').length") == 3


def test_a_bad_task_id_in_the_address_gets_a_typed_error(team: Team, browser: Any) -> None:
    open_board(browser, team, "#task/../../session.json")
    wait(browser, lambda d: error_line(d).startswith("not_found: no such page"), "the error")
    open_board(browser, team, "#task/" + "f" * 300)
    wait(browser, lambda d: error_line(d).startswith("invalid_handle"), "the typed error")
    open_board(browser, team, "#task/shepherd-task-0000000000000000")
    wait(browser, lambda d: error_line(d).startswith("invalid_handle: the session knows no task"))


def test_a_task_queued_for_a_slot_is_in_the_queued_lane_with_its_place(
    capped_team: Team, browser: Any
) -> None:
    team = capped_team
    team.cli("delegate", "asker", "pick a branch")  # the one slot
    _, queued = team.cli("delegate", "worker", "build it")
    assert queued["queued"] and queued["queue_place"] == 1
    open_board(browser, team)
    wait(browser, in_lane("worker", "queued"), "the worker's task queued")
    shown = card(browser, "worker")
    assert shown is not None and "queued #1" in shown["text"], shown
    # the slot frees: the queued task is handed over and its card leaves the lane
    wait(browser, in_lane("asker", "needs_parent"), "the asker's question")
    team.cli("message", "asker", "main", "--reply-to", _request_of(team))
    wait(browser, lambda d: lane_of(d, "worker") != "queued", "the worker's task started")
