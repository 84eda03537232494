"""``shepherd merge``: an agent's worktree branch merged into another branch of one real git
repository (made in a temporary directory), by real scripted agents that commit their work:
checked first with ``git merge-tree`` and nothing changed by a check or a conflict; a merge
commit, a squash or a rebase committed without touching a checkout other than the target's;
the target's checkout following when it is checked out; and every refusal typed, with nothing
changed. Nothing sleeps: tests wait on the agents' completions."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from actors.session.merging import told
from actors.session.sinks import CollectingSink
from actors.session.supervisor import Supervisor
from protocol.calls.api_worktrees import MergeResult
from protocol.core.errors import InvalidArgument
from protocol.records.worktrees import Overlap
from tests.processes.conftest import Serve, cli
from tests.processes.test_crash_points import _start
from tests.processes.test_task_lifecycle import _notices
from tests.processes.test_worktrees import finish, git, git_identity, repo, script
from tests.reliability.live import wait_for_files

pytestmark = pytest.mark.processes

__all__ = ["git_identity", "repo"]  # fixtures used here

Team = tuple[Supervisor, CollectingSink]


def committing(tmp_path: Path, name: str, *changes: str) -> str:
    """An agent whose task writes each ``path=text`` and commits it, one commit a change."""
    commands = [
        " && ".join(
            f"mkdir -p $(dirname {path}) && printf '%s\\n' '{text}' > {path} && git add -A && "
            f"git commit -qm '{name}: {path}'"
            for path, text in (change.split("=", 1) for change in changes)
        )
    ]
    return script(tmp_path, name, *commands)


def spawn_and_work(team: Team, tmp_path: Path, repo: Path, name: str, *changes: str) -> None:
    sup, sink = team
    made = committing(tmp_path, name, *changes)
    sup.call("spawn", {"name": name, "script": made, "worktree": True, "repo": str(repo)})
    assert finish(sup, sink, name, "commit your work").status == "completed"


def head(repo: Path, ref: str = "HEAD") -> str:
    return git(repo, "rev-parse", ref).strip()


def parents(repo: Path, ref: str) -> list[str]:
    return git(repo, "rev-list", "--parents", "-n", "1", ref).split()[1:]


def test_a_check_changes_nothing_then_a_merge_moves_the_checked_out_branch(
    supervisor: Team, tmp_path: Path, repo: Path
) -> None:
    sup, _ = supervisor
    spawn_and_work(supervisor, tmp_path, repo, "alpha", "src/a.txt=from alpha")
    before = head(repo)
    checked = sup.call("merge", {"agent": "alpha", "check": True})
    assert checked.checked_only and not checked.merged and checked.into == "main"
    assert checked.files == ("src/a.txt",) and checked.files_count == 1
    assert head(repo) == before and not (repo / "src" / "a.txt").exists()  # nothing changed
    merged = sup.call("merge", {"agent": "alpha"})
    assert merged.merged and merged.before == before and merged.commit == head(repo)
    assert parents(repo, "HEAD") == [before, head(repo, merged.branch)]  # a merge commit
    assert (repo / "src" / "a.txt").read_text() == "from alpha\n"  # the checkout followed
    assert git(repo, "status", "--porcelain") == ""
    again = sup.call("merge", {"agent": "alpha"})
    assert again.up_to_date and not again.merged and head(repo) == merged.commit


def test_a_live_agent_whose_worktree_changed_the_merged_paths_is_told(
    supervisor: Team, tmp_path: Path, repo: Path
) -> None:
    sup, _ = supervisor
    spawn_and_work(supervisor, tmp_path, repo, "alpha", "shared.txt=from alpha", "a.txt=a")
    # beta writes what it is told into a file, renamed into place whole (the test waits on it)
    heard = tmp_path / "beta-heard.txt"
    cmd = f"printf '%s' {{message}} > {heard}.part && mv {heard}.part {heard}"
    sup.call("spawn", {"name": "beta", "adapter": "command", "cmd": cmd, "worktree": True,
                       "repo": str(repo)})  # fmt: skip
    (sup.session_dir / "worktrees" / "beta" / "shared.txt").write_text("beta's edit\n")
    sup.call("spawn", {"name": "gamma", "script": script(tmp_path, "gamma"), "worktree": True,
                       "repo": str(repo)})  # fmt: skip  # changed nothing: not told
    merged = sup.call("merge", {"agent": "alpha"})
    assert merged.merged
    assert [(o.agent, o.files, o.count) for o in merged.overlaps] == [("beta", ("shared.txt",), 1)]
    said = wait_for_files(tmp_path, lambda: heard.exists() and heard.read_text(), 60)
    assert said and "alpha's branch was merged into main" in said and "shared.txt" in said


def test_rebase_siblings_rebases_the_clean_ones_and_tells_each_which(
    supervisor: Team, tmp_path: Path, repo: Path
) -> None:
    sup, sink = supervisor
    (repo / "shared.txt").write_text("one\ntwo\nthree\n")
    git(repo, "commit", "-qam", "three lines")
    edit = "sed -i s/one/ONE/ shared.txt && git commit -qam 'alpha: line one'"
    sup.call("spawn", {"name": "alpha", "script": script(tmp_path, "alpha", edit),
                       "worktree": True, "repo": str(repo)})  # fmt: skip
    assert finish(sup, sink, "alpha", "edit line one").status == "completed"
    for name in ("beta", "gamma"):
        sup.call("spawn", {"name": name, "script": script(tmp_path, name), "worktree": True,
                           "repo": str(repo)})  # fmt: skip
    beta, gamma = (sup.session_dir / "worktrees" / n for n in ("beta", "gamma"))
    (beta / "shared.txt").write_text("one\ntwo\nTHREE\n")  # committed: a clean worktree
    git(beta, "commit", "-qam", "beta: line three")
    (gamma / "shared.txt").write_text("one\nTWO\nthree\n")  # not committed: left alone
    merged = sup.call("merge", {"agent": "alpha", "rebase_siblings": True})
    assert merged.merged and sorted(o.agent for o in merged.overlaps) == ["beta", "gamma"]
    assert merged.rebased == ("beta",) and merged.not_rebased == ("gamma",)
    assert (beta / "shared.txt").read_text() == "ONE\ntwo\nTHREE\n"  # on top of the merge
    assert git(beta, "merge-base", "--is-ancestor", merged.commit, "HEAD") == ""
    assert (gamma / "shared.txt").read_text() == "one\nTWO\nthree\n"  # untouched


def test_conflicting_paths_are_reported_and_nothing_changes(
    supervisor: Team, tmp_path: Path, repo: Path
) -> None:
    sup, _ = supervisor
    spawn_and_work(supervisor, tmp_path, repo, "alpha", "shared.txt=from alpha", "only.txt=a")
    (repo / "shared.txt").write_text("from main\n")
    git(repo, "commit", "-qam", "main moves on")
    before = head(repo)
    result = sup.call("merge", {"agent": "alpha", "strategy": "squash"})
    assert not result.merged and result.conflicts == ("shared.txt",)
    assert result.conflicts_count == 1 and result.commit is None
    assert head(repo) == before and (repo / "shared.txt").read_text() == "from main\n"
    assert git(repo, "status", "--porcelain") == ""


def test_squash_and_rebase_into_a_branch_not_checked_out_touch_no_checkout(
    supervisor: Team, tmp_path: Path, repo: Path
) -> None:
    sup, _ = supervisor
    git(repo, "branch", "release")
    git(repo, "branch", "staging")
    start = head(repo)
    spawn_and_work(supervisor, tmp_path, repo, "alpha", "one.txt=1", "two.txt=2")
    squashed = sup.call("merge", {"agent": "alpha", "into": "release", "strategy": "squash"})
    assert squashed.merged and squashed.files == ("one.txt", "two.txt")
    assert parents(repo, "release") == [start]  # one commit, on release's head
    assert "squashed (2 commit(s)" in git(repo, "log", "-1", "--format=%B", "release")
    rebased = sup.call("merge", {"agent": "alpha", "into": "staging", "strategy": "rebase"})
    assert rebased.merged and rebased.files_count == 2
    chain = git(repo, "rev-list", "--reverse", f"{start}..staging").split()
    assert len(chain) == 2 and parents(repo, chain[0]) == [start]  # replayed, one by one
    assert git(repo, "rev-parse", "staging^{tree}") == git(repo, "rev-parse", "release^{tree}")
    assert head(repo) == start and not (repo / "one.txt").exists()  # main's checkout untouched


def test_the_queue_merges_in_completion_order_and_stops_at_a_conflict(
    supervisor: Team, tmp_path: Path, repo: Path
) -> None:
    sup, _ = supervisor
    spawn_and_work(supervisor, tmp_path, repo, "beta", "b.txt=b", "shared.txt=from beta")
    spawn_and_work(supervisor, tmp_path, repo, "alpha", "a.txt=a")
    spawn_and_work(supervisor, tmp_path, repo, "gamma", "shared.txt=from gamma")
    spawn_and_work(supervisor, tmp_path, repo, "delta", "d.txt=d")
    sup.call("spawn", {"name": "idle", "script": script(tmp_path, "idle"), "worktree": True,
                       "repo": str(repo)})  # fmt: skip  # no task completed: not queued
    result = sup.call("merge", {"queue": True})
    steps = [(q.agent, q.merged, q.conflicts) for q in result.queue]
    # beta, then alpha (the order they completed); gamma conflicts with beta's shared.txt and
    # stops the queue: delta is not tried
    assert steps == [("beta", True, ()), ("alpha", True, ()), ("gamma", False, ("shared.txt",))]
    assert result.agent == "gamma" and not result.merged
    assert (repo / "a.txt").exists() and (repo / "b.txt").exists()
    assert not (repo / "d.txt").exists()
    assert (repo / "shared.txt").read_text() == "from beta\n"
    for fields in ({}, {"agent": "alpha", "queue": True}):  # one agent, or the queue
        with pytest.raises(InvalidArgument, match="name an agent, or queue"):
            sup.call("merge", fields)
    for ordered_only in ({"agent": "delta", "order": ["delta"]}, {"order": ["delta"]}):
        with pytest.raises(InvalidArgument, match="order: only with queue"):
            sup.call("merge", ordered_only)
    with pytest.raises(InvalidArgument, match="order"):
        sup.call("merge", {"queue": True, "order": ["delta"] * 101})
    # a given order: delta alone (gamma's conflict left for the parent)
    ordered = sup.call("merge", {"queue": True, "order": ["delta"], "strategy": "squash"})
    assert [(q.agent, q.merged) for q in ordered.queue] == [("delta", True)]
    assert (repo / "d.txt").exists()


def test_refusals_are_typed_and_change_nothing(
    supervisor: Team, tmp_path: Path, repo: Path
) -> None:
    sup, _ = supervisor
    spawn_and_work(supervisor, tmp_path, repo, "alpha", "a.txt=a")
    sup.call("spawn", {"name": "plain", "script": script(tmp_path, "plain")})
    before = head(repo)
    branch = sup.call("merge", {"agent": "alpha", "check": True}).branch
    refused: list[tuple[dict[str, Any], str]] = [
        ({"agent": "plain"}, "has no worktree"),
        ({"agent": "alpha", "into": "no-such-branch"}, "no branch 'no-such-branch'"),
        ({"agent": "alpha", "into": "-x"}, "not a valid branch name"),
        ({"agent": "alpha", "into": "a..b"}, "not a valid branch name"),
        ({"agent": "alpha", "into": branch}, "own branch"),
        ({"agent": "alpha", "into": "x" * 201}, "into"),
        ({"agent": "alpha", "strategy": "octopus"}, "strategy"),
    ]
    for fields, words in refused:
        with pytest.raises(InvalidArgument, match="merge") as caught:
            sup.call("merge", fields)
        assert words in str(caught.value), (fields, str(caught.value))
    # the agent's uncommitted change is not on its branch: refused, naming it
    (sup.session_dir / "worktrees" / "alpha" / "loose.txt").write_text("not committed\n")
    with pytest.raises(InvalidArgument, match=r"uncommitted change\(s\) \(loose.txt\)"):
        sup.call("merge", {"agent": "alpha"})
    (sup.session_dir / "worktrees" / "alpha" / "loose.txt").unlink()
    # the target's checkout has uncommitted changes: refused before anything is made
    (repo / "README.md").write_text("edited, not committed\n")
    with pytest.raises(InvalidArgument, match="checked out in"):
        sup.call("merge", {"agent": "alpha"})
    assert head(repo) == before


def test_merge_from_the_command_line(serve: Any, repo: Path, tmp_path: Path) -> None:
    serve()
    session = tmp_path / "session"
    made = committing(tmp_path, "alpha", "cli.txt=from the cli")
    cli("spawn", "alpha", "--script", made, "--worktree", "--repo", str(repo), session=session)
    _, task = cli("delegate", "alpha", "commit your work", session=session)
    cli("wait", task["task_id"], "--timeout", "60", session=session)
    _, checked = cli("merge", "alpha", "--check", session=session)
    assert checked["checked_only"] and checked["files"] == ["cli.txt"]
    _, merged = cli("merge", "alpha", "--strategy", "squash", session=session)
    assert merged["merged"] and (repo / "cli.txt").read_text() == "from the cli\n"
    code, refused = cli("merge", "alpha", "--strategy", "bogus", session=session, check=False)
    assert code != 0 and refused["error"]["code"] == "invalid_argument"
    _, queued = cli("merge", "--queue", session=session)  # alpha's branch is in main already
    assert queued["queue"] == [{"agent": "alpha", "merged": False, "up_to_date": True}]
    _, ordered = cli("merge", "--queue", "--order", "alpha", "--order", "alpha", session=session)
    assert [q["agent"] for q in ordered["queue"]] == ["alpha", "alpha"]


def _journaled_merges(session: Path) -> list[dict[str, Any]]:
    lines = (session / "journal.jsonl").read_text().splitlines()
    return [r["record"] for r in map(json.loads, lines) if r["type"] == "merge"]


def test_a_merge_is_journaled_and_told_as_a_notice(serve: Any, repo: Path, tmp_path: Path) -> None:
    server = serve()
    session = tmp_path / "session"
    made = committing(tmp_path, "alpha", "told.txt=told")
    cli("spawn", "alpha", "--script", made, "--worktree", "--repo", str(repo), session=session)
    _, task = cli("delegate", "alpha", "commit your work", session=session)
    cli("wait", task["task_id"], "--timeout", "60", session=session)
    _, merged = cli("merge", "alpha", session=session)
    assert [r["state"] for r in _journaled_merges(session)] == ["planned", "done"]
    assert server.wait_for(lambda _: _notices(server, "branch_merged"), timeout=60)
    (note,) = _notices(server, "branch_merged")
    assert merged["commit"][:12] in note["text"] and note["refs"][0] == merged["commit"]


@pytest.mark.parametrize(("point", "done"), [("merge.planned", False), ("merge.moved", True)])
def test_a_parent_killed_mid_merge_says_at_its_restart_whether_it_was_done(
    point: str, done: bool, repo: Path, tmp_path: Path
) -> None:
    session = tmp_path / "session"
    servers: list[Serve] = []
    try:
        first = _start(session, point)
        servers.append(first)
        made = committing(tmp_path, "alpha", "crash.txt=crash")
        cli("spawn", "alpha", "--script", made, "--worktree", "--repo", str(repo),
            session=session)  # fmt: skip
        _, task = cli("delegate", "alpha", "commit your work", session=session)
        cli("wait", task["task_id"], "--timeout", "60", session=session)
        before = head(repo)
        # the whole command line here, not the supervisor's socket: its own client sees the
        # supervisor gone and says so at once (it would wait out its 30 s bound)
        here = [sys.executable, "-m", "actors.surfaces.cli", "merge", "alpha", "--json"]
        ran = subprocess.run(
            [*here, "--session", str(session)],
            check=False,
            capture_output=True,
            text=True,
            timeout=60,
        )
        first.proc.wait(timeout=60)
        assert first.proc.returncode == -signal.SIGKILL, f"{point} not reached"
        refused = json.loads(ran.stdout)["error"]
        assert ran.returncode != 0 and refused["code"] == "session_unavailable"
        assert "is gone: it stopped before it answered" in refused["message"], refused
        (planned,) = _journaled_merges(session)
        assert planned["state"] == "planned" and planned["before"] == before
        assert head(repo) == (planned["commit"] if done else before)  # all or nothing
        second = _start(session, None)
        servers.append(second)
        assert second.wait_for(lambda _: _notices(second, "merge_recovered"), timeout=60)
        (note,) = _notices(second, "merge_recovered")
        said = "was done before the restart" if done else "was not done before the restart"
        assert said in note["text"], note
        states = [r["state"] for r in _journaled_merges(session)]
        assert states == ["planned", "done" if done else "abandoned"]
        if not done:  # merged again by the new parent, once
            _, again = cli("merge", "alpha", session=session)
            assert again["merged"] and head(repo) == again["commit"]
    finally:
        for server in servers:
            server.stop()


def test_what_each_agent_told_is_told_says_whether_its_branch_was_rebased() -> None:
    result = MergeResult(
        agent="alpha",
        branch="b",
        into="main",
        strategy="merge",
        before="0" * 40,
        merged=True,
        commit="1" * 40,
        rebased=("beta",),
        not_rebased=("gamma",),
    )
    said = {
        name: told(result, Overlap(agent=name, branch="x", files=("a.txt",), count=3))
        for name in ("beta", "gamma", "delta")
    }
    assert all(
        "changed 3 path(s) your worktree changed too: a.txt and 2 more" in t for t in said.values()
    )
    assert "was rebased onto it" in said["beta"]
    assert "was not rebased onto it" in said["gamma"]
    assert said["delta"].endswith("Bring main into your branch before you go on.")
