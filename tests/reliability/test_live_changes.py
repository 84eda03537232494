"""The tests' own file watch (:class:`tests.reliability.live.Changes`): a test that waits for a
file still sees it when inotify is refused (every inotify instance of the user in use by other
processes, as when several suites run at once), by checking again at a pace."""

from __future__ import annotations

import errno
import threading
from pathlib import Path

import pytest

from tests.reliability import live


def test_changes_without_inotify_still_sees_a_new_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def refused(*_: object) -> None:
        raise OSError(errno.EMFILE, "inotify_init1 failed: Too many open files")

    monkeypatch.setattr(live, "InotifyWaker", refused)
    target = tmp_path / "made"
    with live.Changes(tmp_path) as changes:
        maker = threading.Thread(target=target.write_text, args=("x",))
        maker.start()
        try:
            assert changes.wait_until(target.exists, timeout=30) is True
        finally:
            maker.join(timeout=30)
