"""The session's records on JetStream (``actors.transports.nats.journal``,
``actors.transports.nats.lines``), against a real ``nats-server``: records read back in order by
another process's journal, batches larger than a message, one writer only, damage reported, nothing
acknowledged lost across a server SIGKILL, the record of delivery read back as the file's is."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from actors.records.notifications import NotificationFile
from actors.transports.nats.journal import JOURNAL, NatsJournal, NatsNotifications
from actors.transports.nats.lines import CHUNK_BYTES, OUTAGE_CEILING_S, lines_stream, lines_subject
from actors.transports.nats.server import NatsServer, free_port
from protocol.core.errors import SessionUnavailable
from protocol.records.journal import AgentRecord, Record
from protocol.records.notifications import AnyNotification, Notice, TaskCompletion
from protocol.records.tasks import TaskResult

pytestmark = pytest.mark.processes


def agent(index: int, options: dict[str, object] | None = None) -> AgentRecord:
    return AgentRecord(
        agent_id=f"shepherd-agent-{index:016x}",
        name=f"a{index}",
        adapter="scripted",
        capability="c" * 32,
        created_at=float(index),
        options=options or {},
    )


@pytest.fixture
def journal(nats_server: NatsServer, session_id: str) -> Iterator[NatsJournal]:
    made = NatsJournal([nats_server.url], session_id)
    try:
        yield made
    finally:
        made.close()


def reopened(nats_server: NatsServer, session_id: str) -> list[Record]:
    """What a parent started again (another process, another host) reads back."""
    again = NatsJournal([nats_server.url], session_id)
    try:
        records = list(again.read())
        assert again.problems == []
        return records
    finally:
        again.close()


def test_records_are_read_back_in_order_by_another_journal(
    journal: NatsJournal, nats_server: NatsServer, session_id: str
) -> None:
    assert journal.read() == []
    journal.append(agent(1))
    journal.append_many([agent(2), agent(3)])
    journal.append(agent(4))
    assert reopened(nats_server, session_id) == [agent(i) for i in range(1, 5)]


def test_a_batch_larger_than_a_message_is_split_and_read_back_whole(
    journal: NatsJournal, nats_server: NatsServer, session_id: str
) -> None:
    big = "x" * 200_000
    batch = [agent(i, {"note": big}) for i in range(8)]  # ~1.6 MB: more than one message
    journal.append_many(batch)
    assert reopened(nats_server, session_id) == batch
    messages = asyncio.run(_stream_messages(nats_server.url, lines_stream(session_id, JOURNAL)))
    assert messages > 1  # more than one message, none over the bound
    assert messages >= len(batch) * len(big) // CHUNK_BYTES


async def _stream_messages(url: str, stream: str) -> int:
    import nats

    nc = await nats.connect(url)
    try:
        info = await nc.jetstream().stream_info(stream)
        return int(info.state.messages)
    finally:
        await nc.close()


def test_only_one_writer_a_second_one_is_refused_before_it_wrote(
    journal: NatsJournal, nats_server: NatsServer, session_id: str
) -> None:
    journal.append(agent(1))
    second = NatsJournal([nats_server.url], session_id)
    try:
        assert second.read() == [agent(1)]
        journal.append(agent(2))  # the first one goes on
        with pytest.raises(SessionUnavailable, match="only one supervisor may write"):
            second.append(agent(99))
        assert reopened(nats_server, session_id) == [agent(1), agent(2)]
        # and the first one is refused as soon as the second did write
        second.read()
        second.append(agent(3))
        with pytest.raises(SessionUnavailable, match="only one supervisor may write"):
            journal.append(agent(98))
        assert reopened(nats_server, session_id) == [agent(1), agent(2), agent(3)]
    finally:
        second.close()


def test_a_damaged_line_is_reported_by_message_and_line_and_the_rest_read(
    journal: NatsJournal, nats_server: NatsServer, session_id: str
) -> None:
    journal.append(agent(1))
    asyncio.run(_publish_raw(nats_server.url, lines_subject(session_id, JOURNAL), b'{"not": 1}\n'))
    reader = NatsJournal([nats_server.url], session_id)
    try:
        assert reader.read() == [agent(1)]
        (problem,) = reader.problems
        assert problem.kind == "corrupt"
        assert f"{lines_stream(session_id, JOURNAL)}, message 2" in problem.path
        assert problem.line == 1
        reader.append(agent(2))  # reading moved its expected last sequence past the damage
    finally:
        reader.close()


async def _publish_raw(url: str, subject: str, data: bytes) -> None:
    import nats

    nc = await nats.connect(url)
    try:
        await nc.jetstream().publish(subject, data)
    finally:
        await nc.close()


def test_nothing_acknowledged_is_lost_across_a_server_sigkill(
    nats_server: NatsServer, session_id: str
) -> None:
    first = NatsJournal([nats_server.url], session_id, request_timeout_s=1.0, outage_s=2.0)
    written = [agent(i) for i in range(50)]
    for record in written:
        first.append(record)
    nats_server.kill()
    with pytest.raises(SessionUnavailable, match="took no append for 2 s"):
        first.append(agent(999))  # not acknowledged: the caller tells nobody of it
    first.close()
    nats_server.start().wait_ready()
    assert reopened(nats_server, session_id) == written


def test_an_append_waits_out_a_server_restart_and_is_stored_once(
    nats_server: NatsServer, session_id: str
) -> None:
    first = NatsJournal([nats_server.url], session_id, request_timeout_s=0.3)
    written = [agent(i) for i in range(20)]
    for record in written:
        first.append(record)
    nats_server.kill()
    outcome: list[BaseException | None] = []
    appending = threading.Thread(target=lambda: outcome.append(_try(first.append, agent(20))))
    appending.start()
    appending.join(timeout=2.0)  # several attempts' timeouts: still waiting, not given up
    assert appending.is_alive() and outcome == [], outcome
    nats_server.start().wait_ready()  # within the append's outage ceiling
    appending.join(timeout=OUTAGE_CEILING_S + 30)
    assert outcome == [None], outcome
    first.append(agent(21))  # and the writer goes on after it
    first.close()
    assert reopened(nats_server, session_id) == [*written, agent(20), agent(21)]


def _try(fn: Callable[[AgentRecord], None], record: AgentRecord) -> BaseException | None:
    try:
        fn(record)
    except BaseException as exc:  # the test reads it
        return exc
    return None


def test_the_stream_leaders_sigkill_mid_run_loses_no_record_and_repeats_none(
    nats_cluster: list[NatsServer], session_id: str
) -> None:
    urls = [server.url for server in nats_cluster]
    writer = NatsJournal(urls, session_id, replicas=3, request_timeout_s=1.0)
    try:
        leader = _leader(urls[0], lines_stream(session_id, JOURNAL))
        written = [agent(i) for i in range(300)]
        for index, record in enumerate(written):
            if index == 100:
                next(s for s in nats_cluster if s.name == leader).kill()
            writer.append(record)  # each waits out the election; none raises
    finally:
        writer.close()
    alive = next(s for s in nats_cluster if s.name != leader)
    again = NatsJournal([alive.url], session_id, replicas=3)
    try:
        assert list(again.read()) == written
        assert again.problems == []
    finally:
        again.close()


def _leader(url: str, stream: str) -> str:
    async def ask() -> str:
        import nats

        nc = await nats.connect(url)
        try:
            info = await nc.jetstream().stream_info(stream)
            assert info.cluster is not None and info.cluster.leader
            return str(info.cluster.leader)
        finally:
            await nc.close()

    return asyncio.run(ask())


def test_servers_out_of_reach_are_session_unavailable_in_bounded_time(session_id: str) -> None:
    with pytest.raises(SessionUnavailable, match="did not answer"):
        NatsJournal([f"nats://127.0.0.1:{free_port()}"], session_id, request_timeout_s=0.5)


def test_the_record_of_delivery_is_read_back_as_the_file_reads_it(
    nats_server: NatsServer, session_id: str, tmp_path: Path
) -> None:
    result = TaskResult(
        task_id="shepherd-task-0000000000000001",
        agent_id="shepherd-agent-0000000000000001",
        status="completed",
        ok=True,
        return_code=0,
        completed_at=2.0,
        text="done",
    )
    completion = TaskCompletion(
        created_at=2.0,
        watcher_id="shepherd-watcher-0000000000000001",
        ids=(result.task_id,),
        results=(result,),
    )
    notes: list[AnyNotification] = [Notice(created_at=1.0, code="x", text="hello"), completion]
    on_servers = NatsNotifications([nats_server.url], session_id)
    on_disk = NotificationFile(tmp_path / "notifications.jsonl")
    try:
        for note in notes:
            on_servers(note)
            on_disk(note)
    finally:
        on_servers.close()
    again = NatsNotifications([nats_server.url], session_id)
    try:
        assert again.read_deliveries() == on_disk.read_deliveries()
        assert again.read_deliveries()[0] == {completion.watcher_id: {result.task_id}}
        assert again.problems == []
    finally:
        again.close()
        on_disk.close()


def test_appends_from_several_threads_at_once_are_all_kept(
    nats_server: NatsServer, session_id: str
) -> None:
    """The broker and the watchers append to the records from their own threads: appends at
    once must not refuse each other as a second writer (each names the last sequence)."""
    journal = NatsJournal([nats_server.url], session_id)
    failures: list[BaseException] = []
    start = threading.Barrier(8)

    def write(worker: int) -> None:
        start.wait()
        for index in range(25):
            try:
                journal.append(agent(worker * 100 + index))
            except BaseException as exc:  # the test reads it
                failures.append(exc)

    threads = [threading.Thread(target=write, args=(w,)) for w in range(8)]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=120)
    finally:
        journal.close()
    assert failures == []
    back = reopened(nats_server, session_id)
    # only agents' records were written: anything else read back fails the comparison
    ids = [r.agent_id if isinstance(r, AgentRecord) else repr(r) for r in back]
    assert sorted(ids) == sorted(agent(w * 100 + i).agent_id for w in range(8) for i in range(25))
