"""The launcher's reaper: ``wait_all_exited`` returns only once every exit has been reported
(its ``on_exit`` has returned), never while a report is still on its way. A shutdown relies on
it: what it stops next must find the exit told."""

from __future__ import annotations

import subprocess
import threading

import pytest

from actors.session.launcher import Reaper

pytestmark = pytest.mark.timeout(60)


def test_an_exit_counts_as_reported_only_once_its_report_returned() -> None:
    entered, release = threading.Event(), threading.Event()
    reported: list[int] = []

    def on_exit(code: int) -> None:
        entered.set()
        assert release.wait(30)
        reported.append(code)

    reaper = Reaper()
    try:
        reaper.watch(subprocess.Popen(["true"]), on_exit)
        assert entered.wait(30)  # the process is gone; its report is under way
        assert not reaper.wait_all_exited(0.2)  # not reported yet: still waited for
        release.set()
        assert reaper.wait_all_exited(30) and reported == [0]
    finally:
        release.set()
        reaper.close()
