"""Append-only JSON-lines files (the journal, the notifications file), safe to reopen after a
crash and read without dropping a word about what could not be read.

Rules:

- A record is one line ending in ``\\n``, appended by the session's one writer. A record
  exists once its whole line is in the file; nothing is told about it before that.
- On open, a *torn tail* (bytes after the last ``\\n``, left by a kill in the middle of a
  write) is cut off before anything is appended, and kept aside in ``<name>.torn-<n>`` beside
  the file, with a warning. Appending onto it would glue the next record to the fragment and
  lose both. The torn record was never complete, so nobody was told of it.
- An append that fails part-way (no space left, an I/O error) is rolled back to the previous
  end of the file and raises, for the same reason.
- Reading reports every line that does not decode (a warning naming the file and the line
  number, and a :class:`LineProblem`) and goes on with the next line: one bad record never
  hides the ones after it, and none is skipped in silence.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Literal, TypeVar

import msgspec

from actors.runtime.crashpoints import torn_write
from actors.runtime.log import logger

__all__ = ["JsonLinesFile", "LineProblem", "read_lines"]

T = TypeVar("T")

_CHUNK = 1 << 16
#: the one call that writes records (a seam for tests of short and failing writes)
_write = os.write
#: how much of an undecodable line a warning quotes
_QUOTE = 80


class LineProblem(msgspec.Struct, frozen=True, kw_only=True):
    """One line of a JSON-lines file that could not be used."""

    path: str
    line: int  # 1-based
    kind: Literal["torn_tail", "corrupt"]
    detail: str
    #: where a torn tail was kept (it is no longer in the file)
    kept_in: str | None = None

    def describe(self) -> str:
        if self.kind == "torn_tail":
            return (
                f"{self.path} line {self.line}: a record cut short by a crash ({self.detail}); "
                f"moved to {self.kept_in} so new records start on a line of their own"
            )
        return f"{self.path} line {self.line}: record cannot be read ({self.detail}); skipped"


class JsonLinesFile:
    """One append-only JSON-lines file, opened for appending after its torn tail (if any) was
    cut off. :attr:`problems` collects what opening and reading found."""

    def __init__(self, path: Path, *, fsync: bool) -> None:
        self.path = path
        self._fsync = fsync
        self._lock = threading.Lock()
        self.problems: list[LineProblem] = []
        self._fd = os.open(
            path, os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600
        )
        try:
            torn = _cut_torn_tail(self._fd, path)
        except BaseException:
            os.close(self._fd)
            raise
        if torn is not None:
            logger.warning(torn.describe())
            self.problems.append(torn)

    @property
    def closed(self) -> bool:
        return self._fd < 0

    def append(self, line: bytes, *, torn_point: str | None = None) -> None:
        """Append one complete line (and fsync it when the file was opened so). On failure the
        file is cut back to where it ended, so the next record starts on a line of its own."""
        self.append_many((line,), torn_point=torn_point)

    def append_many(self, lines: Sequence[bytes], *, torn_point: str | None = None) -> None:
        """Append complete lines in one write and ONE fsync (a batch costs one disk flush, not
        one per record); on failure none of them stays (the file is cut back)."""
        for line in lines:
            if not line.endswith(b"\n") or b"\n" in line[:-1]:
                raise ValueError("a JSON-lines record is exactly one line ending in a newline")
        line = b"".join(lines)
        if not line:
            return
        with self._lock:
            if self._fd < 0:
                raise ValueError(f"{self.path} is closed")
            end = os.fstat(self._fd).st_size
            try:
                if torn_point is not None:
                    torn_write(torn_point, self._fd, line)
                view = memoryview(line)
                while view:
                    view = view[_write(self._fd, view) :]
                if self._fsync:
                    os.fsync(self._fd)
            except BaseException:
                os.ftruncate(self._fd, end)
                raise

    def read(self, decode: Callable[[bytes], T]) -> list[T]:
        """Every line that decodes, in order; each one that does not is reported."""
        items, problems = read_lines(self.path, decode)
        self.problems.extend(problems)
        return items

    def close(self) -> None:
        with self._lock:
            if self._fd >= 0:
                os.close(self._fd)
                self._fd = -1


def read_lines(path: Path, decode: Callable[[bytes], T]) -> tuple[list[T], list[LineProblem]]:
    """Decode each complete line of ``path``. A line that fails is reported (a warning and a
    :class:`LineProblem` naming the line) and the reading goes on. A last line without its
    newline is a write still in progress (or torn: :class:`JsonLinesFile` cuts those on open)
    and is not read."""
    items: list[T] = []
    problems: list[LineProblem] = []
    with open(path, "rb") as f:
        for number, line in enumerate(f, start=1):
            if not line.endswith(b"\n"):
                break
            try:
                items.append(decode(line))
            except (msgspec.DecodeError, KeyError, ValueError, TypeError) as exc:
                problem = LineProblem(
                    path=str(path),
                    line=number,
                    kind="corrupt",
                    detail=f"{str(exc)[:200]}; starts {line[:_QUOTE]!r}",
                )
                logger.warning(problem.describe())
                problems.append(problem)
    return items, problems


def _cut_torn_tail(fd: int, path: Path) -> LineProblem | None:
    size = os.fstat(fd).st_size
    if size == 0 or os.pread(fd, 1, size - 1) == b"\n":
        return None
    good_end = _last_line_end(fd, size)
    side = _side_file(path)
    try:
        at = good_end
        while at < size:
            chunk = os.pread(fd, min(_CHUNK, size - at), at)
            if not chunk:
                break
            _write_all(side[1], chunk)
            at += len(chunk)
        os.fsync(side[1])
    finally:
        os.close(side[1])
    os.ftruncate(fd, good_end)
    os.fsync(fd)
    return LineProblem(
        path=str(path),
        line=_count_lines(fd, good_end) + 1,
        kind="torn_tail",
        detail=f"{size - good_end} bytes without an end of line",
        kept_in=str(side[0]),
    )


def _last_line_end(fd: int, size: int) -> int:
    """The offset just past the last ``\\n`` before ``size`` (0 when there is none)."""
    end = size
    while end > 0:
        start = max(0, end - _CHUNK)
        at = os.pread(fd, end - start, start).rfind(b"\n")
        if at >= 0:
            return start + at + 1
        end = start
    return 0


def _count_lines(fd: int, end: int) -> int:
    count = 0
    at = 0
    while at < end:
        chunk = os.pread(fd, min(_CHUNK, end - at), at)
        if not chunk:
            break
        count += chunk.count(b"\n")
        at += len(chunk)
    return count


def _side_file(path: Path) -> tuple[Path, int]:
    """A new private file beside ``path`` for a torn tail: ``<name>.torn-1``, ``-2``, ..."""
    for n in range(1, 10_000):
        side = path.with_name(f"{path.name}.torn-{n}")
        try:
            fd = os.open(
                side, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600
            )
        except FileExistsError:
            continue
        return side, fd
    raise OSError(f"no free name for a torn tail of {path}")


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]
