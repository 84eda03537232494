"""A fake parent for the child bridge tests: a real session mailbox, the ``parent`` inbox
collected on a Condition (never a sleep), receipts like the broker's, and real
``shepherd-child`` processes that are always killed at teardown."""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any

import msgspec
import pytest

from actors.runtime.procs import session_members
from actors.runtime.transport import PARENT_INBOX
from actors.transports.mailbox.mailbox import Mailbox
from protocol.core.errors import ErrorInfo, ForbiddenSender
from protocol.core.ids import PARENT_ID, IdKind, make_id
from protocol.records.settings import Settings
from protocol.records.tasks import TaskResult
from protocol.wire.envelopes import (
    AckEnvelope,
    AnyEnvelope,
    MessageEnvelope,
    ReplyEnvelope,
    RuntimeEnvelope,
    TaskDoneEnvelope,
    TaskEnvelope,
)

WAIT_S = 60.0  # a ceiling on waits for events: generous, so a busy machine is never a failure
REPO = Path(__file__).resolve().parents[2]

#: answer(envelope) -> None (no receipt at all) or (accepted, error, request_id, result)
Answer = Callable[
    [AnyEnvelope], tuple[bool, ErrorInfo | None, str | None, TaskResult | None] | None
]


def new_id(kind: IdKind) -> str:
    return make_id(kind, secrets.token_hex(8))


def accept_all(env: AnyEnvelope) -> tuple[bool, None, str | None, None]:
    request_id = env.message_id if isinstance(env, MessageEnvelope) and env.expects_reply else None
    return True, None, request_id, None


class Bridge:
    """One started ``shepherd-child run`` process and its log."""

    def __init__(self, proc: subprocess.Popen[bytes], log_path: Path, log: IO[bytes]) -> None:
        self.proc = proc
        self.log_path = log_path
        self._log = log

    @property
    def pid(self) -> int:
        return self.proc.pid

    def log(self) -> str:
        self._log.flush()
        return self.log_path.read_text(errors="replace")[-4000:]

    def wait(self, timeout: float = WAIT_S) -> int:
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"bridge did not exit; log:\n{self.log()}") from None

    def kill(self) -> None:
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=WAIT_S)
        # whatever the bridge's session still holds (it leads one: start_new_session)
        for pid in session_members(self.proc.pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        self._log.close()


class FakeParent:
    """The parent side of one agent: the session mailbox, the ``parent`` inbox, receipts."""

    def __init__(self, tmp_path: Path) -> None:
        self.tmp_path = tmp_path
        self.root = tmp_path / "mb"
        self.session_dir = tmp_path / "session"
        self.session_dir.mkdir()
        self.session_id = new_id(IdKind.SESSION)
        self.agent_id = new_id(IdKind.AGENT)
        self.peer_id = new_id(IdKind.AGENT)
        self.capability = secrets.token_hex(16)
        self.task_id: str | None = None
        self.answer: Answer = accept_all
        #: while set and not yet opened, the parent's receiver blocks on each envelope (its
        #: inbox then fills up, as behind a busy parent)
        self.gate: threading.Event | None = None
        self.items: list[AnyEnvelope] = []
        self._cond = threading.Condition()
        self.mailbox = Mailbox.create(
            self.root,
            self.session_id,
            Settings(fallback_poll_s=30.0),
            validate=self._validate,
        )
        self.mailbox.ensure_inbox(PARENT_INBOX)
        self.mailbox.ensure_inbox(self.agent_id)
        self.mailbox.subscribe(PARENT_INBOX, self._on_envelope)
        self.bridges: list[Bridge] = []

    # ------------------------------------------------------------------ receiving

    def _validate(self, inbox: str, env: AnyEnvelope) -> None:
        # what the broker checks: only this agent, with its capability, may write to us
        if env.sender_id != self.agent_id or env.capability != self.capability:
            raise ForbiddenSender(f"{env.sender_id} is not our agent or has a wrong capability")

    def _on_envelope(self, env: AnyEnvelope) -> None:
        if self.gate is not None:
            self.gate.wait(WAIT_S)
        try:
            # the receipt first, as the broker sends it in the run that handles the envelope: a
            # test that answers what it saw never overtakes the receipt
            if isinstance(env, MessageEnvelope | ReplyEnvelope | TaskDoneEnvelope):
                self._receipt(env)
        finally:
            with self._cond:
                self.items.append(env)
                self._cond.notify_all()

    def _receipt(self, env: MessageEnvelope | ReplyEnvelope | TaskDoneEnvelope) -> None:
        answer = self.answer(env)
        if answer is None:
            return
        accepted, error, request_id, result = answer
        task_id = env.task_id if env.task_id is not None else self.task_id
        ack = AckEnvelope(
            message_id=new_id(IdKind.MESSAGE),
            session_id=self.session_id,
            sender_id=PARENT_ID,
            target_id=self.agent_id,
            created_at=time.time(),
            capability=self.capability,
            ack_for=env.message_id,
            accepted=accepted,
            error=error,
            request_id=request_id,
            task_id=task_id if isinstance(env, TaskDoneEnvelope) else None,
            result=result,
        )
        # like the broker: a one-shot sender's receipt goes to its reply inbox
        self.mailbox.publish(env.reply_inbox or self.agent_id, ack)

    def wait_for(
        self, predicate: Callable[[AnyEnvelope], bool], *, after: int = 0, timeout: float = WAIT_S
    ) -> tuple[int, AnyEnvelope]:
        """The first envelope at index >= ``after`` matching ``predicate``: (index, envelope)."""
        found: list[tuple[int, AnyEnvelope]] = []

        def check() -> bool:
            for index in range(after, len(self.items)):
                if predicate(self.items[index]):
                    found.append((index, self.items[index]))
                    return True
            return False

        with self._cond:
            ok = self._cond.wait_for(check, timeout)
        if not ok:
            logs = "\n".join(b.log() for b in self.bridges)
            raise AssertionError(f"no matching envelope after #{after}: {self.summary()}\n{logs}")
        return found[0]

    def wait_event(
        self, event: str, *, after: int = 0, **fields: Any
    ) -> tuple[int, RuntimeEnvelope]:
        def match(env: AnyEnvelope) -> bool:
            return (
                isinstance(env, RuntimeEnvelope)
                and env.event == event
                and all(
                    (value(getattr(env, k)) if callable(value) else getattr(env, k) == value)
                    for k, value in fields.items()
                )
            )

        index, env = self.wait_for(match, after=after)
        assert isinstance(env, RuntimeEnvelope)
        return index, env

    def snapshot(self) -> list[AnyEnvelope]:
        with self._cond:
            return list(self.items)

    def summary(self) -> list[str]:
        out: list[str] = []
        for env in self.snapshot():
            if isinstance(env, RuntimeEnvelope):
                detail = env.text or env.command or env.output or ""
                out.append(f"runtime:{env.event}:{detail[:60]!r}")
            else:
                out.append(str(env.__struct_config__.tag))
        return out

    # ------------------------------------------------------------------ sending

    def base(self, **fields: Any) -> dict[str, Any]:
        fields.setdefault("sender_id", PARENT_ID)
        fields.setdefault("target_id", self.agent_id)
        fields.setdefault("capability", self.capability)
        fields.setdefault("session_id", self.session_id)
        return {
            "message_id": new_id(IdKind.MESSAGE),
            "created_at": time.time(),
            **fields,
        }

    def send(self, env: AnyEnvelope) -> AnyEnvelope:
        self.mailbox.publish(self.agent_id, env)
        return env

    def delegate(self, content: str) -> TaskEnvelope:
        self.task_id = new_id(IdKind.TASK)
        env = TaskEnvelope(**self.base(), task_id=self.task_id, content=content)
        self.send(env)
        return env

    def message(self, content: str, **fields: Any) -> MessageEnvelope:
        extra = {k: fields.pop(k) for k in list(fields) if k in ("sender_id", "capability")}
        env = MessageEnvelope(**self.base(**extra), content=content, **fields)
        self.send(env)
        return env

    # ------------------------------------------------------------------ processes

    def environ(self, **overrides: str | None) -> dict[str, str]:
        env = dict(os.environ)
        env.update(
            SHEPHERD_SESSION=str(self.session_dir),
            SHEPHERD_SESSION_ID=self.session_id,
            SHEPHERD_MAILBOX=str(self.root),
            SHEPHERD_AGENT_ID=self.agent_id,
            SHEPHERD_AGENT_NAME="scout",
            SHEPHERD_CAPABILITY=self.capability,
            SHEPHERD_PARENT_PID=str(os.getpid()),
        )
        for key, value in overrides.items():
            if value is None:
                env.pop(key, None)
            else:
                env[key] = value
        return env

    def start_bridge(
        self, adapter: str, options: dict[str, Any], **overrides: str | None
    ) -> Bridge:
        env = self.environ(
            SHEPHERD_ADAPTER=adapter, SHEPHERD_AGENT_OPTIONS=json.dumps(options), **overrides
        )
        log_path = self.tmp_path / f"bridge-{len(self.bridges)}.log"
        log = log_path.open("wb")
        proc = subprocess.Popen(
            [sys.executable, "-m", "actors.child.cli", "run"],
            cwd=self.tmp_path,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            start_new_session=True,
        )
        bridge = Bridge(proc, log_path, log)
        self.bridges.append(bridge)
        return bridge

    def run_child(
        self, *args: str, env: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "actors.child.entry", *args],
            cwd=self.tmp_path,
            env=self.environ() if env is None else env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )

    def write_script(self, steps: list[Any], name: str = "script.json") -> str:
        path = self.tmp_path / name
        path.write_text(json.dumps({"steps": steps}))
        return str(path)

    def close(self) -> None:
        for bridge in self.bridges:
            bridge.kill()
        self.mailbox.close()


@pytest.fixture
def parent(tmp_path: Path) -> Iterator[FakeParent]:
    fake = FakeParent(tmp_path)
    try:
        yield fake
    finally:
        fake.close()


def task_result(parent: FakeParent, status: str = "completed") -> TaskResult:
    assert parent.task_id is not None
    return msgspec.convert(
        {
            "task_id": parent.task_id,
            "agent_id": parent.agent_id,
            "status": status,
            "ok": status == "completed",
            "return_code": 0 if status == "completed" else 1,
            "completed_at": 1.0,
            "text": "ok",
        },
        TaskResult,
    )
