"""Make the board's screenshot for docs/guides/web.md again: a session with scripted agents
(one asks the parent, one works, one is idle), `shepherd web` in front of it, and Debian's
Chromium (scripts/install_browser.sh) saving the page.

    python scripts/web_screenshot.py [docs/images/web-board.png]
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

SCRIPTS = {
    "asker": {
        "steps": [
            {"await": "task"},
            {"message": {"to": "shepherd", "text": "which branch?", "expects_reply": True}},
            {"await": "reply"},
            {"done": {"status": "completed", "summary": "went with {last}"}},
        ]
    },
    "builder": {"steps": [{"await": "task"}, {"await": "any"}]},
    "reviewer": {"steps": [{"await": "task"}, {"await": "any"}]},
}


def _cli(*args: str, session: Path) -> Any:
    argv = [
        sys.executable,
        "-m",
        "actors.surfaces.entry",
        *args,
        "--json",
        "--session",
        str(session),
    ]
    return json.loads(subprocess.run(argv, capture_output=True, text=True, check=True).stdout)


def main() -> int:
    out = Path(sys.argv[1] if len(sys.argv) > 1 else "docs/images/web-board.png")
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        session = Path(tmp) / "session"
        serve = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "actors.surfaces.cli",
                "serve",
                "--session-dir",
                str(session),
                "--json",
            ],
            stdout=subprocess.PIPE,
            start_new_session=True,
        )
        web = None
        try:
            assert serve.stdout is not None
            serve.stdout.readline()  # its first line: the session is up
            for name, script in SCRIPTS.items():
                path = Path(tmp) / f"{name}.json"
                path.write_text(json.dumps(script))
                _cli("spawn", name, "--script", str(path), session=session)
            _cli("delegate", "asker", "pick the release branch", session=session)
            _cli("delegate", "builder", "build release 1.2", session=session)
            web = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "actors.surfaces.cli",
                    "web",
                    "--session",
                    str(session),
                    "--json",
                ],
                stdout=subprocess.PIPE,
                start_new_session=True,
            )
            assert web.stdout is not None
            header = json.loads(web.stdout.readline())["web"]
            options = webdriver.ChromeOptions()
            for flag in ("--headless=new", "--no-sandbox", "--window-size=1280,720"):
                options.add_argument(flag)
            options.binary_location = shutil.which("chromium") or "chromium"
            # the driver named, so selenium never looks for one on the network
            service = webdriver.ChromeService(shutil.which("chromedriver") or "chromedriver")
            driver = webdriver.Chrome(options=options, service=service)
            try:
                driver.get(header["url"] + "?token=" + header["token"])
                WebDriverWait(driver, 60).until(
                    lambda d: d.execute_script(
                        "return document.querySelector('.card[data-lane=needs_parent]') !== null"
                    )
                )
                time.sleep(0.2)  # a picture, not a test: let the last redraw settle
                driver.save_screenshot(str(out))
            finally:
                driver.quit()
        finally:
            for proc in (web, serve):
                if proc is not None and proc.poll() is None:
                    os.killpg(proc.pid, signal.SIGTERM)
                    proc.wait(timeout=30)
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
