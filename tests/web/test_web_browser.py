"""The board in a real headless browser (Debian's Chromium driven by selenium), on a live
session with scripted and command agents: cards move lanes as their tasks wait and complete,
approvals are approved and denied, a question is answered and a task cancelled, all from the
page."""

from __future__ import annotations

import re
import shlex
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.processes.conftest import SCOUT
from tests.processes.test_approvals import ASKING_AGENT
from tests.reliability.live import PLANNER
from tests.web.conftest import Team
from tests.web.pages import (
    answer_request,
    card,
    click,
    error_line,
    fill,
    in_lane,
    lane_of,
    open_board,
    request_ids,
    wait,
)

pytestmark = pytest.mark.timeout(240)


def test_a_card_waits_on_a_peer_then_completes(team: Team, browser: Any) -> None:
    team.spawn("scout", SCOUT)
    team.spawn("planner", PLANNER)
    open_board(browser, team)
    assert lane_of(browser, "scout") == "idle"
    fill(browser, "delegate-form", target="planner", task="plan the refactor")
    wait(browser, in_lane("planner", "working"), "the planner working")
    fill(browser, "delegate-form", target="scout", task="map the code base")
    wait(browser, in_lane("scout", "waiting_peer"), "the scout waiting on the planner")
    shown = card(browser, "scout")
    assert shown is not None and "map the code base" in shown["text"]
    assert re.fullmatch(r"\d+s|\d+m \d+s", shown["since"]), shown  # time in its lane
    assert "turns" in shown["text"] and "tokens" in shown["text"] and "cost" in shown["text"]
    assert shown["watchdog"] == "none"
    # the go-ahead from the page's message form: the planner replies, the scout completes
    fill(browser, "message-form", target="planner", message="answer the scout")
    wait(browser, in_lane("scout", "idle"), "the scout done")
    done = card(browser, "scout")
    assert done is not None and "result: completed: explored src/core" in done["text"], done
    assert error_line(browser) == ""


def test_approve_one_approval_and_deny_another_from_the_page(
    team: Team, browser: Any, tmp_path: Path
) -> None:
    agent = tmp_path / "asking_agent.py"
    agent.write_text(ASKING_AGENT)
    cmd = f"{shlex.quote(sys.executable)} {shlex.quote(str(agent))} {{message}}"
    for name in ("builder", "releaser"):
        team.cli("spawn", name, "--adapter", "command", "--cmd", cmd)
    open_board(browser, team)
    fill(browser, "delegate-form", target="builder", task="release 1.2")
    fill(browser, "delegate-form", target="releaser", task="release 1.3")
    wait(browser, in_lane("builder", "needs_parent"), "the builder asking")
    wait(browser, in_lane("releaser", "needs_parent"), "the releaser asking")
    pending = wait(browser, lambda d: len(ids := request_ids(d, "approve")) == 2 and ids)
    inbox = browser.find_element("id", "requests").text
    assert "release 1.2" in inbox and "release 1.3" in inbox
    by_agent = {
        browser.execute_script(
            "return document.querySelector(`[data-request='${arguments[0]}'] strong`).textContent",
            request_id,
        ).split(" ")[0]: request_id
        for request_id in pending
    }
    answer_request(browser, by_agent["builder"], "approve", "tag first")
    answer_request(browser, by_agent["releaser"], "deny", "not on a Friday")
    wait(browser, in_lane("builder", "idle"), "the approved task done")
    wait(browser, in_lane("releaser", "idle"), "the denied task done")
    builder, releaser = card(browser, "builder"), card(browser, "releaser")
    assert builder is not None and "completed: pushed: tag first" in builder["text"], builder
    assert releaser is not None and "blocked: denied: not on a Friday" in releaser["text"]
    assert request_ids(browser, "approve") == []
    assert error_line(browser) == ""


def test_reply_to_a_question_then_cancel_a_task(team: Team, browser: Any) -> None:
    open_board(browser, team)
    _, asked = team.cli("delegate", "asker", "pick a branch")  # from the CLI: the board sees it
    wait(browser, in_lane("asker", "needs_parent"), "the asker's question")
    (request_id,) = wait(browser, lambda d: request_ids(d, "reply"))
    assert "which branch?" in browser.find_element("id", "requests").text
    answer_request(browser, request_id, "reply", "main")
    wait(browser, in_lane("asker", "idle"), "the asker done")
    shown = card(browser, "asker")
    assert shown is not None and "went with main" in shown["text"]
    assert shown["task"] == asked["task_id"]
    # a task that never ends, cancelled from its card
    fill(browser, "delegate-form", target="idle", task="wait forever")
    wait(browser, in_lane("idle", "working"), "the idle agent working")
    task_id = card(browser, "idle")["task"]  # type: ignore[index]
    wait(browser, lambda d: click(d, f'[data-cancel="{task_id}"]'), "the cancel button")
    wait(browser, in_lane("idle", "idle"), "the cancelled task off the working lane")
    cancelled = card(browser, "idle")
    assert cancelled is not None and "result: cancelled" in cancelled["text"], cancelled
    # and closed from its card: the agent leaves for the exited lane
    wait(browser, lambda d: click(d, '[data-close="worker"]'), "the close button")
    wait(browser, in_lane("worker", "exited"), "the worker closed")
    assert error_line(browser) == ""


def test_the_page_without_the_token_is_refused(team: Team, browser: Any) -> None:
    browser.get(team.web.url)
    assert "unauthorized" in browser.page_source
    browser.get(team.web.url + "?token=" + "x" * len(team.web.token))
    assert "unauthorized" in browser.page_source
