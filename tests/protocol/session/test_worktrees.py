"""protocol.session.worktrees: the rules of agents in git worktrees (no git: the probes'
answers are given by the test, as the git worker would hand them back)."""

from __future__ import annotations

from typing import Any

from protocol.calls import api, api_worktrees
from protocol.records.journal import TaskChangesRecord, WorktreeRemovedRecord
from protocol.records.notifications import Notice, TaskCompletion
from protocol.records.settings import Settings
from protocol.records.worktrees import (
    Snapshot,
    WorktreeChanges,
    WorktreeProbed,
    WorktreeReleased,
)
from protocol.session import status, worktree_events, worktrees
from protocol.session.effects import Deliver, Effect, Flush, ProbeWorktree, TellTask
from protocol.session.restore import fold
from protocol.session.state import SessionState
from protocol.session.task import Listed
from protocol.wire.envelopes import TaskEnvelope
from tests.protocol.session.harness import SESSION, Session, answer, delivered, notes, of


def spawn_in_worktree(s: Session, name: str) -> str:
    """A spawn as the session's edge hands it over once the worktree is made."""
    args = api.SpawnArgs(
        name=name,
        worktree=True,
        repo="/repo",
        branch=f"b/{name}",
        base="c0ffee",
        cwd=f"/session/worktrees/{name}",
    )
    return str(answer(s.call(args)).agent_id)


def probed(s: Session, **fields: Any) -> list[Effect]:
    return s.run(worktree_events.probed(s.state, WorktreeProbed(**fields), s.ctx()))


def changes(*files: str) -> WorktreeChanges:
    return WorktreeChanges(branch="b", path="/w", files=files, count=len(files))


def test_a_task_is_handed_over_only_once_its_start_is_recorded() -> None:
    s = Session()
    agent = spawn_in_worktree(s, "alpha")
    task_effects = s.call(api.DelegateArgs(target="alpha", task="edit"))
    task_id = answer(task_effects).task_id
    assert delivered(task_effects, TaskEnvelope) == []
    (probe,) = of(task_effects, ProbeWorktree)
    assert (probe.kind, probe.task_id, probe.worktree.path) == (
        "snapshot",
        task_id,
        "/session/worktrees/alpha",
    )
    snap = Snapshot(head="h0", dirty={"x": "1"})
    effects = probed(s, kind="snapshot", task_id=task_id, agent_id=agent, snapshot=snap)
    assert [e.task_id for e in delivered(effects, TaskEnvelope, agent)] == [task_id]
    assert s.state.snapshots[task_id] == snap
    # an agent without a worktree gets its task at once
    s.spawn("plain")
    plain = s.call(api.DelegateArgs(target="plain", task="edit"))
    assert len(delivered(plain, TaskEnvelope)) == 1 and of(plain, ProbeWorktree) == []


def test_a_failed_snapshot_still_hands_the_task_over_and_tells_the_parent() -> None:
    s = Session()
    agent = spawn_in_worktree(s, "alpha")
    task_id = s.delegate("alpha")
    effects = probed(s, kind="snapshot", task_id=task_id, agent_id=agent, error="not a repo")
    assert len(delivered(effects, TaskEnvelope, agent)) == 1
    (notice,) = notes(effects, Notice)
    assert notice.code == "worktree_failed" and "not a repo" in notice.text
    assert task_id not in s.state.snapshots
    # a snapshot of a task settled meanwhile hands nothing over
    s.call(api.CancelArgs(task_id=task_id))
    later = s.delegate("alpha")
    s.call(api.CancelArgs(task_id=later))
    effects = probed(s, kind="snapshot", task_id=later, agent_id=agent, snapshot=Snapshot(head="h"))
    assert of(effects, Deliver) == [] and later not in s.state.snapshots


def test_watchers_get_the_result_with_its_changes_and_the_overlap() -> None:
    s = Session()
    alpha = spawn_in_worktree(s, "alpha")
    beta = spawn_in_worktree(s, "beta")
    task_id = s.delegate("alpha")
    snap = Snapshot(head="h0")
    probed(s, kind="snapshot", task_id=task_id, agent_id=alpha, snapshot=snap)
    s.call(api.WatchArgs(ids=(task_id,)))
    done = s.done(alpha, summary="ok")
    # settled and answered at once; the watchers wait for the listing
    assert s.state.tasks[task_id].terminal and notes(done, TaskCompletion) == []
    (probe,) = of(done, ProbeWorktree)
    assert probe.kind == "diff" and probe.snapshot == snap
    assert [o.agent_id for o in probe.others] == [beta]
    # a watch meanwhile sees it pending (its result comes with the changes)
    watch = answer(s.call(api.WatchArgs(ids=(task_id,))))
    assert watch.pending == (task_id,) and watch.completed == ()
    listed = changes("a.txt", "shared.txt")
    effects = probed(
        s, kind="diff", task_id=task_id, agent_id=alpha, changes=listed, changed_files=5
    )
    assert [r.changes for r in s.journal if isinstance(r, TaskChangesRecord)] == [listed]
    assert s.state.results[task_id].changes == listed
    assert s.state.worktree_changed[alpha] == 5
    flushes = [e.event for e in effects if hasattr(e, "event") and isinstance(e.event, Flush)]
    told = [n for f in flushes for n in notes(s.fire(f), TaskCompletion)]
    assert len(told) == 2 and all(n.results[0].changes == listed for n in told)
    # a second answer to the same probe changes nothing
    assert probed(s, kind="diff", task_id=task_id, agent_id=alpha, changes=listed) == []


def test_a_failed_listing_still_hands_the_result_over_and_tells_the_parent() -> None:
    s = Session()
    alpha = spawn_in_worktree(s, "alpha")
    task_id = s.delegate("alpha")
    s.call(api.WatchArgs(ids=(task_id,)))
    s.call(api.CancelArgs(task_id=task_id))
    effects = probed(s, kind="diff", task_id=task_id, agent_id=alpha, error="git exploded")
    (notice,) = notes(effects, Notice)
    assert notice.code == "worktree_failed" and "git exploded" in notice.text
    result = s.state.results[task_id]
    assert result.changes is not None and result.changes.error == "git exploded"
    assert result.changes.branch == "b/alpha"
    assert task_id not in s.state.subscribers  # handed to its watcher's buffer


def test_close_names_the_worktree_and_released_is_journaled_or_told() -> None:
    s = Session()
    alpha = spawn_in_worktree(s, "alpha")
    closed = answer(s.call(api.CloseArgs(agent="alpha")))
    assert closed.worktree_path == "/session/worktrees/alpha"
    kept = WorktreeReleased(agent_id=alpha, path=closed.worktree_path, removed=False, why="dirty")
    effects = s.run(worktrees.released(s.state, kept, s.ctx()))
    (notice,) = notes(effects, Notice)
    assert notice.code == "worktree_kept" and "/session/worktrees/alpha" in notice.text
    assert "dirty" in notice.text and "b/alpha" in notice.text
    # closing again names it again (the edge tries again); once removed, journaled, never again
    assert answer(s.call(api.CloseArgs(agent="alpha"))).worktree_path == closed.worktree_path
    gone = WorktreeReleased(agent_id=alpha, path=closed.worktree_path, removed=True)
    effects = s.run(worktrees.released(s.state, gone, s.ctx()))
    assert [r.path for r in s.journal if isinstance(r, WorktreeRemovedRecord)] == [
        closed.worktree_path
    ]
    assert answer(s.call(api.CloseArgs(agent="alpha"))).worktree_path is None
    assert s.run(worktrees.released(s.state, gone, s.ctx())) == []
    listing = answer(s.call(api_worktrees.WorktreesArgs()))
    assert [(w.agent, w.state) for w in listing.worktrees] == [("alpha", "removed")]


def test_listing_is_paged_and_status_shows_the_branch() -> None:
    s = Session()
    for i in range(25):
        spawn_in_worktree(s, f"a{i:02}")
    s.spawn("plain")
    first = answer(s.call(api_worktrees.WorktreesArgs()))
    assert len(first.worktrees) == 20 and first.next_cursor == 20
    rest = answer(s.call(api_worktrees.WorktreesArgs(cursor=20)))
    assert [w.agent for w in rest.worktrees] == [f"a{i}" for i in range(20, 25)]
    assert rest.next_cursor is None
    assert answer(s.call(api_worktrees.WorktreesArgs(cursor=1000))).worktrees == ()
    view = status.view(s.state, None, s.now)
    rows = {r.name: r for r in view.agents}
    assert rows["a00"].branch == "b/a00" and rows["a00"].changed_files is None
    assert rows["plain"].branch is None


def test_restart_keeps_worktrees_changes_and_removals() -> None:
    s = Session()
    alpha = spawn_in_worktree(s, "alpha")
    task_id = s.delegate("alpha")
    probed(s, kind="snapshot", task_id=task_id, agent_id=alpha, snapshot=Snapshot(head="h"))
    s.done(alpha)
    listed = changes("x")
    probed(s, kind="diff", task_id=task_id, agent_id=alpha, changes=listed, changed_files=1)
    s.call(api.CloseArgs(agent="alpha"))
    gone = WorktreeReleased(agent_id=alpha, path="/session/worktrees/alpha", removed=True)
    s.run(worktrees.released(s.state, gone, s.ctx()))
    again = fold(s.journal, SessionState(SESSION, Settings()))
    assert again.results[task_id].changes == listed
    assert again.worktree_removed == {alpha: "/session/worktrees/alpha"}
    row = again.agents[alpha]
    assert worktrees.worktree_of(again, alpha) is None  # removed
    assert row.options["cwd"] == "/session/worktrees/alpha" and row.options["base"] == "c0ffee"


def test_deliver_task_for_a_removed_worktree_is_plain() -> None:
    s = Session()
    alpha = spawn_in_worktree(s, "alpha")
    s.state.worktree_removed[alpha] = "/gone"
    effects = s.call(api.DelegateArgs(target="alpha", task="x"))
    assert of(effects, ProbeWorktree) == [] and len(of(effects, Deliver)) == 1


def test_a_settled_tasks_actor_lives_until_its_changes_are_listed_and_adds_them() -> None:
    """The result is the task's: its actor outlives its settlement while git lists what it
    changed, adds the changes to its result, and only then is the result journaled with
    them, handed over, and the actor stopped."""
    s = Session()
    alpha = spawn_in_worktree(s, "alpha")
    task_id = s.delegate("alpha")
    probed(s, kind="snapshot", task_id=task_id, agent_id=alpha, snapshot=Snapshot(head="h0"))
    s.call(api.WatchArgs(ids=(task_id,)))
    s.done(alpha, summary="ok")
    assert s.state.tasks[task_id].terminal and task_id in s.task_actors
    result = s.task_actors[task_id].result
    assert result is not None
    assert result.changes is None
    listed = changes("a.txt")
    effects = probed(s, kind="diff", task_id=task_id, agent_id=alpha, changes=listed)
    (told,) = [e for e in effects if isinstance(e, TellTask)]
    assert told.task_id == task_id  # to its actor
    assert isinstance(told.message, Listed) and told.message.changes == listed
    kinds = [type(e).__name__ for e in effects]
    assert kinds.index("Journal") < kinds.index("HandOver") < kinds.index("StopTask")
    assert task_id not in s.task_actors and task_id not in s.state.diffing
    assert s.state.results[task_id].changes == listed


def test_a_task_settled_outside_a_worktree_stops_its_actor_at_once() -> None:
    s = Session()
    s.spawn("plain")
    task_id = s.delegate("plain")
    effects = s.done(s.state.tasks[task_id].agent_id)
    assert of(effects, ProbeWorktree) == [] and task_id not in s.task_actors
