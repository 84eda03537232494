"""Running git for the agents' worktrees: one call, and the questions the session asks.

Every call runs ``git`` with a bounded time (:data:`GIT_TIMEOUT_S`), no terminal prompt, the
C locale, no optional locks (a ``status`` never takes the index lock an agent's own git
needs), and without the parent's ``GIT_DIR``-style variables (they would point git at another
repository). A failure is :class:`GitError` with git's own message. Paths are ``str`` decoded
with ``surrogateescape`` (a path that is not UTF-8 survives the round trip to the disk).

Who calls these: the session's edge (``spawn``, ``close``, ``worktrees``) and its git worker
(:mod:`actors.session.worktrees`); never the broker's thread.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
from collections.abc import Iterable

from protocol.records.worktrees import Snapshot, parse_porcelain_z

__all__ = [
    "GIT_TIMEOUT_S",
    "GitError",
    "content_hashes",
    "differ_from",
    "dirty_paths",
    "git",
    "snapshot",
]

#: the longest one git call may take
GIT_TIMEOUT_S = 60.0
#: the parent's variables that would point git at another repository or index
_REDIRECTS = (
    "GIT_DIR",
    "GIT_WORK_TREE",
    "GIT_INDEX_FILE",
    "GIT_OBJECT_DIRECTORY",
    "GIT_COMMON_DIR",
    "GIT_NAMESPACE",
    "GIT_CEILING_DIRECTORIES",
)


class GitError(Exception):
    """git failed (or could not be run): the message is git's, or why it could not run."""


def git(args: list[str], cwd: str, *, timeout: float = GIT_TIMEOUT_S) -> str:
    """``git ARGS`` in ``cwd``; its standard output (``GitError`` if it fails)."""
    return run_git(args, cwd, ok=(0,), timeout=timeout)[1]


def run_git(
    args: list[str],
    cwd: str,
    *,
    ok: tuple[int, ...] | None = None,
    timeout: float = GIT_TIMEOUT_S,
) -> tuple[int, str]:
    """``git ARGS`` in ``cwd``: its exit status and standard output (``GitError`` if it could
    not run, or, given ``ok``, if it exited otherwise)."""
    env = {k: v for k, v in os.environ.items() if k not in _REDIRECTS}
    env.update(GIT_TERMINAL_PROMPT="0", LC_ALL="C", GIT_OPTIONAL_LOCKS="0")
    try:
        proc = subprocess.run(
            ["git", *args],
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise GitError(f"git {args[0]} took longer than {timeout:g} s") from None
    except OSError as exc:
        raise GitError(f"git could not be run in {cwd}: {exc.strerror or exc}") from None
    if ok is not None and proc.returncode not in ok:
        message = proc.stderr.decode("utf-8", "replace").strip().splitlines()
        raise GitError(" ".join(message[-3:]) or f"git {args[0]} exited {proc.returncode}")
    return proc.returncode, proc.stdout.decode("utf-8", "surrogateescape")


def dirty_paths(path: str) -> list[str]:
    """Every path of the worktree that is not clean: modified, staged, deleted, untracked
    (each file of an untracked directory), and both sides of a rename."""
    out = git(["status", "--porcelain", "-z", "--untracked-files=all", "--no-renames"], path)
    found: list[str] = []
    for entry in parse_porcelain_z(out):
        found.append(entry.path)
        if entry.orig is not None:
            found.append(entry.orig)
    return found


def content_hashes(root: str, paths: Iterable[str]) -> dict[str, str | None]:
    """The hash of each path's content now (``None``: not a file any more). A symlink is
    hashed by its target's name, never followed."""
    hashes: dict[str, str | None] = {}
    for rel in paths:
        full = os.path.join(root, rel)
        try:
            if os.path.islink(full):
                hashes[rel] = "link:" + os.readlink(full)
                continue
            digest = hashlib.sha256()
            with open(full, "rb") as f:
                for chunk in iter(lambda: f.read(1 << 20), b""):
                    digest.update(chunk)
            hashes[rel] = digest.hexdigest()
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
            hashes[rel] = None
        except OSError as exc:  # unreadable: counted as changed
            hashes[rel] = f"unreadable:{exc.errno}"
    return hashes


def snapshot(path: str) -> Snapshot:
    """Where the worktree stands: its HEAD, and the content of every path not clean."""
    head = git(["rev-parse", "--verify", "HEAD"], path).strip()
    return Snapshot(head=head, dirty=content_hashes(path, dirty_paths(path)))


def differ_from(path: str, commit: str) -> set[str]:
    """Every path that differs now from ``commit``: tracked files (committed since, staged or
    not) and untracked ones (ignored files are not counted)."""
    tracked = git(["diff", "--name-only", "-z", "--no-renames", commit, "--"], path)
    untracked = git(["ls-files", "--others", "--exclude-standard", "-z"], path)
    return {p for p in (tracked + untracked).split("\0") if p}
