"""The board in a real headless browser (Debian's Chromium driven by selenium): the page of
a live session shows its agents in lanes, a card moves lanes live as its task waits on the
parent and completes, a question is answered and a task cancelled from the page."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from typing import Any

import pytest
from selenium import webdriver
from selenium.common.exceptions import StaleElementReferenceException
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

from tests.web.conftest import Team

pytestmark = pytest.mark.timeout(240)

#: a ceiling for one wait, not a pace
WAIT_S = 60.0


@pytest.fixture
def browser() -> Iterator[Any]:
    chromium, chromedriver = shutil.which("chromium"), shutil.which("chromedriver")
    if chromium is None or chromedriver is None:
        pytest.fail("chromium and chromedriver are missing: run scripts/install_browser.sh")
    options = webdriver.ChromeOptions()
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"):
        options.add_argument(flag)
    options.binary_location = chromium
    service = webdriver.ChromeService(executable_path=chromedriver)
    driver = webdriver.Chrome(options=options, service=service)
    try:
        yield driver
    finally:
        driver.quit()


def _lane_of(driver: Any, agent: str) -> str | None:
    # read in one script: the board is drawn again on every notification
    lane: str | None = driver.execute_script(
        "const c = document.querySelector(`.card[data-agent='${arguments[0]}']`);"
        "return c ? c.dataset.lane : null;",
        agent,
    )
    return lane


def _wait(driver: Any, ok: Any) -> Any:
    return WebDriverWait(
        driver, WAIT_S, poll_frequency=0.05, ignored_exceptions=(StaleElementReferenceException,)
    ).until(ok)


def _click(driver: Any, selector: str) -> bool:
    driver.find_element(By.CSS_SELECTOR, selector).click()
    return True


def test_the_board_moves_a_card_and_answers_from_the_page(team: Team, browser: Any) -> None:
    browser.get(team.web.url + "?token=" + team.web.token)
    _wait(browser, lambda d: d.execute_script("return document.body.dataset.ready") == "1")
    assert _lane_of(browser, "asker") == "idle"
    # delegate from the page's form
    form = browser.find_element(By.ID, "delegate-form")
    form.find_element(By.NAME, "target").send_keys("asker")
    form.find_element(By.NAME, "task").send_keys("pick a branch")
    form.find_element(By.TAG_NAME, "button").click()
    _wait(browser, lambda d: _lane_of(d, "asker") == "needs_parent")
    # the question is in the inbox: answer it from the page
    request_id = _wait(
        browser,
        lambda d: d.execute_script(
            "const b = document.querySelector('#requests [data-reply]');"
            "return b ? b.dataset.reply : null;"
        ),
    )
    assert "which branch?" in browser.find_element(By.ID, "requests").text
    assert "pick a branch" in browser.execute_script(
        "return document.querySelector(\".card[data-agent='asker']\").textContent"
    )
    # typed and sent in one script, so a redraw between the two cannot lose the text
    browser.execute_script(
        "document.querySelector(`[data-answer='${arguments[0]}']`).value = 'main';"
        "document.querySelector(`[data-reply='${arguments[0]}']`).click();",
        request_id,
    )
    _wait(browser, lambda d: _lane_of(d, "asker") == "idle")
    assert browser.find_element(By.ID, "error").text == ""
    # a task that never ends, cancelled from its card
    _, delegated = team.cli("delegate", "idle", "wait forever")
    _wait(browser, lambda d: _lane_of(d, "idle") == "working")
    _wait(browser, lambda d: _click(d, f'[data-cancel="{delegated["task_id"]}"]'))
    _wait(browser, lambda d: _lane_of(d, "idle") == "idle")
    # a hostile value from the page's form gets the typed error, shown
    form.find_element(By.NAME, "target").clear()
    form.find_element(By.NAME, "target").send_keys("no-such-agent")
    form.find_element(By.TAG_NAME, "button").click()
    _wait(browser, lambda d: d.find_element(By.ID, "error").text.startswith("invalid_handle"))


def test_the_page_without_the_token_is_refused(team: Team, browser: Any) -> None:
    browser.get(team.web.url)
    assert "unauthorized" in browser.page_source
