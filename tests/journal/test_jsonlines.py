"""The append-only JSON-lines files (journal, notifications) after a crash: a torn tail of any
length is cut off and kept aside before anything is appended, a corrupt record anywhere is
reported with its file and line, and appending after the repair gives a readable file."""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

import msgspec
import pytest

from actors.records import jsonlines
from actors.records.journal_file import FileJournal
from actors.records.notifications import NotificationFile
from protocol.records.journal import AgentRecord, WatcherRecord
from protocol.records.notifications import TaskCompletion
from protocol.records.tasks import TaskRecord, TaskResult, TaskState


def _records() -> list[msgspec.Struct]:
    return [
        AgentRecord(
            agent_id="shepherd-agent-1", name="a", adapter="scripted", capability="c", created_at=1
        ),
        TaskRecord(
            task_id="shepherd-task-1",
            agent_id="shepherd-agent-1",
            description="do ünïcode things",
            state=TaskState.CREATED,
            created_at=2.0,
        ),
        WatcherRecord(watcher_id="shepherd-watcher-1", ids=("shepherd-task-1",), created_at=3.0),
    ]


def _journal_bytes(tmp_path: Path) -> tuple[bytes, bytes]:
    """(every line but the last, the last line) of a real journal."""
    path = tmp_path / "model.jsonl"
    journal = FileJournal(path, fsync=False)
    for record in _records():
        journal.append(record)
    journal.close()
    lines = path.read_bytes().splitlines(keepends=True)
    return b"".join(lines[:-1]), lines[-1]


def test_a_torn_tail_of_every_length_is_cut_off_kept_aside_and_appending_works_again(
    tmp_path: Path, enable_logs: list[str]
) -> None:
    head, last = _journal_bytes(tmp_path)
    extra = AgentRecord(
        agent_id="shepherd-agent-2", name="b", adapter="scripted", capability="d", created_at=9
    )
    cuts = range(1, len(last))  # 1 byte .. everything but the newline
    for cut in cuts:
        case = tmp_path / f"cut-{cut}"
        case.mkdir()
        path = case / "journal.jsonl"
        path.write_bytes(head + last[:cut])

        journal = FileJournal(path)
        assert path.read_bytes() == head, cut  # cut off before anything is appended
        (problem,) = journal.problems
        assert problem.kind == "torn_tail" and problem.line == 3, (cut, problem)
        side = case / "journal.jsonl.torn-1"
        assert problem.kept_in == str(side)
        assert side.read_bytes() == last[:cut]  # kept aside, byte for byte
        assert stat.S_IMODE(side.stat().st_mode) == 0o600
        assert journal.read() == _records()[:-1]
        journal.append(extra)
        journal.close()

        again = FileJournal(path)
        assert again.read() == [*_records()[:-1], extra], cut
        assert again.problems == [], cut
        again.close()
    warnings = [x for x in enable_logs if x.startswith("WARNING") and "cut short" in x]
    assert len(warnings) == len(cuts)
    assert all("journal.jsonl line 3" in w and ".torn-1" in w for w in warnings)


def test_a_file_that_is_only_a_torn_line_is_emptied_and_two_tears_keep_two_side_files(
    tmp_path: Path,
) -> None:
    path = tmp_path / "journal.jsonl"
    path.write_bytes(b'{"type":"ag')
    first = FileJournal(path)
    assert path.read_bytes() == b"" and first.problems[0].line == 1
    first.close()
    path.write_bytes(b'{"type":"task"')
    FileJournal(path).close()
    assert (tmp_path / "journal.jsonl.torn-1").read_bytes() == b'{"type":"ag'
    assert (tmp_path / "journal.jsonl.torn-2").read_bytes() == b'{"type":"task"'


@pytest.mark.parametrize(
    "bad",
    [
        b"not json at all\n",
        b'{"type":"task","record":{"task_id": 3}}\n',  # wrong field type
        b'{"type":"no-such-record","record":{}}\n',  # unknown record type
        b'{"type":"agent","rec\n',  # half a record, on a line of its own
        b"\xff\xfe garbage\n",  # not UTF-8
        b"\n",  # an empty line
    ],
)
def test_a_corrupt_record_in_the_middle_is_reported_by_line_and_the_rest_is_read(
    bad: bytes, tmp_path: Path, enable_logs: list[str]
) -> None:
    head, last = _journal_bytes(tmp_path)
    path = tmp_path / "journal.jsonl"
    first, second = head.splitlines(keepends=True)
    path.write_bytes(first + bad + second + last)
    journal = FileJournal(path)
    assert journal.read() == _records()
    (problem,) = journal.problems
    assert (problem.kind, problem.line) == ("corrupt", 2)
    warnings = [x for x in enable_logs if x.startswith("WARNING")]
    assert len(warnings) == 1 and f"{path} line 2: record cannot be read" in warnings[0]
    journal.close()


def test_a_failed_append_leaves_no_fragment_for_the_next_record(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "journal.jsonl"
    journal = FileJournal(path)
    journal.append(_records()[0])

    def half_then_no_space(fd: int, data: bytes | memoryview) -> int:
        os.write(fd, bytes(data[: len(data) // 2]))
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(jsonlines, "_write", half_then_no_space)
    with pytest.raises(OSError, match="No space left"):
        journal.append(_records()[1])
    monkeypatch.setattr(jsonlines, "_write", os.write)
    journal.append(_records()[2])
    journal.close()
    again = FileJournal(path)
    assert again.read() == [_records()[0], _records()[2]] and again.problems == []


def test_a_short_write_is_completed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "journal.jsonl"
    monkeypatch.setattr(jsonlines, "_write", lambda fd, data: os.write(fd, bytes(data[:7])))
    journal = FileJournal(path)
    for record in _records():
        journal.append(record)
    journal.close()
    assert FileJournal(path).read() == _records()


def _completion(watcher: str, task: str) -> TaskCompletion:
    result = TaskResult(
        task_id=task,
        agent_id="shepherd-agent-1",
        status="completed",
        ok=True,
        return_code=0,
        completed_at=1.0,
        text="ok",
    )
    return TaskCompletion(created_at=1.0, watcher_id=watcher, ids=(task,), results=(result,))


def test_the_notifications_file_keeps_every_delivery_after_a_torn_tail(tmp_path: Path) -> None:
    """A completion appended after a torn line must still count as delivered (else a restart
    hands it over a second time)."""
    path = tmp_path / "notifications.jsonl"
    first = msgspec.json.encode(_completion("w1", "t1")) + b"\n"
    torn = msgspec.json.encode(_completion("w2", "t2"))[:40]
    path.write_bytes(first + torn)
    notes = NotificationFile(path)
    assert [p.kind for p in notes.problems] == ["torn_tail"]
    notes(_completion("w3", "t3"))
    notes.close()
    again = NotificationFile(path)
    delivered = again.read_deliveries().delivered
    assert delivered == {"w1": {"t1"}, "w3": {"t3"}}
    assert again.problems == []


def test_a_batch_of_records_is_one_write_and_one_fsync_and_reads_back_in_order(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "journal.jsonl"
    journal = FileJournal(path)
    journal.append(_records()[0])
    syncs: list[int] = []
    writes: list[int] = []
    real_fsync, real_write = os.fsync, jsonlines._write

    def fsync(fd: int) -> None:
        syncs.append(fd)
        real_fsync(fd)

    def write(fd: int, data: memoryview) -> int:
        writes.append(len(data))
        return real_write(fd, data)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(jsonlines, "_write", write)
    journal.append_many(_records()[1:] * 50)
    assert len(syncs) == 1 and len(writes) == 1
    journal.append_many([])  # nothing to write: no write, no fsync
    assert len(syncs) == 1
    journal.close()
    assert FileJournal(path).read() == [_records()[0], *_records()[1:] * 50]


def test_a_failed_batch_leaves_none_of_its_records(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "journal.jsonl"
    journal = FileJournal(path)
    journal.append(_records()[0])

    def half_then_no_space(fd: int, data: bytes | memoryview) -> int:
        os.write(fd, bytes(data[: len(data) // 2]))
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(jsonlines, "_write", half_then_no_space)
    with pytest.raises(OSError, match="No space left"):
        journal.append_many(_records()[1:] * 3)
    monkeypatch.setattr(jsonlines, "_write", os.write)
    journal.append(_records()[2])
    journal.close()
    again = FileJournal(path)
    assert again.read() == [_records()[0], _records()[2]] and again.problems == []
