"""Live edit collisions: two live agents changing the same file at nearly the same time are
told, with the parent, before either says done.

Rules:

1. **What counts as an edit.** A ``tool_call`` runtime event naming the files it writes
   (``paths``: Pi's ``write`` and ``edit`` tools, an ACP agent's edit locations); for a
   command or scripted agent in a worktree (their tools name no files), the files its task
   changed so far, read from the worktree at each of its turns' ends. A path is
   taken relative to the agent's directory (its worktree): two agents in two worktrees of
   one repository editing ``src/app.py`` each edit the same file. A path outside the agent's
   directory is taken as it is (absolute).
2. **A collision**: an agent with an open task edits a path that another agent with an open
   task edited within :data:`WINDOW_S` seconds.
3. **Told once**: the first time a pair of agents collides on a path, the parent gets an
   ``edit_collision`` notice (both agents, the path, both tasks, how far apart), and each of
   the two agents a notice naming the other and the path. The same pair on the same path is
   not told again.
4. **Bounded**: at most :data:`MAX_PATHS` paths are remembered (the oldest forgotten first),
   each with the agents that edited it within the window; at most :data:`MAX_TOLD` pairs are
   remembered as told.
"""

from __future__ import annotations

from typing import Final

from protocol.records.notifications import Notice
from protocol.records.worktrees import WorktreeProbed
from protocol.session import outbox
from protocol.session.effects import Effect, Notify, ProbeWorktree
from protocol.session.state import AgentRow, Ctx, SessionState
from protocol.session.worktrees import worktree_of
from protocol.wire.envelopes import RuntimeEnvelope

__all__ = ["MAX_PATHS", "MAX_TOLD", "WINDOW_S", "edited", "probed", "turn_ended"]

#: the adapters whose tools name no files: their worktrees are read (rule 1)
_SILENT: Final = frozenset({"command", "scripted"})
#: how close in time two edits of one path must be to collide (rule 2)
WINDOW_S: Final = 600.0
#: rule 4's bounds
MAX_PATHS: Final = 10_000
MAX_TOLD: Final = 10_000


def edited(s: SessionState, row: AgentRow, env: RuntimeEnvelope, cx: Ctx) -> list[Effect]:
    """Rules 1-3, for one ``tool_call`` of ``row``'s agent."""
    return _edited(s, row, env.paths, cx)


def turn_ended(s: SessionState, row: AgentRow) -> list[Effect]:
    """Rule 1 for an agent whose tools name no files: what its task changed so far in its
    worktree, read at its turn's end (the answer comes back to :func:`probed`)."""
    if row.adapter not in _SILENT or row.active_task is None:
        return []
    ref = worktree_of(s, row.agent_id)
    if ref is None:
        return []
    task_id = row.active_task
    snapshot = s.snapshots.get(task_id)
    return [ProbeWorktree(kind="live", task_id=task_id, worktree=ref, snapshot=snapshot)]


def probed(s: SessionState, event: WorktreeProbed, cx: Ctx) -> list[Effect]:
    """What a turn's end found changed (``live``): edits, as of now, while the task is open."""
    row = s.agents.get(event.agent_id)
    if row is None or row.active_task != event.task_id or event.changes is None:
        return []  # its task ended meanwhile, or git failed (the task's end tells that)
    return _edited(s, row, event.changes.files, cx)


def _edited(s: SessionState, row: AgentRow, paths: tuple[str, ...], cx: Ctx) -> list[Effect]:
    if not paths or row.active_task is None:
        return []
    root = row.options.get("cwd")
    effects: list[Effect] = []
    for named in paths:
        path = _relative(named, root if isinstance(root, str) else None)
        seen = s.edits.pop(path, {})  # popped and put back: the newest path is last
        for other, at in list(seen.items()):
            peer = s.agents.get(other)
            if cx.now - at > WINDOW_S or peer is None or peer.closed or peer.active_task is None:
                del seen[other]
            elif other != row.agent_id:
                effects += _collided(s, row, peer, path, cx.now - at, cx)
        seen[row.agent_id] = cx.now
        s.edits[path] = seen
        while len(s.edits) > MAX_PATHS:
            del s.edits[next(iter(s.edits))]
    return effects


def _relative(path: str, root: str | None) -> str:
    """Rule 1: ``path`` relative to the agent's directory, when it is in it."""
    path = _normal(path)
    if root is not None and path.startswith("/"):
        base = _normal(root).rstrip("/") + "/"
        if path.startswith(base):
            return path[len(base) :]
    return path


def _normal(path: str) -> str:
    """``path`` without ``.``, empty parts and the ``..`` that can be resolved (as text: no
    file system is read)."""
    absolute = path.startswith("/")
    parts: list[str] = []
    for part in path.split("/"):
        if part in ("", "."):
            continue
        if part == ".." and parts and parts[-1] != "..":
            parts.pop()
        elif part != ".." or not absolute:
            parts.append(part)
    return ("/" if absolute else "") + "/".join(parts)


def _collided(
    s: SessionState, row: AgentRow, peer: AgentRow, path: str, apart: float, cx: Ctx
) -> list[Effect]:
    """Rule 3: told once per pair and path."""
    first, second = sorted((row.agent_id, peer.agent_id))
    key = (first, second, path)
    if key in s.collisions_told:
        return []
    s.collisions_told[key] = None
    while len(s.collisions_told) > MAX_TOLD:
        del s.collisions_told[next(iter(s.collisions_told))]
    text = (
        f"{row.name} (task {row.active_task}) and {peer.name} (task {peer.active_task}) both "
        f"changed {path}, {apart:.0f} s apart: one may undo the other's work"
    )
    note = Notice(
        created_at=cx.now,
        code="edit_collision",
        text=text,
        agent_id=row.agent_id,
        task_id=row.active_task,
        refs=(path, peer.agent_id),
    )
    effects: list[Effect] = [Notify(note=note)]
    for me, them in ((row, peer), (peer, row)):
        said = (
            f"{them.name} changed {path} too, {apart:.0f} s apart from you: look at it again "
            "before you go on, and say so in your summary"
        )
        effects += outbox.notice(s, cx, me.agent_id, "edit_collision", said, me.active_task)
    return effects
