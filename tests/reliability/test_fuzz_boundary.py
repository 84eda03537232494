"""Fuzzing the boundary: envelope decoding, settings files, script files, replay lines, and
whatever lands in a running supervisor's parent inbox.

The pure targets (``tests/reliability/fuzz_targets.py``) run as Hypothesis properties; the
deep-nesting inputs, which found bugs, have explicit tests of their own below. Against a live
:class:`~actors.session.supervisor.Supervisor`: random files planted into ``inbox/parent/new/`` and
envelopes with random fields published as a real agent — each one ends as a quarantine entry
with a reason file, or as a receipt (accepted or refused), or as a typed refusal to the
publisher; the supervisor keeps working, and a valid call and a delegated task afterwards are
handled. Every test reports how many inputs it tried.

``scripts/fuzz.py --target NAME --seconds N`` runs one pure target for longer.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import subprocess
import sys
import threading
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from actors.runtime.transport import PARENT_INBOX
from actors.surfaces.config import load_settings
from actors.transports.mailbox.files import write_all
from actors.transports.mailbox.mailbox import Mailbox
from actors.transports.mailbox.reply_inboxes import ReplyInbox
from protocol.core.errors import InvalidEnvelope, ShepherdError
from protocol.core.ids import PARENT_ID, IdKind, make_id
from protocol.records.notifications import TaskCompletion
from protocol.records.settings import Settings
from protocol.scripted.script import ScriptError, load_script_text
from protocol.watchdog.replay import ReplayLineError, decode_replay_line
from protocol.wire.envelopes import (
    AckEnvelope,
    AnyEnvelope,
    CallEnvelope,
    ResultEnvelope,
    RuntimeEnvelope,
    decode_envelope,
)
from tests.reliability.fuzz_targets import (
    OPTIONAL_FIELDS,
    TARGETS,
    deep,
    envelope_documents,
    json_values,
    valid_envelope_docs,
)
from tests.reliability.live import Changes, Live, file_mailbox, write_script

#: derandomized: CI runs the same inputs every time (each test also checks that they reach
#: every outcome, which must not depend on luck); ``scripts/fuzz.py`` explores with new seeds
FUZZ = settings(
    deadline=None,
    database=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


#: against a live supervisor a failing example costs seconds of waiting: report it unshrunk
LIVE = settings(FUZZ, phases=(Phase.explicit, Phase.generate))


def _property(name: str, report: Counter[str], examples: int, **check: Any) -> None:
    target = TARGETS[name]

    @settings(FUZZ, max_examples=examples)
    @given(target.shallow)
    def run(item: Any) -> None:
        outcome = target.check(item, **check)
        report["inputs"] += 1
        report[outcome] += 1

    run()


# ---------------------------------------------------------------------- envelopes


def test_envelope_decoding_gives_an_envelope_or_invalid_envelope(report: Counter[str]) -> None:
    _property("envelope", report, 400)
    assert report["invalid_envelope"] and sum(
        v for k, v in report.items() if k.startswith("decoded:")
    )


@pytest.mark.parametrize("depth", [100, 1_000, 100_000])
@pytest.mark.parametrize("shape", ["array", "object"])
def test_deeply_nested_envelopes_are_invalid_envelopes(depth: int, shape: str) -> None:
    text = deep(depth) if shape == "array" else deep(depth, '{"a":', "}")
    with pytest.raises(InvalidEnvelope):
        decode_envelope(text.encode())


# ---------------------------------------------------------------------- settings files


def test_settings_files_never_stop_start_up(report: Counter[str]) -> None:
    """Any bytes as the project settings file: settings and warnings naming the file, never
    an exception (the range of the values is the next test's business)."""
    _property("settings", report, 200, sane=False)
    assert report["warned"] and report["clean"]


@pytest.mark.parametrize(
    ("line", "key"),
    [
        ("fallback_poll_s = nan", "fallback_poll_s"),
        ("fallback_poll_s = inf", "fallback_poll_s"),
        ("fallback_poll_s = -1.0", "fallback_poll_s"),
        ("max_envelope_bytes = -1", "max_envelope_bytes"),
        ("max_queue_depth = 0", "max_queue_depth"),
        ("stale_wait_threshold_s = -5.0", "stale_wait_threshold_s"),
        ("coalesce_ms = nan", "coalesce_ms"),
        ("output_lines = -3", "output_lines"),
    ],
)
def test_out_of_range_settings_are_warned_about_and_ignored(
    tmp_path: Path, line: str, key: str
) -> None:
    """Regression (found by this fuzzing): ``Settings`` had no ranges, so these loaded
    silently; ``nan`` or ``inf`` as ``fallback_poll_s`` then killed the mailbox receiver thread
    (``int(nan * 1000)``), and the supervisor never read its inbox again."""
    (tmp_path / ".shepherd").mkdir()
    (tmp_path / ".shepherd" / "config.toml").write_text(line + "\n")
    loaded, warnings = load_settings(tmp_path, user_file=tmp_path / "absent.toml")
    assert getattr(loaded, key) == getattr(Settings(), key), f"{line!r} was used"
    assert any(key in w for w in warnings), warnings


def test_a_nan_poll_interval_from_a_settings_file_keeps_the_mailbox_alive(tmp_path: Path) -> None:
    (tmp_path / ".shepherd").mkdir()
    (tmp_path / ".shepherd" / "config.toml").write_text("fallback_poll_s = nan\n")
    loaded, _ = load_settings(tmp_path, user_file=tmp_path / "absent.toml")
    session_id = make_id(IdKind.SESSION, secrets.token_hex(8))
    got = threading.Event()
    with Mailbox.create(tmp_path / "mailbox", session_id, loaded) as mailbox:
        mailbox.ensure_inbox(PARENT_INBOX)
        mailbox.subscribe(PARENT_INBOX, lambda env: got.set())
        mailbox.publish(PARENT_INBOX, _ping(session_id, "t" * 32, None))
        assert got.wait(5), "the receiver thread died: nothing published is ever delivered"


@pytest.mark.parametrize(
    "text", ["a = " + deep(2_000), "a = " + deep(2_000, "{b = ", "}"), "a = " + deep(100_000)]
)
def test_a_deeply_nested_settings_file_is_a_warning(tmp_path: Path, text: str) -> None:
    """Regression (found by this fuzzing): tomllib raises RecursionError, which
    ``read_config_file`` did not catch, so ``shepherd serve`` died at start-up."""
    (tmp_path / ".shepherd").mkdir()
    path = tmp_path / ".shepherd" / "config.toml"
    path.write_text(text)
    loaded, warnings = load_settings(tmp_path, user_file=tmp_path / "absent.toml")
    assert loaded == Settings()
    assert any(str(path) in w for w in warnings), warnings


# ---------------------------------------------------------------------- script files


def test_script_files_give_a_script_or_a_script_error(report: Counter[str]) -> None:
    _property("script", report, 300)
    assert report["script_error"] and report["script:True"]


@pytest.mark.parametrize(
    ("text", "as_toml"),
    [
        (deep(1_000), False),
        ('{"steps": [' + deep(1_000, '{"say": ', "}") + "]}", False),
        ("steps = " + deep(1_000), True),
        ("steps = " + deep(100_000), True),
    ],
    ids=["json-array", "json-object", "toml-array", "toml-array-100k"],
)
def test_a_deeply_nested_script_is_a_script_error(text: str, as_toml: bool) -> None:
    """Regression (found by this fuzzing): msgspec's decoders raise RecursionError, not
    DecodeError, which ``load_script_text`` did not turn into a ScriptError."""
    with pytest.raises(ScriptError):
        load_script_text(text, toml=as_toml)


# ---------------------------------------------------------------------- watchdog replay lines


def test_replay_lines_give_verdicts_or_a_replay_line_error(report: Counter[str]) -> None:
    _property("replay", report, 150)
    assert report["line_error"] and report["replayed"]


@pytest.mark.parametrize("depth", [1_000, 100_000])
def test_a_deeply_nested_replay_line_is_a_replay_line_error(depth: int) -> None:
    """Regression (found by this fuzzing): ``decode_replay_line`` let RecursionError out
    (``shepherd watchdog replay`` printed a traceback instead of naming the line)."""
    with pytest.raises(ReplayLineError):
        decode_replay_line('{"kind": "message", "args": ' + deep(depth) + "}", 7)


# ---------------------------------------------------------------------- a live supervisor

IDLE = {"steps": [{"await": "task"}, {"await": "any"}]}
FINISHER = {"steps": [{"await": "task"}, {"done": {"status": "completed"}}, {"await": "any"}]}


def _ping(session_id: str, token: str, reply_inbox: str | None) -> CallEnvelope:
    message_id = make_id(IdKind.MESSAGE, secrets.token_hex(8))
    return CallEnvelope(
        message_id=message_id,
        session_id=session_id,
        sender_id=reply_inbox or message_id,
        target_id=PARENT_ID,
        created_at=0.0,
        capability=token,
        reply_inbox=reply_inbox,
        op="ping",
    )


class Receipts:
    """What the parent sends back to our one-shot inbox: acks and call results. Each one
    arriving calls ``on_arrival`` (to wake a waiting test)."""

    def __init__(self, on_arrival: Callable[[], object]) -> None:
        self.items: list[AnyEnvelope] = []
        self._lock = threading.Lock()
        self._on_arrival = on_arrival

    def __call__(self, env: AnyEnvelope) -> None:
        with self._lock:
            self.items.append(env)
        self._on_arrival()

    def for_id(self, message_id: str) -> list[AnyEnvelope]:
        with self._lock:
            return [
                e
                for e in self.items
                if (isinstance(e, AckEnvelope) and e.ack_for == message_id)
                or (isinstance(e, ResultEnvelope) and e.call_id == message_id)
            ]


class Reasons:
    """The quarantine's reason files (each read once), and lookups by message id."""

    def __init__(self, root: Path) -> None:
        self.dir = root / "quarantine"
        self._read: dict[str, dict[str, Any]] = {}

    def all(self) -> list[dict[str, Any]]:
        for name in os.listdir(self.dir):
            if name.endswith(".reason") and name not in self._read:
                with contextlib.suppress(OSError, ValueError):
                    self._read[name] = json.loads((self.dir / name).read_bytes())
        return list(self._read.values())

    def names(self, message_id: str) -> bool:
        """Some reason names this message (by id, or by the file it was in)."""
        return any(
            r.get("message_id") == message_id or message_id in str(r.get("file"))
            for r in self.all()
        )

    def entries(self) -> list[str]:
        return [n for n in os.listdir(self.dir) if not n.endswith(".reason")]


def _plant(new_dir: Path, name: str, data: bytes, *, whole: bool = False) -> None:
    """What a hostile same-user process can do: write any file straight into new/ (a reader
    may then see it half-written), or, ``whole``, beside it in tmp/ and rename it in, as a
    publisher does."""
    path = new_dir.parent / "tmp" / f"planted-{secrets.token_hex(8)}" if whole else new_dir / name
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        write_all(fd, data)
    finally:
        os.close(fd)
    if whole:
        os.rename(path, new_dir / name)


_seq = iter(range(10**9))


def _envelope_name(message_id: str) -> str:
    return f"{1:020d}.{os.getpid()}.{next(_seq)}.{message_id}.json"


file_names = st.one_of(
    st.builds(lambda: _envelope_name(make_id(IdKind.MESSAGE, secrets.token_hex(8)))),
    st.text(
        alphabet=st.characters(codec="utf-8", blacklist_characters="/\x00"),
        min_size=1,
        max_size=120,
    ).filter(lambda n: n not in (".", "..") and len(n.encode()) < 250),
    st.sampled_from([".hidden", "x.reason", "00000000000000000001.1.1.shepherd-message-zz.json"]),
)


def test_garbage_in_a_running_supervisors_inbox_is_quarantined_and_nothing_else_breaks(
    live_supervisor: Callable[..., Live],
    tmp_path: Path,
    report: Counter[str],
) -> None:
    sup, sink, _ = live_supervisor(Settings(max_envelope_bytes=16 * 1024))
    session_id = sup.session_id
    reasons = Reasons(sup.mailbox_root)
    new_dir = file_mailbox(sup).inbox_path(PARENT_INBOX) / "new"
    target = sup.session.spawn("target", script=write_script(tmp_path, "idle", IDLE))
    capability = sup.gate.capability(target.agent_id)
    assert capability is not None

    # a client of our own, with a one-shot inbox for receipts (as `shepherd-child` makes);
    # a wait for "a receipt or a quarantine reason" wakes on either
    me = make_id(IdKind.MESSAGE, secrets.token_hex(8))
    changes = Changes(reasons.dir)
    receipts = Receipts(changes.nudge)
    client = Mailbox.open(sup.mailbox_root, session_id)
    inbox = ReplyInbox(client, me)  # locked, like every one-shot inbox: the parent's sweep keeps it
    client.subscribe(me, receipts)
    try:
        # 1. random files, random names, planted straight into new/
        @settings(LIVE, max_examples=250)
        @given(
            name=file_names,
            data=st.one_of(
                st.binary(max_size=3000), json_values.map(lambda v: json.dumps(v).encode())
            ),
        )
        def garbage(name: str, data: bytes) -> None:
            if os.path.lexists(new_dir / name):
                return
            before = len(reasons.entries())
            _plant(new_dir, name, data)
            assert sup.mailbox.wait_drained(10)
            assert not os.path.lexists(new_dir / name), f"{name!r} is still in new/"
            assert len(reasons.entries()) == before + 1, f"{name!r} was not quarantined"
            report["planted_files"] += 1

        garbage()
        entries = reasons.entries()
        assert len(entries) == report["planted_files"]
        assert all((reasons.dir / f"{e}.reason").exists() for e in entries), "entry without reason"
        written = reasons.all()
        assert len(written) == len(entries)
        assert all(r["code"] and r["message"] and r["inbox"] == PARENT_INBOX for r in written)

        # 2. envelopes with random fields as the real agent, written the way a child writes
        @settings(LIVE, max_examples=250)
        @given(
            doc=st.one_of(valid_envelope_docs(), envelope_documents()),
            forge=st.sampled_from(["", "", "", "capability", "session"]),
        )
        def as_agent(doc: dict[str, Any], forge: str) -> None:
            message_id = make_id(IdKind.MESSAGE, secrets.token_hex(8))
            doc.update(message_id=message_id, sender_id=target.agent_id, reply_inbox=me)
            doc.setdefault("session_id", session_id)
            if doc.get("session_id") == make_id(IdKind.SESSION, "5e55105e55105e55"):
                doc["session_id"] = session_id
            doc["capability"] = capability
            if forge == "capability":
                doc["capability"] = secrets.token_hex(16)
            elif forge == "session":
                doc["session_id"] = make_id(IdKind.SESSION, secrets.token_hex(8))
            data = json.dumps(doc, ensure_ascii=False).encode("utf-8", "surrogatepass")
            _plant(new_dir, _envelope_name(message_id), data, whole=True)
            assert sup.mailbox.wait_drained(10)
            report["agent_envelopes"] += 1
            try:
                decoded: AnyEnvelope | None = decode_envelope(data)
            except InvalidEnvelope:
                decoded = None
            if (
                isinstance(decoded, RuntimeEnvelope)
                and decoded.session_id == session_id
                and forge != "capability"
                and len(data) <= 16 * 1024
            ):
                # a runtime event is handled without a receipt (the inbox is drained already)
                quarantined = [
                    r
                    for r in reasons.all()
                    if r.get("message_id") == message_id or message_id in str(r.get("file"))
                ]
                assert not quarantined, f"runtime event quarantined: {doc}: {quarantined}"
                report["runtime_event_handled"] += 1
                return
            assert changes.wait_until(
                lambda: receipts.for_id(message_id) or reasons.names(message_id), timeout=10
            ), f"no receipt and no quarantine for {doc}"
            acks = receipts.for_id(message_id)
            if acks:
                assert len(acks) == 1, acks
                ack = acks[0]
                assert isinstance(ack, AckEnvelope)
                report["receipt_accepted" if ack.accepted else "receipt_refused"] += 1
            else:
                report["quarantined_with_reason"] += 1

        as_agent()

        # 3. envelopes with random field values through the real publish path (publisher checks)
        publisher = Mailbox.open(sup.mailbox_root, session_id)

        @settings(LIVE, max_examples=150)
        @given(
            field=st.sampled_from(sorted(OPTIONAL_FIELDS)),
            data=st.data(),
        )
        def published(field: str, data: st.DataObject) -> None:
            message_id = make_id(IdKind.MESSAGE, secrets.token_hex(8))
            doc = {
                "kind": "message",
                "message_id": message_id,
                "session_id": session_id,
                "sender_id": target.agent_id,
                "target_id": "shepherd",
                "created_at": 0.0,
                "capability": capability,
                "content": "fuzz",
                "reply_inbox": me,
            }
            doc[field] = data.draw(OPTIONAL_FIELDS[field])
            report["published"] += 1
            try:
                envelope = msgspec.convert(doc, AnyEnvelope)
            except msgspec.ValidationError:
                report["refused_before_publish"] += 1
                return
            try:
                publisher.publish(PARENT_INBOX, envelope)
            except ShepherdError as exc:
                report[f"publish_refused:{exc.code}"] += 1
                return
            assert sup.mailbox.wait_drained(10)
            reply_to = envelope.reply_inbox
            if reply_to == me:
                assert changes.wait_until(
                    lambda: (
                        receipts.for_id(envelope.message_id) or reasons.names(envelope.message_id)
                    ),
                    timeout=10,
                ), f"no receipt and no quarantine for {envelope}"
                report["published_accepted_and_answered"] += 1
            else:
                report["published_accepted_receipt_elsewhere"] += 1

        try:
            published()
        finally:
            publisher.close()

        # 4. the supervisor still works: a call is answered and a new agent's task completes
        ping = _ping(session_id, sup.client_token, me)
        client.publish(PARENT_INBOX, ping)
        assert changes.wait_until(lambda: receipts.for_id(ping.message_id), timeout=20), (
            "ping unanswered"
        )
        (answer,) = receipts.for_id(ping.message_id)
        assert isinstance(answer, ResultEnvelope) and answer.ok
        finisher = sup.session.spawn("after", script=write_script(tmp_path, "fin", FINISHER))
        task = sup.session.delegate(finisher.agent_id, "one more task")
        result = sup.session.wait(task.task_id, timeout_s=30)
        assert [r.status for r in result.completed] == ["completed"]
        assert [n for n in sink.items if isinstance(n, TaskCompletion)] == []  # wait's own sink
        assert sup.mailbox.wait_drained(10) and not os.listdir(new_dir)  # nothing left unread
    finally:
        client.close()
        inbox.remove()
        changes.close()
    report["inputs"] = report["planted_files"] + report["agent_envelopes"] + report["published"]


# ---------------------------------------------------------------------- the standalone runner


def test_the_fuzz_runner_runs_a_target_for_the_given_time(report: Counter[str]) -> None:
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run(
        [sys.executable, "scripts/fuzz.py", "--target", "envelope", "--seconds", "2"],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=90,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    found = re.search(r"^envelope: (\d+) inputs in [\d.]+ s, no contract broken", done.stdout, re.M)
    assert found, done.stdout
    report["inputs"] = int(found.group(1))
    assert report["inputs"] > 0
