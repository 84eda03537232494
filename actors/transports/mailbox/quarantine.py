"""Where the receiver puts what it will not deliver: ``<root>/quarantine/``, each file beside a
``.reason`` JSON file (:class:`QuarantineReason`).

Rules:
- The reason file is written first (exclusive create), then the file is renamed next to it: a
  crash in between leaves the file in ``new/`` to be judged again, never a quarantined file
  without its reason.
- A name that is not an envelope file name is not reused as is (it may hold anything): the
  file gets ``<stamp>.invalid-name`` and the reason quotes the original, cut to 120 characters.
- A name already taken in ``quarantine/`` gets a ``.1``, ``.2``, ... suffix; nothing there is
  ever overwritten.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import Literal

import msgspec

from actors.runtime.log import logger
from actors.transports.mailbox.files import FILE_MODE, NAME_RE, WRITE_FLAGS, shown, write_all
from protocol.core.errors import ShepherdError
from protocol.wire.envelopes import AnyEnvelope

__all__ = ["QuarantineReason", "quarantine_file"]

_MAX_REASON_CHARS = 2000


class QuarantineReason(msgspec.Struct, frozen=True, kw_only=True):
    """``quarantine/<name>.reason``: why ``<name>`` was not delivered."""

    code: str
    message: str
    inbox: str
    file: str
    quarantined_at: float
    message_id: str | None = None
    sender_id: str | None = None


def quarantine_file(
    quarantine_dir: Path,
    new_dir: str,
    inbox: str,
    name: str,
    envelope: AnyEnvelope | None,
    error: ShepherdError,
    now_ns: int,
) -> Literal["moved", "stuck", "gone"]:
    """Move ``new_dir/name`` into quarantine with its reason (the module rules): ``moved``;
    ``gone`` if it vanished meanwhile; ``stuck`` if it could not be moved (left in ``new/``)."""
    base = name if NAME_RE.fullmatch(name) else f"{now_ns:020d}.invalid-name"
    reason = QuarantineReason(
        code=error.code,
        message=error.message[:_MAX_REASON_CHARS],
        inbox=inbox,
        file=name if base == name else shown(name),
        quarantined_at=now_ns / 1e9,
        message_id=envelope.message_id if envelope else None,
        sender_id=envelope.sender_id if envelope else None,
    )
    data = msgspec.json.encode(reason)
    for attempt in range(1000):
        target = os.path.join(quarantine_dir, base if attempt == 0 else f"{base}.{attempt}")
        if os.path.lexists(target):
            continue
        try:
            fd = os.open(f"{target}.reason", WRITE_FLAGS, FILE_MODE)
        except FileExistsError:
            continue
        try:
            write_all(fd, data)
        finally:
            os.close(fd)
        try:
            os.rename(os.path.join(new_dir, name), target)
        except OSError as exc:
            os.unlink(f"{target}.reason")
            if isinstance(exc, FileNotFoundError):
                return "gone"
            logger.bind(inbox=inbox).error(
                "mailbox: cannot quarantine {} ({}); left in new/", shown(name), exc
            )
            return "stuck"
        return "moved"
    raise OSError(errno.EEXIST, "no free quarantine name", base)
