"""A hostile agent, run as the turn of a ``command``-adapter agent (so it has the real
``SHEPHERD_*`` environment of a spawned child: its id, its capability, the session mailbox).

    python hostile_child.py PLAN.json MESSAGE

``PLAN.json`` says which attacks to run (``attacks``), against whom (``victim_id``,
``victim_task``) and where to write what happened (``out``, written atomically, one JSON
object: attack name -> outcome). Only the first turn attacks; later turns (notices, receipts)
do nothing. The ``linger`` attack makes the process ignore SIGTERM and stay (the parent must
SIGKILL it); ``exit_mid_write`` leaves a half-written file in tmp/ and dies on the spot.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import sys
import time
from pathlib import Path
from typing import Any, NoReturn

from actors.child.cli import send_and_wait
from actors.child.env import child_env_from
from actors.runtime.transport import PARENT_INBOX
from actors.transports.mailbox.files import write_all
from actors.transports.mailbox.mailbox import Mailbox
from protocol.core.errors import ShepherdError
from protocol.core.ids import PARENT_ID, IdKind, make_id
from protocol.records.settings import Settings
from protocol.wire.envelopes import (
    MessageEnvelope,
    TaskDoneEnvelope,
    TaskEnvelope,
    encode_envelope,
)

ENV = child_env_from(os.environ, bridge=False)


def new_id() -> str:
    return make_id(IdKind.MESSAGE, secrets.token_hex(8))


def file_name(message_id: str) -> str:
    return f"{time.time_ns():020d}.{os.getpid()}.1.{message_id}.json"


def message(**fields: Any) -> MessageEnvelope:
    base: dict[str, Any] = {
        "message_id": new_id(),
        "session_id": ENV.session_id,
        "sender_id": ENV.agent_id,
        "target_id": PARENT_ID,
        "created_at": time.time(),
        "capability": ENV.capability,
        "content": "hostile",
    }
    base.update(fields)
    return MessageEnvelope(**base)


def publish(mailbox: Mailbox, inbox: str, env: Any) -> dict[str, Any]:
    try:
        mailbox.publish(inbox, env)
    except ShepherdError as exc:
        return {"message_id": env.message_id, "refused": exc.code, "error": exc.message}
    return {"message_id": env.message_id, "published": True}


def plant(directory: Path, name: str, data: bytes) -> None:
    """Put a file into ``directory`` (a new/) whole, as a writer that bypasses publish would:
    written beside it in tmp/, then renamed in (so the receiver never sees it half-written)."""
    staging = directory.parent / "tmp" / f"hostile-{secrets.token_hex(8)}"
    fd = os.open(staging, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        write_all(fd, data)
    finally:
        os.close(fd)
    os.rename(staging, directory / name)


def attack(name: str, plan: dict[str, Any], mailbox: Mailbox) -> Any:
    parent_new = Path(ENV.mailbox) / "inbox" / PARENT_INBOX / "new"
    victim = plan.get("victim_id", "")
    match name:
        case "forge_sender":  # speak as the victim, with our own capability
            return publish(mailbox, PARENT_INBOX, message(sender_id=victim, content="forged"))
        case "forge_capability":  # speak as ourselves with a guessed capability
            return publish(mailbox, PARENT_INBOX, message(capability=secrets.token_hex(16)))
        case "forge_parent":  # a parent-only kind, in our own name
            env = TaskEnvelope(
                message_id=new_id(),
                session_id=ENV.session_id,
                sender_id=ENV.agent_id,
                target_id=PARENT_ID,
                created_at=time.time(),
                capability=ENV.capability,
                task_id=make_id(IdKind.TASK, secrets.token_hex(8)),
                content="do my bidding",
            )
            return publish(mailbox, PARENT_INBOX, env)
        case "done_for_victim":  # finish the victim's task, as ourselves
            try:
                ack = send_and_wait(
                    ENV,
                    lambda base: TaskDoneEnvelope(
                        **base,
                        target_id=PARENT_ID,
                        task_id=plan["victim_task"],
                        status="completed",
                        summary="stolen",
                    ),
                    timeout_s=15,
                )
            except ShepherdError as exc:
                return {"no_receipt": exc.code, "error": exc.message}
            error = ack.error
            return {
                "accepted": ack.accepted,
                "code": error.code if error else None,
                "error": error.message if error else None,
            }
        case "victim_inbox":  # write into another agent's inbox: a message, and a fake task
            forged_task = TaskEnvelope(
                message_id=new_id(),
                session_id=ENV.session_id,
                sender_id=PARENT_ID,
                target_id=victim,
                created_at=time.time(),
                capability=ENV.capability,
                task_id=make_id(IdKind.TASK, secrets.token_hex(8)),
                content="forged task",
            )
            return [
                publish(mailbox, victim, message(target_id=victim, content="psst")),
                publish(mailbox, victim, forged_task),
            ]
        case "other_session":  # a mailbox opened for another session id, and a raw file
            other = make_id(IdKind.SESSION, secrets.token_hex(8))
            with Mailbox.open(ENV.mailbox, other) as foreign:
                first = publish(foreign, PARENT_INBOX, message(session_id=other))
            raw = message(session_id=other)
            plant(parent_new, file_name(raw.message_id), encode_envelope(raw))
            return [first, {"message_id": raw.message_id, "planted": True}]
        case "flood":  # many messages to the shepherd, honouring the session's small limit
            # honest publishes (the session's small limit) between bursts of files written
            # straight into new/ (no limit at all), which keep the inbox over the limit
            limit = int(plan["queue_limit"])
            flooder = Mailbox.open(ENV.mailbox, ENV.session_id, Settings(max_queue_depth=limit))
            results, raw_ids = [], []
            for burst in range(int(plan["bursts"])):
                for j in range(int(plan["raw_per_burst"])):
                    raw = message(content=f"raw flood {burst}.{j}")
                    plant(parent_new, file_name(raw.message_id), encode_envelope(raw))
                    raw_ids.append(raw.message_id)
                for j in range(int(plan["publish_per_burst"])):
                    honest = message(content=f"flood {burst}.{j}")
                    results.append(publish(flooder, PARENT_INBOX, honest))
            flooder.close()
            return {"published": results, "raw": raw_ids}
        case "big":  # 10 MB: through publish, and planted
            big = message(content="x" * (10 * 1024 * 1024))
            first = publish(mailbox, PARENT_INBOX, big)
            planted = message(content="y" * (10 * 1024 * 1024))
            plant(parent_new, file_name(planted.message_id), encode_envelope(planted))
            return [first, {"message_id": planted.message_id, "planted": True}]
        case "symlink_fifo":
            link_id, fifo_id = new_id(), new_id()
            os.symlink("/etc/passwd", parent_new / file_name(link_id))
            os.mkfifo(parent_new / file_name(fifo_id), 0o600)
            return {"symlink": link_id, "fifo": fifo_id}
        case _:
            raise ValueError(f"unknown attack {name!r}")


def linger() -> NoReturn:
    """Stay, doing nothing, until a signal we do not ignore ends us (SIGTERM is ignored: only
    SIGKILL will do). Blocks in ``pause``: no CPU, no timer."""
    while True:
        signal.pause()


def _linger_child(*, escape: bool) -> int:
    """A process that ignores SIGTERM; with ``escape``, double-forked into a session of its
    own (out of the bridge's session and process groups). Returns its pid."""
    read, write = os.pipe()
    child = os.fork()
    if child == 0:
        os.close(read)
        if escape:
            os.setsid()
            if os.fork() != 0:
                os._exit(0)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        os.write(write, str(os.getpid()).encode())
        os.close(write)
        linger()
    os.close(write)
    pid = int(os.read(read, 32) or b"0")
    os.close(read)
    if escape:
        os.waitpid(child, 0)  # the intermediate process exited at once
    return pid


def write_out(path: str, data: dict[str, Any]) -> None:
    tmp = f"{path}.tmp"
    Path(tmp).write_text(json.dumps(data))
    os.replace(tmp, path)


def main() -> int:
    plan = json.loads(Path(sys.argv[1]).read_text())
    if os.environ.get("SHEPHERD_TURN", "1") != "1":
        return 0
    mailbox = Mailbox.open(ENV.mailbox, ENV.session_id)
    results: dict[str, Any] = {"pid": os.getpid()}
    for name in plan["attacks"]:
        if name in ("linger", "escape", "exit_mid_write"):
            continue
        try:
            results[name] = attack(name, plan, mailbox)
        except Exception as exc:  # record it; the test decides
            results[name] = {"crashed": repr(exc)}
    if "exit_mid_write" in plan["attacks"]:
        env = message(content="never finished")
        data = encode_envelope(env)
        tmp_dir = Path(ENV.mailbox) / "inbox" / PARENT_INBOX / "tmp"
        whole = message(content="finished but never renamed")
        plant(tmp_dir, file_name(whole.message_id), encode_envelope(whole))
        results["exit_mid_write"] = {"half": env.message_id, "whole": whole.message_id}
        write_out(plan["out"], results)
        fd = os.open(
            tmp_dir / file_name(env.message_id), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600
        )
        os.write(fd, data[: len(data) // 2])
        os._exit(9)  # mid-write: no close, no rename, no goodbye
    if "linger" in plan["attacks"]:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        helpers = [_linger_child(escape=False)]
        if "escape" in plan["attacks"]:
            helpers.append(_linger_child(escape=True))
        results["linger"] = {"pid": os.getpid(), "helpers": helpers}
        write_out(plan["out"], results)
        linger()
    mailbox.close()
    write_out(plan["out"], results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
