"""Agents' git worktrees: the pure parts (what git says, parsed; what changed; what overlaps).

An agent spawned with ``--worktree`` works in a git worktree of its own, on its own branch.
Each task records where the worktree stood when the task was handed over (a
:class:`Snapshot`: the HEAD commit and the content hash of every path that was already
changed); when the task ends, the paths that changed since then are listed in its result
(:class:`WorktreeChanges`), with the paths that other live agents' worktrees changed too.

Rules:

1. **Changed since the task started.** A path counts if it differs from the task's starting
   HEAD now (committed, staged, unstaged or untracked) and was clean then, or if it was
   already changed then and its content differs now from what it was (:func:`changed_since`).
2. **Bounded.** A result lists at most :data:`~protocol.core.limits.WORKTREE_FILES_LISTED` paths
   (sorted) and always the full ``count``; overlaps name at most
   :data:`~protocol.core.limits.WORKTREE_OVERLAP_AGENTS` agents, each with at most
   :data:`~protocol.core.limits.WORKTREE_FILES_LISTED` paths and its count; a path longer than
   :data:`PATH_CHARS` characters is cut.
3. **Overlap** is the intersection of this task's changed paths with each other live agent's
   worktree changes since its branch's base (what that agent has changed so far).

Sans-IO: the module that runs git is :mod:`actors.session.worktrees`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Final, Literal

import msgspec

from protocol.core.limits import WORKTREE_FILES_LISTED, WORKTREE_OVERLAP_AGENTS

__all__ = [
    "PATH_CHARS",
    "Overlap",
    "Snapshot",
    "StatusEntry",
    "WorktreeChanges",
    "WorktreeProbed",
    "WorktreeRef",
    "WorktreeReleased",
    "changed_since",
    "default_branch",
    "make_changes",
    "parse_porcelain_z",
    "ref_of",
    "shown",
]

#: a listed path longer than this is cut (its end replaced by "…")
PATH_CHARS: Final = 300


class StatusEntry(msgspec.Struct, frozen=True):
    """One line of ``git status --porcelain -z``: the two status letters and the path (and,
    for a rename or copy, the path it came from)."""

    code: str
    path: str
    orig: str | None = None

    @property
    def untracked(self) -> bool:
        return self.code == "??"


def parse_porcelain_z(data: str) -> list[StatusEntry]:
    """``git status --porcelain -z`` (version 1) parsed: ``XY PATH\\0`` per entry, followed by
    ``ORIG\\0`` when X or Y is a rename or copy. A malformed entry is ``ValueError``."""
    fields = data.split("\0")
    if fields and fields[-1] == "":
        fields.pop()
    entries: list[StatusEntry] = []
    i = 0
    while i < len(fields):
        item = fields[i]
        if len(item) < 4 or item[2] != " ":
            raise ValueError(f"malformed status entry {item[:40]!r}")
        code, path = item[:2], item[3:]
        i += 1
        orig = None
        if "R" in code or "C" in code:
            if i >= len(fields):
                raise ValueError(f"rename entry {path[:40]!r} without its original path")
            orig = fields[i]
            i += 1
        entries.append(StatusEntry(code, path, orig))
    return entries


class Snapshot(msgspec.Struct, frozen=True, kw_only=True):
    """Where a worktree stood when a task started: its HEAD, and each path already changed
    then with the hash of its content (``None``: the path did not exist)."""

    head: str
    dirty: dict[str, str | None] = {}


def changed_since(
    snapshot: Snapshot,
    differ_from_head: Iterable[str],
    hashes_now: Mapping[str, str | None],
) -> set[str]:
    """Rule 1. ``differ_from_head``: every path that differs now from ``snapshot.head``
    (tracked and untracked); ``hashes_now``: the content hash now of each path of
    ``snapshot.dirty`` (``None``: gone)."""
    changed = {p for p in differ_from_head if p not in snapshot.dirty}
    changed |= {p for p, then in snapshot.dirty.items() if hashes_now.get(p) != then}
    return changed


def shown(path: str) -> str:
    """A path as a result shows it: undecodable bytes replaced, cut to :data:`PATH_CHARS`."""
    text = path.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
    return text if len(text) <= PATH_CHARS else text[: PATH_CHARS - 1] + "…"


class Overlap(msgspec.Struct, frozen=True, kw_only=True):
    """Paths this task changed that another live agent's worktree changed too."""

    agent: str
    branch: str
    files: tuple[str, ...]
    count: int


class WorktreeChanges(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """What a task changed in its agent's worktree (rule 2: bounded)."""

    branch: str
    path: str
    #: the first changed paths, sorted (``count`` says how many there are)
    files: tuple[str, ...] = ()
    count: int = 0
    #: "task": since the task started; "branch": since the branch's base (the task's start
    #: was not recorded: handed over by a parent that restarted, or its snapshot failed)
    since: Literal["task", "branch"] = "task"
    overlaps: tuple[Overlap, ...] = ()
    #: other agents whose changes overlap, when more than the listed ones
    overlap_agents: int = 0
    #: git failed: why (the parent was told in a notice too)
    error: str | None = None

    def cut(self, listed: int) -> WorktreeChanges:
        """The same, listing at most ``listed`` paths (for a crowded answer)."""
        overlaps = tuple(msgspec.structs.replace(o, files=o.files[:listed]) for o in self.overlaps)
        return msgspec.structs.replace(self, files=self.files[:listed], overlaps=overlaps)


def make_changes(
    branch: str,
    path: str,
    changed: set[str],
    others: Mapping[str, tuple[str, set[str]]],
    *,
    since: Literal["task", "branch"] = "task",
) -> WorktreeChanges:
    """The bounded result (rule 2) of ``changed``, and its overlap with ``others`` (agent name
    -> (branch, paths that agent's worktree changed)) (rule 3)."""
    overlaps: list[Overlap] = []
    for agent in sorted(others):
        other_branch, theirs = others[agent]
        common = changed & theirs
        if common:
            listed = tuple(shown(p) for p in sorted(common)[:WORKTREE_FILES_LISTED])
            overlaps.append(
                Overlap(agent=agent, branch=other_branch, files=listed, count=len(common))
            )
    return WorktreeChanges(
        branch=branch,
        path=path,
        files=tuple(shown(p) for p in sorted(changed)[:WORKTREE_FILES_LISTED]),
        count=len(changed),
        since=since,
        overlaps=tuple(overlaps[:WORKTREE_OVERLAP_AGENTS]),
        overlap_agents=len(overlaps) if len(overlaps) > WORKTREE_OVERLAP_AGENTS else 0,
    )


def default_branch(session_id: str, name: str) -> str:
    """The branch an agent's worktree gets unless ``--branch`` names one."""
    return f"shepherd/{session_id}/{name}"


class WorktreeRef(msgspec.Struct, frozen=True, kw_only=True):
    """Where an agent's worktree is: read from the options its ``agent`` record journals
    (``worktree``, ``repo``, ``branch``, ``base``, ``cwd``: see :func:`ref_of`)."""

    agent_id: str
    agent: str
    path: str
    branch: str
    base: str
    repo: str


class MergeTarget(msgspec.Struct, frozen=True, kw_only=True):
    """What ``merge`` needs of the session: the agent's branch, and the other live agents'
    worktrees (told when the merge changed paths they changed too)."""

    ref: WorktreeRef
    siblings: tuple[WorktreeRef, ...] = ()


def ref_of(agent_id: str, name: str, options: Mapping[str, object]) -> WorktreeRef | None:
    """The agent's worktree, if its options name one (all five keys, as the spawn left them)."""
    if options.get("worktree") is not True:
        return None
    fields = {k: options.get(k) for k in ("cwd", "branch", "base", "repo")}
    if not all(isinstance(v, str) and v for v in fields.values()):
        return None
    return WorktreeRef(
        agent_id=agent_id,
        agent=name,
        path=str(fields["cwd"]),
        branch=str(fields["branch"]),
        base=str(fields["base"]),
        repo=str(fields["repo"]),
    )


class WorktreeProbed(msgspec.Struct, frozen=True, kw_only=True):
    """A ``ProbeWorktree``'s answer, handed back to the session's rules."""

    kind: Literal["snapshot", "diff", "live"]
    task_id: str
    agent_id: str
    snapshot: Snapshot | None = None
    changes: WorktreeChanges | None = None
    #: paths the worktree changed since its branch's base (for ``status``)
    changed_files: int | None = None
    #: git failed: why
    error: str | None = None


class WorktreeReleased(msgspec.Struct, frozen=True, kw_only=True):
    """What a close did with the agent's worktree: removed it (clean), or kept it, and why."""

    agent_id: str
    path: str
    removed: bool
    why: str | None = None
