"""The parent supervisor: one session of real agent processes over the file mailbox or NATS.

``shepherd serve`` runs one in the foreground; Python programs embed it (``Supervisor(...)``).
It owns the session directory::

    <session_dir>/session.json         id, parent pid, created, where the mailbox lives
    <session_dir>/journal.jsonl        durable task / request / agent records
    <session_dir>/notifications.jsonl  every parent notification, one JSON object per line
                                       (both on the NATS servers with ``--journal nats``, the
                                       second then this host's view: actors.session.records)
    <session_dir>/agents/<agent_id>/   the bridge's output log
    <mailbox_root>/inbox/...           the mailbox (memory filesystem if any; or NATS streams)

and a pointer in ``<state>/shepherd/live/`` so the CLI can find the newest live session.

CLI clients send ``call`` envelopes into the parent inbox (authenticated by the session's client
token, kept in the 0600 ``session.json``); each call runs on a small thread pool, never on the
mailbox receiver, and its ``result`` goes back to the client's one-shot inbox (a leftover of a
killed client is swept: :mod:`actors.transports.mailbox.reply_inboxes`).
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import shutil
import threading
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import msgspec

from actors import tracing
from actors.records.notes import FileTaskNotes
from actors.records.session_info import (
    SessionInfo,
    live_dir,
    os_failure,
    private_dir,
    write_private,
)
from actors.records.session_lock import DirectoryLock, lock_session
from actors.runtime import procs
from actors.runtime.command_socket import CommandServer, Request
from actors.runtime.command_wire import PARENT_COMMANDS
from actors.runtime.log import logger
from actors.runtime.runtime import ThreadedRuntime, tell_quietly
from actors.session import recovery
from actors.session.call_desk import MAX_WAITING_CALLS, CallDesk
from actors.session.locate import locate
from actors.session.parent_transport import ParentTransport, launcher_class, load_authority
from actors.session.records import Records, open_records
from actors.session.sender_gate import SenderGate
from actors.session.session import Session
from actors.session.sinks import FanOut, Sink
from actors.session.watchdog import is_watchdog_call
from actors.session.watchdog import session_call as watchdog_session_call
from protocol import ops
from protocol.calls import api
from protocol.core.errors import (
    InvalidArgument,
    SessionUnavailable,
    ShepherdError,
)
from protocol.core.ids import IdKind
from protocol.core.transport_url import TlsFiles
from protocol.records.settings import Settings, check_settings
from protocol.session import limits as session_limits
from protocol.session.admission import NodeCap
from protocol.session.restore import Restore

__all__ = ["MAX_WAITING_CALLS", "Supervisor"]


class Supervisor:
    def __init__(
        self,
        session_dir: Path | str | None = None,
        *,
        settings: Settings | None = None,
        sinks: Iterable[Sink] = (),
        tap: Callable[[str], None] | None = None,
        mailbox_root: Path | str | None = None,
        workers: int | None = None,
        recover: bool = False,
        transport: str | None = None,
        nats_auth: str | None = None,
        nats_tls: TlsFiles | None = None,
        commands: Callable[[Supervisor, Request], tuple[int, str, str] | None] | None = None,
        journal: str | None = None,
        resume: str | None = None,
    ) -> None:
        """``recover``: on an existing session, start again the agents whose bridges are gone
        and hand them their open tasks (``serve --recover``; :mod:`protocol.session.recover`);
        ``transport``: ``nats://...`` or ``tls://...`` (``nats_tls``: its TLS files;
        :mod:`actors.session.parent_transport`); ``commands``: runs ``shepherd`` calls on a
        command socket named in ``session.json`` (``serve``'s
        :func:`actors.surfaces.forwarded.run_forwarded`); ``journal``: where the records live,
        ``file`` or ``nats``, and ``resume``: a session id to resume from the NATS servers'
        records (:mod:`actors.session.records`).

        The session directory is locked for this supervisor's whole life before anything of it
        is read (:mod:`actors.records.session_lock`): a session another supervisor serves is
        ``session_busy`` naming it. An OS error while starting (a directory that cannot be
        made, a read-only file system) is ``invalid_argument`` naming the path and the cause."""
        self._lock: DirectoryLock | None = None
        try:
            self._start(
                session_dir,
                settings=settings,
                sinks=sinks,
                tap=tap,
                mailbox_root=mailbox_root,
                workers=workers,
                recover=recover,
                transport=transport,
                nats_auth=nats_auth,
                nats_tls=nats_tls,
                commands=commands,
                journal=journal,
                resume=resume,
            )
        except BaseException as exc:
            self._release()
            if isinstance(exc, OSError):
                raise os_failure(exc) from None
            raise

    def _lock_dir(self, session_dir: Path) -> None:
        """Called by :func:`locate` on the session's directory before it reads anything."""
        self._lock = lock_session(session_dir)

    def _not_started(self, traced: Any) -> None:
        """What a start that failed before the session was found had made, stopped."""
        self.runtime.shutdown()
        if traced is not None:
            traced.close()

    def _watch_node_caps(self) -> None:
        """A node's ``--max-running``, told to the session's admission as heard."""
        watch_caps = getattr(self.launcher, "watch_caps", None)
        if watch_caps is not None:
            broker = self.session.broker
            watch_caps(lambda node, cap: tell_quietly(broker, NodeCap(node=node, max_running=cap)))

    def _start(
        self,
        session_dir: Path | str | None,
        *,
        settings: Settings | None,
        sinks: Iterable[Sink],
        tap: Callable[[str], None] | None,
        mailbox_root: Path | str | None,
        workers: int | None,
        recover: bool,
        transport: str | None,
        nats_auth: str | None,
        nats_tls: TlsFiles | None,
        commands: Callable[[Supervisor, Request], tuple[int, str, str] | None] | None,
        journal: str | None,
        resume: str | None,
    ) -> None:
        self.settings = check_settings(settings or Settings())
        # tracing, when OTEL_* or `serve --otel` ask for it: refused here, before the session's
        # directory is made or locked, if it cannot be
        traced = tracing.parent_tracing(os.environ)
        self.runtime = ThreadedRuntime(workers=workers)
        try:
            where = locate(
                session_dir,
                transport=transport,
                mailbox_root=mailbox_root,
                journal=journal,
                resume=resume,
                new_id=lambda: self.runtime.ids.new(IdKind.SESSION),
                new_secret=self.runtime.ids.secret,
                nats_auth=nats_auth,
                nats_tls=nats_tls,
                lock=self._lock_dir,
            )
            self.authority = load_authority(where.transport, where.nats_auth)
        except BaseException:
            self._not_started(traced)
            raise
        self.session_id, self.session_dir = where.session_id, where.session_dir
        self.transport, self.mailbox_root = where.transport, where.mailbox_root
        self.client_token, self.resumed = where.client_token, where.resumed
        self.nats_tls = where.nats_tls
        self.spans = tracing.parent_spans(self.session_id, os.environ, traced)
        private_dir(self.session_dir)
        private_dir(self.session_dir / "agents")
        # Opened (a torn tail cut off) before they are read or appended to.
        try:
            self.records = open_records(
                where.records,
                self.session_dir,
                self.transport,
                self.session_id,
                existing=self.resumed,
                login=self.authority.parent_login() if self.authority is not None else None,
                tls=self.nats_tls,
            )
        except BaseException:
            self.runtime.shutdown()
            raise
        self.journal = self.records.journal
        self.notifications = self.records.view  # this host's notifications.jsonl

        def undo() -> None:  # a start-up that fails leaves no thread or open record behind
            self.runtime.shutdown()
            self.records.close()

        try:
            restore = self._restored(recover, where.restarted_here)
        except BaseException:
            undo()
            raise
        self.gate = gate = SenderGate(
            self.client_token,
            {a.agent_id: a.capability for a in restore.state.agents.values()} if restore else {},
            session_id=self.session_id,
            ids=self.runtime.ids,
            clock=self.runtime.clock,
        )
        self._wire = ParentTransport(
            self.transport,
            self.mailbox_root,
            self.session_id,
            self.settings,
            validate=gate.validate,
            on_reject=gate.on_reject,
            undo=undo,
            authority=self.authority,
            tls=self.nats_tls,
        )
        self.mailbox = gate.mailbox = self._wire.transport
        self.launcher = launcher_class(self.transport)(
            session_dir=self.session_dir,
            session_id=self.session_id,
            mailbox_root=self.transport,
            ensure_inbox=self.mailbox.ensure_inbox,
            set_aside=self.mailbox.set_aside,
            register=gate.register,
            clock=self.runtime.clock,
            settings=self.settings,
            extra_env=self.spans.child_environ() if self.spans is not None else None,
            authority=self.authority,
            nats_tls=self.nats_tls,
        )
        self._calls = CallDesk(
            self.call,
            self._start_wait,
            self.mailbox,
            session_id=self.session_id,
            ids=self.runtime.ids,
            clock=self.runtime.clock,
            max_envelope_bytes=self.settings.max_envelope_bytes,
            shutdown=self.shutdown,
        )
        # reply inboxes of calls whose caller was killed: now (a restart) and periodically
        self.reply_inboxes = self._wire.sweeper(self.runtime.clock, self._calls.pool.submit)
        self.reply_inboxes.sweep()
        self.reply_inboxes.start()
        self.session = Session(
            self.runtime,
            self.mailbox,
            self.launcher,
            settings=self.settings,
            sink=FanOut(self.records.record, [*self.records.sinks_after_record, *sinks]),
            journal=self.journal,
            session_id=self.session_id,
            tap=tap,
            on_call=self._calls.on_call,
            notes=FileTaskNotes(self.session_dir / "artifacts"),
            restore=restore,
            sync_inbound=True,
            spans=self.spans,
            worktrees_root=self.session_dir / "worktrees",
        )
        self._watch_node_caps()
        self.commands = (
            CommandServer(functools.partial(commands, self), PARENT_COMMANDS)
            if commands is not None
            else None
        )
        self.info = SessionInfo(
            session_id=self.session_id,
            session_dir=str(self.session_dir),
            mailbox=self.transport,
            journal=self.records.journal_where,
            notifications=str(self.records.view.path),
            records=where.records,
            parent_pid=os.getpid(),
            parent_start=procs.start_time(os.getpid()),
            created_at=self.runtime.clock.now(),
            client_token=self.client_token,
            command_socket=self.commands.address if self.commands is not None else None,
            nats_auth=self._wire.nats_auth,
            nats_tls=self.nats_tls,
            traced=self.spans is not None,
        )
        write_private(self.session_dir / "session.json", msgspec.json.encode(self.info))
        private_dir(live_dir())
        self._live_pointer = live_dir() / f"{self.session_id}.json"
        write_private(
            self._live_pointer,
            json.dumps({"session_dir": str(self.session_dir), "pid": os.getpid()}).encode(),
        )
        self._closed = False
        self._stopped = threading.Event()
        logger.bind(session=self.session_id).info("session at {dir}", dir=self.session_dir)

    def _restored(self, recover: bool, here: bool) -> Restore | None:
        """What the session's records say (None for a new session), and its limits: recorded,
        restored, or changed aloud (:mod:`protocol.session.limits`): ``self.settings`` becomes
        what the session runs with, and ``self.limits_changed`` says what this start changed
        of the recorded limits (one line each; ``serve`` prints them on stderr). Journaled
        before the session runs (nothing else writes yet). ``here``: restarted in the same
        directory: its view of the notifications is made whole first (``Records.catch_up``)."""
        restore = None
        if self.resumed:  # the record of delivery read once, for both
            given = self.records.delivered.read_deliveries()
            if here:
                self.records.catch_up(given)
            restore = recovery.read_restore(
                self.records, self.session_id, self.settings, recover, given
            )
        recorded = restore.state.limits if restore is not None else None
        self.settings, changes, record = session_limits.restart(
            self.settings, recorded, self.runtime.clock.now()
        )
        if restore is not None:
            restore.state.settings = self.settings
        if record is not None:
            self.journal.append(record)
        self.limits_changed = tuple(session_limits.told(c) for c in changes)
        for line in self.limits_changed:
            logger.bind(session=self.session_id).info("{line}", line=line)
        return restore

    # ------------------------------------------------------------------ CLI calls

    def call(self, op: str, args: dict[str, Any]) -> Any:
        """Run one operation by name, as the CLI and tools name them. The arguments are
        checked against the operation's Args Struct (:mod:`protocol.ops`: types and bounds)
        before anything is done."""
        match op:
            case "ping":
                return {"session_id": self.session_id, "pid": os.getpid()}
            case "shutdown":
                threading.Thread(target=self.shutdown, name="shepherd-shutdown").start()
                return {"shutting_down": True}
            case _ if is_watchdog_call(op):
                return watchdog_session_call(self.session, op, args)
        entry = ops.parent_op(op)
        if entry.host:  # pragma: no cover - every host operation is answered above
            raise InvalidArgument(f"{op} is answered by the supervisor")
        # a spawn's name, then its adapter's options, are checked by the broker
        return self.session.run(entry.build(args))

    def _start_wait(self, args: dict[str, Any], answer: Callable[[Any], object]) -> None:
        """A CLI ``wait``, checked as :meth:`call` checks it, held by its watcher's actor (no
        thread waits for it): ``answer`` is called once with its result."""
        checked = ops.parent_op("wait").build(args)
        assert isinstance(checked, api.WaitArgs)
        self.session.wait_then(checked, answer)

    # ------------------------------------------------------------------ lifecycle

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the session is shut down (``serve`` waits here)."""
        return self._stopped.wait(timeout)

    def _leave_for_the_next_parent(self, why: SessionUnavailable) -> None:
        """A session that stopped deciding ends as a killed parent does: its agents keep running
        and what waits in its inboxes stays, for ``serve`` started again on its directory
        (nothing of it was decided; the records say where it stood)."""
        logger.warning(
            "{}; its agents and the envelopes waiting for it are kept for the next parent",
            why.message,
        )
        self.launcher.close(kill=False)
        self._stop_serving()
        self._release()
        self._stopped.set()

    def _stop_serving(self) -> None:
        """Calls, actors, tracing and records stopped; the session no longer listed as live."""
        self.reply_inboxes.stop()
        self._calls.close()
        self.session.shutdown()
        if self.spans is not None:
            self.spans.close()
        self.records.close(keep_claim=True)  # given up last (_release)
        with contextlib.suppress(FileNotFoundError):
            self._live_pointer.unlink()

    def shutdown(self, *, keep: bool = True, grace_s: float = 10.0) -> None:
        """Close every agent, confirm their exits, stop actors and timers, keep the records.

        The mailbox (on the memory filesystem; on NATS, the session's streams) is removed once
        every child is gone; the session directory stays for inspection unless ``keep=False``.
        """
        if self._closed:
            return
        self._closed = True
        if self.commands is not None:
            self.commands.close()  # later calls go through the mailbox, and are refused
        try:
            agents = self.session.status().agents
        except SessionUnavailable as exc:  # it stopped deciding (its journal failed)
            self._leave_for_the_next_parent(exc)
            return
        for row in agents:
            if not row.closed:
                with contextlib.suppress(ShepherdError):
                    self.session.close(row.agent_id)
        if not self.launcher.wait_all_exited(grace_s):
            logger.warning("agents still running after {s}s; killing them", s=grace_s)
        self.launcher.close()
        self._stop_serving()
        # answers still unread by their live callers (the `shutdown` call's own, say) are
        # given a moment to be read before the mailbox goes
        for _ in range(250):  # at most 5 s
            if not self._wire.unread_answers():
                break
            self._stopped.wait(0.02)
        self._wire.remove()
        if not keep:
            shutil.rmtree(self.session_dir, ignore_errors=True)
        self._release()
        self._stopped.set()

    def _release(self) -> None:
        """The session given up (its directory unlocked, its claim on the NATS servers ended):
        last, once nothing of this parent uses it (its mailbox included), so the next parent
        finds it as this one left it."""
        records: Records | None = getattr(self, "records", None)
        if records is not None:
            records.release()
        if self._lock is not None:
            self._lock.release()
