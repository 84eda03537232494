"""Reading and driving the board's page in the browser tests.

The page draws its board again on every change, so what a test reads it reads in one script,
and what it clicks it finds again on each try (a card found before a redraw is stale after).
Every wait is a WebDriverWait with a ceiling; nothing sleeps.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from selenium.common.exceptions import StaleElementReferenceException
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

from tests.web.conftest import Team

#: a ceiling for one wait, not a pace
WAIT_S = 60.0


def wait(driver: Any, ok: Callable[[Any], Any], what: str = "") -> Any:
    """Until ``ok(driver)`` is truthy (its value), or fail after :data:`WAIT_S` saying
    ``what`` and the page's error line."""
    try:
        return WebDriverWait(
            driver,
            WAIT_S,
            poll_frequency=0.05,
            ignored_exceptions=(StaleElementReferenceException,),
        ).until(ok)
    except Exception as exc:
        shown = driver.execute_script("return document.querySelector('#error').textContent")
        said = f"waited {WAIT_S:g}s for {what or ok}; the page says {shown!r}"
        raise AssertionError(said) from exc


def open_board(driver: Any, team: Team, hash_: str = "") -> None:
    driver.get(team.web.url + "?token=" + team.web.token + hash_)
    if not hash_:
        wait(driver, lambda d: d.execute_script("return document.body.dataset.ready") == "1")


def card(driver: Any, agent: str) -> dict[str, Any] | None:
    """The card of ``agent`` as shown: its lane, task, text and time in state."""
    found: dict[str, Any] | None = driver.execute_script(
        "const c = document.querySelector(`.card[data-agent='${arguments[0]}']`);"
        "return c ? {lane: c.dataset.lane, task: c.dataset.task || null, text: c.textContent,"
        " since: c.querySelector('.since').textContent,"
        " watchdog: c.querySelector('.watchdog').dataset.watchdog} : null;",
        agent,
    )
    return found


def lane_of(driver: Any, agent: str) -> str | None:
    shown = card(driver, agent)
    return shown["lane"] if shown else None


def in_lane(agent: str, lane: str) -> Callable[[Any], bool]:
    return lambda d: lane_of(d, agent) == lane


def click(driver: Any, selector: str) -> bool:
    driver.find_element(By.CSS_SELECTOR, selector).click()
    return True


def error_line(driver: Any) -> str:
    text: str = driver.find_element(By.ID, "error").text
    return text


def fill(driver: Any, form: str, **values: str) -> None:
    """Type into a form's fields (forms are never redrawn) and submit it."""
    node = driver.find_element(By.ID, form)
    for name, value in values.items():
        field = node.find_element(By.NAME, name)
        field.clear()
        field.send_keys(value)
    node.find_element(By.TAG_NAME, "button").click()


def answer_request(driver: Any, request_id: str, action: str, text: str) -> None:
    """Type ``text`` into a request's field and press its ``action`` button (approve, deny,
    reply) in one script: the inbox may be redrawn between two calls."""
    driver.execute_script(
        "document.querySelector(`[data-answer='${arguments[0]}']`).value = arguments[2];"
        "document.querySelector(`[data-${arguments[1]}='${arguments[0]}']`).click();",
        request_id,
        action,
        text,
    )


def request_ids(driver: Any, action: str) -> list[str]:
    """The ids of the inbox's requests answered with ``action`` (approve, reply)."""
    ids: list[str] = driver.execute_script(
        "return [...document.querySelectorAll(`#requests [data-${arguments[0]}]`)]"
        ".map((b) => b.getAttribute(`data-${arguments[0]}`));",
        action,
    )
    return ids


def acted(driver: Any) -> int:
    """How many actions the page has answered (each sets the error line first)."""
    count = driver.execute_script("return Number(document.body.dataset.acted || 0)")
    return int(count)
