"""Make the board's screenshots for docs/guides/web.md again: a session with scripted agents
(one asks the parent, one waits on a peer, two change the same file in their git worktrees,
one loops until the watchdog says so, one reports its spending against a budget, one is
closed), `shepherd web` in front of it,
and Debian's Chromium (scripts/install_browser.sh) saving the board, a task's page and the
notifications.

    python scripts/web_screenshot.py [DIRECTORY]     (default docs/images)

It writes web-board.png, web-task.png and web-notifications.png there.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from selenium import webdriver
from selenium.webdriver.support.ui import WebDriverWait

#: agent name -> its script; agents named with a worktree get one of the scene's repository
SCRIPTS: dict[str, dict[str, Any]] = {
    "asker": {
        "steps": [
            {"await": "task"},
            {"message": {"to": "shepherd", "text": "which branch?", "expects_reply": True}},
            {"await": "reply"},
            {"done": {"status": "completed", "summary": "went with {last}"}},
        ]
    },
    "lexer": {
        "steps": [
            {"await": "task"},
            {"run": "echo 'tokens = []' >> src/core.py && echo 'x = 1' > src/lexer.py"},
            {"await": "any"},
        ]
    },
    "parser": {
        "steps": [
            {"await": "task"},
            {"run": "echo 'tree = None' >> src/core.py"},
            {"done": {"status": "completed", "summary": "parser rewritten"}},
        ]
    },
    "tester": {
        "steps": [
            {"await": "task"},
            {"repeat": {"times": 6, "steps": [{"run": "pytest -x tests/test_core.py || true"}]}},
            {"await": "any"},
        ]
    },
    "scout": {
        "steps": [
            {"await": "task"},
            {"message": {"to": "planner", "text": "which module first?", "expects_reply": True}},
            {"await": "reply"},
        ]
    },
    "planner": {"steps": [{"await": "task"}, {"await": "any"}]},
    "docs": {"steps": [{"await": "task"}, {"await": "any"}]},
    "reviewer": {
        "steps": [
            {"await": "task"},
            {"run": "shepherd-child usage --tokens 18250 --cost 0.41"},
            {"await": "any"},
        ]
    },
}
WORKTREES = ("lexer", "parser")
CLI = [sys.executable, "-m", "actors.surfaces.cli"]


def _cli(*args: str, session: Path) -> Any:
    argv = [sys.executable, "-m", "actors.surfaces.entry", *args, "--json", "--session"]
    done = subprocess.run([*argv, str(session)], capture_output=True, text=True, check=True)
    return json.loads(done.stdout.splitlines()[-1])


def _repository(where: Path) -> Path:
    repo = where / "project"
    (repo / "src").mkdir(parents=True)
    (repo / "src" / "core.py").write_text("# the core\n")
    for argv in (
        ["init", "-q", "-b", "main"],
        ["add", "."],
        ["-c", "user.name=s", "-c", "user.email=s@example.invalid", "commit", "-qm", "core"],
    ):
        subprocess.run(["git", *argv], cwd=repo, check=True)
    return repo


def _scene(tmp: Path, session: Path) -> None:
    repo = _repository(tmp)
    for name, script in SCRIPTS.items():
        path = tmp / f"{name}.json"
        path.write_text(json.dumps(script))
        extra = ["--worktree", "--repo", str(repo)] if name in WORKTREES else []
        _cli("spawn", name, "--script", str(path), *extra, session=session)
    _cli("delegate", "lexer", "split the lexer out of core", session=session)
    _cli("delegate", "tester", "make the core tests pass", session=session)
    budget = ["--max-turns", "10", "--max-tokens", "50000", "--max-cost", "2"]
    _cli("delegate", "reviewer", "review the lexer's branch", *budget, session=session)
    _cli("delegate", "asker", "pick the release branch", session=session)
    _cli("delegate", "planner", "plan the refactor", session=session)
    _cli("delegate", "scout", "map the code base", session=session)
    _cli("close", "docs", session=session)


def _wait(driver: Any, script: str) -> None:
    WebDriverWait(driver, 120).until(lambda d: d.execute_script(script))


def main() -> int:
    out = Path(sys.argv[1] if len(sys.argv) > 1 else "docs/images")
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        session = tmp / "session"
        env = {**os.environ, "XDG_STATE_HOME": str(tmp / "state")}
        serve = subprocess.Popen(
            [*CLI, "serve", "--json", "--session-dir", str(session)],
            stdout=subprocess.PIPE,
            start_new_session=True,
            cwd=tmp,
            env=env,
        )
        web = None
        os.environ["XDG_STATE_HOME"] = env["XDG_STATE_HOME"]
        try:
            assert serve.stdout is not None
            serve.stdout.readline()  # its first line: the session is up
            _scene(tmp, session)
            web = subprocess.Popen(
                [*CLI, "web", "--json", "--session", str(session)],
                stdout=subprocess.PIPE,
                start_new_session=True,
            )
            assert web.stdout is not None
            header = json.loads(web.stdout.readline())["web"]
            # the parser's task ends after the lexer changed the same file: an overlap
            _cli("delegate", "parser", "rewrite the parser", session=session)
            _shoot(header["url"] + "?token=" + header["token"], out)
        finally:
            for proc in (web, serve):
                if proc is not None and proc.poll() is None:
                    os.killpg(proc.pid, signal.SIGTERM)
                    proc.wait(timeout=30)
    return 0


def _shoot(url: str, out: Path) -> None:
    options = webdriver.ChromeOptions()
    for flag in ("--headless=new", "--no-sandbox", "--window-size=1400,820"):
        options.add_argument(flag)
    options.binary_location = shutil.which("chromium") or "chromium"
    # the driver named, so selenium never looks for one on the network
    service = webdriver.ChromeService(shutil.which("chromedriver") or "chromedriver")
    driver = webdriver.Chrome(options=options, service=service)
    try:
        driver.get(url)
        _wait(
            driver,
            "return document.querySelector('.card[data-agent=parser] .worktree')?.textContent"
            ".includes('overlaps') && document.querySelector('.card[data-agent=tester]"
            " .watchdog.alert') !== null && document.querySelector('#requests .request')",
        )
        time.sleep(0.3)  # a picture, not a test: let the last redraw settle
        driver.save_screenshot(str(out / "web-board.png"))
        task = driver.execute_script(
            "return document.querySelector('.card[data-agent=parser]').dataset.task"
        )
        driver.get(url + "#task/" + task)
        _wait(driver, "return document.querySelector('#task [data-result-status]') !== null")
        time.sleep(0.3)
        driver.save_screenshot(str(out / "web-task.png"))
        driver.get(url + "#notifications")
        _wait(driver, "return document.querySelector('#feed').dataset.loaded === '1'")
        time.sleep(0.3)
        driver.save_screenshot(str(out / "web-notifications.png"))
    finally:
        driver.quit()
    for name in ("web-board.png", "web-task.png", "web-notifications.png"):
        print(out / name)


if __name__ == "__main__":
    sys.exit(main())
