"""How far each MCP client has read the session's notifications: a durable cursor per client.

Rules:
- One cursor per session and client name: ``<session_dir>/mcp-cursors/<client>.json`` (0600,
  in a 0700 directory). The name comes from ``shepherd mcp --client NAME``; without it every
  server of the session shares the cursor ``default`` (a session has one parent).
- A cursor holds the session id, the byte offset in ``notifications.jsonl`` up to which every
  line was returned, and the identity (device, inode) of the file that offset belongs to.
  Another session id, another file (it was replaced) or an offset past the file's end (it was
  cut) starts again from the beginning, with a warning: a replay is better than a loss.
- A batch is read and the cursor advanced under an exclusive ``flock`` on ``<client>.lock``,
  and the new cursor is written atomically (temporary file, fsync, rename) *before* the batch
  is returned. So two servers with one client name never return a line twice, and a server
  killed at any point never returns a line again: at most once per client, like a watcher's
  delivery record. (What a killed server read but could not answer is still in the file for
  ``shepherd notifications``.)
- A batch is bounded: at most :data:`MAX_NOTES` notifications and :data:`MAX_BYTES` of lines;
  ``more`` says that more are waiting for the next call. A single line longer than
  ``MAX_BYTES`` is returned alone; one longer than :data:`MAX_LINE_BYTES` is replaced by a
  stub naming its offset and size. A line that is not JSON is returned as ``{"unparsed"}``.
- Only whole lines: a line still being written (no newline yet) waits for the next call.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import msgspec

from actors.records.session_info import SessionInfo, write_private
from actors.runtime.log import logger
from protocol.core.errors import InvalidArgument
from protocol.ops.tools import NOTIFICATIONS_PER_CALL

__all__ = [
    "DEFAULT_CLIENT",
    "MAX_BYTES",
    "MAX_LINE_BYTES",
    "MAX_NOTES",
    "Batch",
    "CursorStore",
    "check_client_name",
]

DEFAULT_CLIENT = "default"
#: at most this many notifications per ``shepherd_notifications`` answer (its tool says so)
MAX_NOTES = NOTIFICATIONS_PER_CALL
#: at most this many bytes of notification lines per answer (beyond a single longer line)
MAX_BYTES = 256 * 1024
#: a line longer than this is replaced by a stub
MAX_LINE_BYTES = 1024 * 1024
#: a line that is not JSON is shown cut to this many characters
_UNPARSED_CHARS = 1000
_CLIENT_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")


def check_client_name(name: str) -> str:
    """``name`` if it can name a cursor, else ``invalid_argument`` naming ``--client``."""
    if not isinstance(name, str) or _CLIENT_RE.fullmatch(name) is None:
        raise InvalidArgument(
            f"--client {name!r:.80} is not a client name: 1 to 64 letters, digits, '.', '_' "
            "or '-', starting with a letter or digit"
        )
    return name


class Cursor(msgspec.Struct, frozen=True, kw_only=True):
    session_id: str
    offset: int
    dev: int
    ino: int
    version: int = 1


@dataclass(frozen=True, slots=True)
class Batch:
    notifications: list[Any]
    #: more complete lines wait past this batch: call again at once
    more: bool
    #: where the next batch starts, and the file's size when this one was read
    offset: int
    size: int


def _decode(line: bytes, offset: int) -> Any:
    try:
        return json.loads(line)
    except ValueError:
        text = line.decode("utf-8", "replace")
        return {"unparsed": text[:_UNPARSED_CHARS], "offset": offset, "bytes": len(line)}


def _skip_line(f: BinaryIO, start: int) -> int:
    """The offset just past the newline that ends the line at ``start``, or -1 if that line
    has no newline yet. Reads in chunks: memory stays bounded whatever the line's length."""
    f.seek(start)
    position = start
    while chunk := f.read(64 * 1024):
        newline = chunk.find(b"\n")
        if newline >= 0:
            return position + newline + 1
        position += len(chunk)
    return -1


def _line_start(f: BinaryIO, offset: int) -> bool:
    if offset == 0:
        return True
    f.seek(offset - 1)
    return f.read(1) == b"\n"


def read_batch(f: BinaryIO, offset: int, size: int) -> tuple[list[Any], int, bool]:
    """``(notifications, next offset, more)`` from ``offset`` (see the module rules)."""
    f.seek(offset)
    data = f.read(min(MAX_BYTES, max(size - offset, 0)))
    notes: list[Any] = []
    position = 0
    while len(notes) < MAX_NOTES:
        newline = data.find(b"\n", position)
        if newline < 0:
            break
        line = data[position:newline]
        if line.strip():
            notes.append(_decode(line, offset + position))
        position = newline + 1
    if position == 0 and len(data) == MAX_BYTES:
        # one line longer than a whole batch: alone, or as a stub when it is huge
        end = _skip_line(f, offset)
        if end < 0:
            return [], offset, False
        if end - offset <= MAX_LINE_BYTES:
            f.seek(offset)
            return [_decode(f.read(end - offset - 1), offset)], end, end < size
        stub: dict[str, Any] = {
            "oversized": True,
            "offset": offset,
            "bytes": end - offset - 1,
            "hint": "too long for one answer: `shepherd notifications` prints it",
        }
        return [stub], end, end < size
    end = offset + position
    more = b"\n" in data[position:] or (len(data) == MAX_BYTES and end < size)
    return notes, end, more


class CursorStore:
    """The cursors of one client name in one session directory."""

    def __init__(self, session_dir: str | Path, client: str) -> None:
        self.client = check_client_name(client)
        self._dir = Path(session_dir) / "mcp-cursors"
        self._path = self._dir / f"{client}.json"
        self._lock_path = self._dir / f"{client}.lock"

    def take(self, info: SessionInfo) -> Batch:
        """The next batch for this client; the cursor is durably past it when this returns."""
        self._make_dir()
        lock = os.open(
            self._lock_path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600
        )
        try:
            fcntl.flock(lock, fcntl.LOCK_EX)  # held for one short read and write
            try:
                fd = os.open(info.notifications, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
            except FileNotFoundError:
                return Batch(notifications=[], more=False, offset=0, size=0)
            with os.fdopen(fd, "rb") as f:
                st = os.fstat(f.fileno())
                offset, reset = self._start(info, f, st)
                notes, end, more = read_batch(f, offset, st.st_size)
            if end != offset or reset:  # a reset is written at once: warned about once
                self._write(
                    Cursor(session_id=info.session_id, offset=end, dev=st.st_dev, ino=st.st_ino)
                )
            return Batch(notifications=notes, more=more, offset=end, size=st.st_size)
        finally:
            os.close(lock)

    def _make_dir(self) -> None:
        with contextlib.suppress(FileExistsError):
            os.mkdir(self._dir, 0o700)
        st = os.lstat(self._dir)
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid():
            raise InvalidArgument(f"{self._dir} is not a directory of ours; refusing to use it")

    def _start(self, info: SessionInfo, f: BinaryIO, st: os.stat_result) -> tuple[int, bool]:
        """Where this client's next batch starts in ``f`` (``st`` describes it), and whether
        the stored cursor was unusable (so it starts again from the beginning)."""
        try:
            raw = self._path.read_bytes()
        except FileNotFoundError:
            return 0, False  # a client new to this session gets every notification
        try:
            cursor = msgspec.json.decode(raw, type=Cursor)
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            why = f"it cannot be read ({exc})"
        else:
            if cursor.session_id != info.session_id:
                why = f"it belongs to session {cursor.session_id}"
            elif (cursor.dev, cursor.ino) != (st.st_dev, st.st_ino):
                why = "notifications.jsonl was replaced"
            elif not 0 <= cursor.offset <= st.st_size:
                why = f"its offset {cursor.offset} is past the file's end ({st.st_size} bytes)"
            elif not _line_start(f, cursor.offset):
                why = f"its offset {cursor.offset} is not the start of a line"
            else:
                return cursor.offset, False
        logger.warning(
            "MCP client {client}: cursor {path} is reset to the beginning: {why}",
            client=self.client,
            path=self._path,
            why=why,
        )
        return 0, True

    def _write(self, cursor: Cursor) -> None:
        write_private(self._path, msgspec.json.encode(cursor))
        dir_fd = os.open(self._dir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            os.fsync(dir_fd)  # the rename itself survives a crash too
        finally:
            os.close(dir_fd)
