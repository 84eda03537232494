"""Agents in git worktrees of one real repository (made in a temporary directory), with real
bridges: what each task changed, the overlap between agents, close keeping a dirty worktree
and removing a clean one, ``worktrees`` listing them, and every hostile spawn refused with
nothing left behind.

Nothing sleeps: tests wait on notifications (the sink) and on ``wait`` with timeouts.
"""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from actors.session.sinks import CollectingSink
from actors.session.supervisor import Supervisor
from protocol.core.errors import InvalidArgument
from protocol.records.notifications import Notice
from protocol.records.tasks import TaskResult
from tests.processes.conftest import cli
from tests.processes.test_recover import _kill_everything as kill_everything
from tests.processes.test_recover import fake_agent
from tests.reliability.live import wait_for_files

pytestmark = pytest.mark.processes

GIT_ENV = {
    "GIT_AUTHOR_NAME": "Test",
    "GIT_AUTHOR_EMAIL": "test@example.invalid",
    "GIT_COMMITTER_NAME": "Test",
    "GIT_COMMITTER_EMAIL": "test@example.invalid",
    "GIT_CONFIG_GLOBAL": "/dev/null",
    "GIT_CONFIG_NOSYSTEM": "1",
}


def git(repo: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", *args], cwd=repo, capture_output=True, text=True, check=True, timeout=60
    )
    return done.stdout


@pytest.fixture(autouse=True)
def git_identity(monkeypatch: pytest.MonkeyPatch) -> None:
    for key, value in GIT_ENV.items():
        monkeypatch.setenv(key, value)


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    path = tmp_path / "repo"
    path.mkdir()
    git(path, "init", "-q", "-b", "main")
    (path / "shared.txt").write_text("shared\n")
    (path / "README.md").write_text("readme\n")
    git(path, "add", "-A")
    git(path, "commit", "-q", "-m", "start")
    return path


def script(tmp_path: Path, name: str, *tasks: str) -> str:
    """A scripted agent that runs one shell command per task, then calls done."""
    steps: list[dict[str, Any]] = []
    for command in tasks:
        steps += [
            {"await": "task"},
            {"run": command},
            {"done": {"status": "completed", "summary": "did it"}},
        ]
    steps.append({"await": "any"})
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps({"steps": steps}))
    return str(path)


def finish(sup: Supervisor, sink: CollectingSink, agent: str, text: str) -> TaskResult:
    """Delegate, watch, and return the task's result as its completion carried it."""
    task_id = sup.call("delegate", {"target": agent, "task": text}).task_id
    sup.call("watch", {"ids": [task_id]})

    def found(items: list[Any]) -> TaskResult | None:
        for note in items:
            for result in getattr(note, "results", ()):
                if result.task_id == task_id:
                    return result  # type: ignore[no-any-return]
        return None

    assert sink.wait_for(lambda items: found(items) is not None, timeout=60)
    result = found(sink.items)
    assert result is not None
    return result


def worktree_list(repo: Path) -> str:
    return git(repo, "worktree", "list", "--porcelain")


def test_two_agents_changes_overlap_close_and_list(
    supervisor: tuple[Supervisor, CollectingSink], repo: Path, tmp_path: Path
) -> None:
    sup, sink = supervisor
    a = script(
        tmp_path,
        "alpha",
        "echo alpha > shared.txt && echo a > only_a.txt",
        "echo again > second.txt",
    )
    b = script(tmp_path, "beta", "echo beta > shared.txt && mkdir -p sub && echo b > sub/new.txt")
    sup.call("spawn", {"name": "alpha", "script": a, "worktree": True, "repo": str(repo)})
    sup.call(
        "spawn",
        {"name": "beta", "script": b, "worktree": True, "repo": str(repo), "branch": "feat/beta"},
    )
    session_id = sup.session_id
    where = sup.session_dir / "worktrees"
    listed = worktree_list(repo)
    assert f"branch refs/heads/shepherd/{session_id}/alpha" in listed
    assert "branch refs/heads/feat/beta" in listed
    assert str(where / "alpha") in listed and str(where / "beta") in listed
    # each agent runs in its own worktree: the main checkout is untouched
    first_b = finish(sup, sink, "beta", "edit")
    assert first_b.changes is not None
    assert first_b.changes.files == ("shared.txt", "sub/new.txt")
    assert first_b.changes.count == 2 and first_b.changes.since == "task"
    assert first_b.changes.overlaps == ()  # alpha changed nothing yet
    first_a = finish(sup, sink, "alpha", "edit")
    changes = first_a.changes
    assert changes is not None and changes.branch == f"shepherd/{session_id}/alpha"
    assert changes.files == ("only_a.txt", "shared.txt")
    assert [(o.agent, o.branch, o.files) for o in changes.overlaps] == [
        ("beta", "feat/beta", ("shared.txt",))
    ]
    assert (repo / "shared.txt").read_text() == "shared\n"
    assert (where / "alpha" / "shared.txt").read_text() == "alpha\n"
    # the second task lists only what it changed, not the first task's uncommitted files
    second_a = finish(sup, sink, "alpha", "more")
    assert second_a.changes is not None
    assert second_a.changes.files == ("second.txt",) and second_a.changes.overlaps == ()
    # the result kept by the session (and its journal) carries them too
    assert sup.call("result", {"task_id": second_a.task_id}).changes == second_a.changes
    # status: branch and the paths changed since the branch's base
    rows = {row.name: row for row in sup.call("status", {}).agents}
    assert rows["alpha"].branch == changes.branch and rows["alpha"].changed_files == 3
    assert rows["beta"].branch == "feat/beta" and rows["beta"].changed_files == 2
    # worktrees: every one, dirty
    trees = {w.agent: w for w in sup.call("worktrees", {}).worktrees}
    assert trees["alpha"].state == "dirty" and trees["alpha"].changed_files == 3
    assert trees["beta"].path == str(where / "beta") and trees["beta"].state == "dirty"
    # beta commits its work: clean, so its close removes the worktree (its branch stays)
    git(where / "beta", "add", "-A")
    git(where / "beta", "commit", "-q", "-m", "beta's work")
    closed_b = sup.call("close", {"agent": "beta"})
    assert closed_b.worktree_path == str(where / "beta") and closed_b.worktree_removed is True
    assert not (where / "beta").exists()
    assert "refs/heads/feat/beta" in git(
        repo, "branch", "--list", "feat/beta", "--format=%(refname)"
    )
    # alpha's worktree has uncommitted and untracked files: kept, and the parent is told where
    closed_a = sup.call("close", {"agent": "alpha"})
    assert closed_a.worktree_removed is False and closed_a.worktree_kept_because
    assert (where / "alpha" / "second.txt").exists()
    kept = [n for n in sink.items if isinstance(n, Notice) and n.code == "worktree_kept"]
    assert len(kept) == 1 and str(where / "alpha") in kept[0].text
    trees = {w.agent: w for w in sup.call("worktrees", {}).worktrees}
    assert trees["beta"].state == "removed" and trees["alpha"].state == "dirty"
    assert trees["alpha"].closed
    # the same name again while the kept worktree is there: refused, nothing made
    with pytest.raises(InvalidArgument, match="exists already"):
        sup.call("spawn", {"name": "alpha", "script": a, "worktree": True, "repo": str(repo)})
    # its work committed, closing it again removes it
    git(where / "alpha", "add", "-A")
    git(where / "alpha", "commit", "-q", "-m", "alpha's work")
    assert sup.call("close", {"agent": "alpha"}).worktree_removed is True
    assert not (where / "alpha").exists()
    assert sup.call("close", {"agent": "alpha"}).worktree_path is None


def test_a_restarted_parent_still_knows_the_worktrees(tmp_path: Path, repo: Path) -> None:
    a = script(tmp_path, "alpha", "echo x > made.txt")
    session = tmp_path / "session"
    sink = CollectingSink()
    sup = Supervisor(session, sinks=[sink], mailbox_root=tmp_path / "mailbox")
    try:
        sup.call("spawn", {"name": "alpha", "script": a, "worktree": True, "repo": str(repo)})
        finish(sup, sink, "alpha", "edit")
        sup.call("spawn", {"name": "gamma", "script": a, "worktree": True, "repo": str(repo)})
        assert sup.call("close", {"agent": "gamma"}).worktree_removed is True
    finally:
        sup.shutdown()
    again = Supervisor(session, mailbox_root=tmp_path / "mailbox2")
    try:
        trees = {w.agent: w for w in again.call("worktrees", {}).worktrees}
        assert trees["alpha"].state == "dirty" and trees["alpha"].changed_files == 1
        assert trees["alpha"].path == str(session / "worktrees" / "alpha")
        assert trees["gamma"].state == "removed"
    finally:
        again.shutdown()


@pytest.mark.parametrize(
    ("fields", "match"),
    [
        ({"repo": "{tmp}/not-a-repo"}, "repo: .* is not a git work tree"),
        ({"repo": "{tmp}/a-file"}, "repo: .* is not a directory"),
        ({"repo": "{tmp}/missing"}, "repo: .* does not exist"),
        ({"branch": "bad..name"}, "branch: 'bad..name' is not a valid branch name"),
        ({"branch": "-x"}, "branch: '-x' is not a valid branch name"),
        ({"branch": "main"}, "branch: no worktree for main: .*(already|used by)"),
        ({"branch": "x" * 201}, "at most 200|length <= 200"),
        ({"base": "no-such-ref"}, "base: 'no-such-ref' is not a commit"),
        ({"cwd": "{tmp}"}, "cwd: an agent with a worktree runs in it"),
        ({"worktree": False}, "repo: only with --worktree"),
        ({"worktree": "yes"}, "Expected `bool`"),
        ({"name": "../evil"}, "name: '../evil' is not a valid agent name"),
        ({"repo": ""}, "length >= 1"),
        ({"repo": "{tmp}/" + "r" * 5000}, "length <= 4096"),
    ],
)
def test_hostile_spawns_are_refused_and_leave_nothing(
    supervisor: tuple[Supervisor, CollectingSink],
    repo: Path,
    tmp_path: Path,
    fields: dict[str, Any],
    match: str,
) -> None:
    sup, _ = supervisor
    (tmp_path / "not-a-repo").mkdir()
    (tmp_path / "a-file").write_text("x")
    a = script(tmp_path, "alpha", "true")
    given = {"name": "alpha", "script": a, "worktree": True, "repo": str(repo), **fields}
    given = {
        k: v.replace("{tmp}", str(tmp_path)) if isinstance(v, str) else v for k, v in given.items()
    }
    before = worktree_list(repo)
    with pytest.raises(InvalidArgument, match=match):
        sup.call("spawn", given)
    assert worktree_list(repo) == before
    assert sup.call("status", {}).agents == ()
    assert not (sup.session_dir / "worktrees" / "alpha").exists()


def test_worktree_twice_for_one_name_is_refused(
    supervisor: tuple[Supervisor, CollectingSink], repo: Path, tmp_path: Path
) -> None:
    sup, _ = supervisor
    a = script(tmp_path, "alpha", "true")
    sup.call("spawn", {"name": "alpha", "script": a, "worktree": True, "repo": str(repo)})
    before = worktree_list(repo)
    with pytest.raises(InvalidArgument, match="alpha"):
        sup.call("spawn", {"name": "alpha", "script": a, "worktree": True, "repo": str(repo)})
    assert worktree_list(repo) == before
    assert [row.name for row in sup.call("status", {}).agents] == ["alpha"]
    # a name refused by the session after the worktree was made: the worktree is undone
    sup.call("spawn", {"name": "beta", "script": a})
    before = worktree_list(repo)
    with pytest.raises(InvalidArgument, match="already exists"):
        sup.call("spawn", {"name": "beta", "script": a, "worktree": True, "repo": str(repo)})
    assert worktree_list(repo) == before
    assert "beta" not in git(repo, "branch", "--list")


def test_command_agent_from_the_cli(serve: Any, repo: Path, tmp_path: Path) -> None:
    """The command adapter, driven from the command line: the agent's turn runs in its
    worktree, its completion lists what it changed, ``worktrees`` lists it."""
    session = tmp_path / "session"
    serve(session)
    cmd = "echo {message} > from_cli.txt && shepherd-child done --status completed"
    cli(
        "spawn",
        "cmdy",
        "--adapter",
        "command",
        "--cmd",
        cmd,
        "--worktree",
        "--repo",
        str(repo),
        session=session,
    )
    _, delegated = cli("delegate", "cmdy", "write", session=session)
    task_id = delegated["task_id"]
    _, waited = cli("wait", task_id, "--timeout", "60", session=session)
    (result,) = waited["completed"]
    assert result["changes"]["files"] == ["from_cli.txt"]
    _, trees = cli("worktrees", session=session)
    assert [(w["agent"], w["state"], w["changed_files"]) for w in trees["worktrees"]] == [
        ("cmdy", "dirty", 1)
    ]
    _, status = cli("status", session=session)
    row = status["agents"][0]
    assert row["branch"] == f"shepherd/{status['session_id']}/cmdy"
    assert row["changed_files"] == 1


def test_git_failing_in_a_worktree_is_told_to_the_parent(
    supervisor: tuple[Supervisor, CollectingSink], repo: Path, tmp_path: Path
) -> None:
    """The agent breaks its worktree (its .git link gone): the completion still comes, saying
    why its changes are unknown; the parent gets a notice; close keeps what it cannot check."""
    sup, sink = supervisor
    a = script(tmp_path, "alpha", "echo x > made.txt && rm .git")
    sup.call("spawn", {"name": "alpha", "script": a, "worktree": True, "repo": str(repo)})
    result = finish(sup, sink, "alpha", "break it")
    assert result.status == "completed"
    assert result.changes is not None and result.changes.error
    assert result.changes.files == () and result.changes.branch.endswith("/alpha")
    failed = [n for n in sink.items if isinstance(n, Notice) and n.code == "worktree_failed"]
    assert len(failed) == 1 and result.task_id in failed[0].text
    closed = sup.call("close", {"agent": "alpha"})
    assert closed.worktree_removed is False and closed.worktree_kept_because
    assert (sup.session_dir / "worktrees" / "alpha" / "made.txt").exists()
    kept = [n for n in sink.items if isinstance(n, Notice) and n.code == "worktree_kept"]
    assert len(kept) == 1
    (row,) = sup.call("worktrees", {}).worktrees
    assert row.state == "unknown" and row.error


def test_odd_file_names_are_listed_and_told(
    supervisor: tuple[Supervisor, CollectingSink], repo: Path, tmp_path: Path
) -> None:
    """A file name that is not UTF-8, one with a newline, and a very long one: listed
    (undecodable bytes replaced, long names cut), and the kept worktree's notice is written."""
    sup, sink = supervisor
    long_name = "n" * 250
    command = f"touch $'caf\\xe9.txt' $'two\\nlines.txt' {long_name}"
    sup.call(
        "spawn",
        {
            "name": "alpha",
            "script": script(tmp_path, "alpha", command),
            "worktree": True,
            "repo": str(repo),
        },
    )
    result = finish(sup, sink, "alpha", "odd names")
    assert result.changes is not None and result.changes.error is None
    assert result.changes.files == ("caf\ufffd.txt", long_name, "two\nlines.txt")
    closed = sup.call("close", {"agent": "alpha"})
    assert closed.worktree_removed is False and "3 uncommitted" in closed.worktree_kept_because
    kept = [n for n in sink.items if isinstance(n, Notice) and n.code == "worktree_kept"]
    assert len(kept) == 1
    recorded = (sup.session_dir / "notifications.jsonl").read_text()
    assert "worktree_kept" in recorded and "caf\ufffd.txt" in recorded


def test_an_agent_in_a_worktree_is_recovered_in_the_same_worktree(
    serve: Any, repo: Path, tmp_path: Path
) -> None:
    """The whole tree is killed mid-task; ``serve --recover`` starts the agent again in its own
    worktree (not the repository, not a new one), so what its first run wrote is still there
    and the task's changes list both runs' files."""
    session = tmp_path / "session"
    first = serve(session)
    record = tmp_path / "runs.txt"
    run = fake_agent(tmp_path)
    where = f"pwd >> {shlex.quote(str(tmp_path / 'cwds.txt'))}"
    cli(
        "spawn",
        "worker",
        "--adapter",
        "command",
        "--cmd",
        f"{where} && echo one > first.txt && {run} first {{message}} {shlex.quote(str(record))}",
        "--resume-cmd",
        f"{where} && echo two > second.txt && {run} resume {{message}} {shlex.quote(str(record))}",
        "--worktree",
        "--repo",
        str(repo),
        session=session,
    )
    _, delegated = cli("delegate", "worker", "change things", session=session)
    task_id = delegated["task_id"]
    cli("watch", task_id, session=session)
    assert first.wait_story("worker", "process working")
    pid_file = Path(str(record) + ".pid")  # written once the first run wrote its file
    assert wait_for_files(tmp_path, pid_file.exists, 60), "the first run never started"
    kill_everything(first, session)

    second = serve(session, "--recover")
    assert second.wait_for(
        lambda lines: any(
            r["task_id"] == task_id
            for x in lines
            if x.get("kind") == "task_completion"
            for r in x["results"]
        ),
        timeout=90,
    ), second.lines
    _, waited = cli("wait", task_id, "--timeout", "30", session=session)
    (result,) = waited["completed"]
    assert result["status"] == "completed", result
    assert sorted(result["changes"]["files"]) == ["first.txt", "second.txt"]
    tree = session / "worktrees" / "worker"
    assert (tmp_path / "cwds.txt").read_text().splitlines() == [str(tree), str(tree)]
    assert not (repo / "first.txt").exists() and not (repo / "second.txt").exists()
    _, trees = cli("worktrees", session=session)
    assert [(w["agent"], w["changed_files"]) for w in trees["worktrees"]] == [("worker", 2)]
    cli("shutdown", session=session)
    second.proc.wait(timeout=30)


#: a Pi that starts and says nothing: spawn returns at once, before Pi would answer
SILENT_PI = "import sys\nfor _ in sys.stdin:\n    pass\n"


def test_spawn_many_takes_spawns_options_from_the_cli(
    serve: Any, repo: Path, tmp_path: Path
) -> None:
    """``spawn-many`` takes every option of ``spawn``: two Pi agents, each in a worktree of
    its own made from one repository, each with the same approval rule; one ``--branch`` for
    two names is refused whole, before anything is made."""
    session = tmp_path / "session"
    serve(session)
    pi = tmp_path / "silent-pi"
    pi.write_text(f"#!{sys.executable}\n{SILENT_PI}")
    pi.chmod(0o755)
    options = ["--adapter", "pi-rpc", "--pi", str(pi), "--provider", "p", "--model", "m"]
    options += ["--worktree", "--repo", str(repo), "--approve", "bash:git push*"]
    before = worktree_list(repo)
    rc, err = cli(
        "spawn-many", "a", "b", *options, "--branch", "feature", session=session, check=False
    )
    assert rc == 2 and err["error"]["code"] == "invalid_argument", err
    assert "cannot share the branch 'feature'" in err["error"]["message"], err
    assert worktree_list(repo) == before and "feature" not in git(repo, "branch", "--list")
    _, status = cli("status", session=session)
    assert status["agents"] == []

    _, spawned = cli("spawn-many", "a", "b", *options, session=session)
    assert spawned["errors"] == [] and all(spawned["agent_ids"]), spawned
    _, status = cli("status", session=session)
    sid = status["session_id"]
    branches = {row["name"]: row["branch"] for row in status["agents"]}
    assert branches == {"a": f"shepherd/{sid}/a", "b": f"shepherd/{sid}/b"}
    _, trees = cli("worktrees", session=session)
    assert sorted((w["agent"], Path(w["path"]).name) for w in trees["worktrees"]) == [
        ("a", "a"),
        ("b", "b"),
    ]
    listed = worktree_list(repo)
    assert f"branch refs/heads/shepherd/{sid}/a" in listed
    assert f"branch refs/heads/shepherd/{sid}/b" in listed
    # each agent's approval rule is journaled with its options (what recovery starts it with)
    journaled = {
        r["record"]["name"]: r["record"]["options"]
        for r in _journal(session)
        if r["type"] == "agent"
    }
    assert {n: o["approve"] for n, o in journaled.items()} == {
        "a": ["bash:git push*"],
        "b": ["bash:git push*"],
    }
    cli("shutdown", session=session)


def _journal(session: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (session / "journal.jsonl").read_text().splitlines()]


def test_spawn_many_refuses_a_name_alone_and_undoes_its_worktree(
    supervisor: tuple[Supervisor, CollectingSink], repo: Path, tmp_path: Path
) -> None:
    """A name refused among several (taken by the session after its worktree was made, or
    refused while its worktree is made) is refused by its index; its worktree is undone and
    the others are spawned in theirs."""
    sup, _ = supervisor
    a = script(tmp_path, "alpha", "true")
    sup.call("spawn", {"name": "beta", "script": a})
    (sup.session_dir / "worktrees" / "delta").mkdir(parents=True)  # a kept worktree's place
    names = ["alpha", "beta", "gamma", "delta"]
    many = sup.call(
        "spawn_many", {"names": names, "script": a, "worktree": True, "repo": str(repo)}
    )
    assert [i is not None for i in many.agent_ids] == [True, False, True, False]
    assert [(e.index, e.code) for e in many.errors] == [
        (1, "invalid_argument"),
        (3, "invalid_argument"),
    ]
    assert "already exists" in many.errors[0].message
    assert "exists already" in many.errors[1].message
    branches = git(repo, "branch", "--list")
    assert "alpha" in branches and "gamma" in branches
    assert "beta" not in branches and "delta" not in branches
    assert not (sup.session_dir / "worktrees" / "beta").exists()
    trees = {w.agent for w in sup.call("worktrees", {}).worktrees}
    assert trees == {"alpha", "gamma"}


def test_two_command_agents_changing_one_file_are_told_at_their_turns_end(
    supervisor: tuple[Supervisor, CollectingSink], repo: Path, tmp_path: Path
) -> None:
    """Live edit collisions for agents whose tools name no files: each turn's end reads what
    the task changed so far in the worktree (their tasks stay open: no done)."""
    sup, sink = supervisor
    for name in ("alpha", "beta"):
        cmd = f"echo {name} > shared.txt; : {{message}}"
        sup.call("spawn", {"name": name, "adapter": "command", "cmd": cmd, "worktree": True,
                           "repo": str(repo)})  # fmt: skip
        sup.call("delegate", {"target": name, "task": "change shared.txt"})

    def collided(items: list[Any]) -> list[Notice]:
        return [n for n in items if isinstance(n, Notice) and n.code == "edit_collision"]

    assert sink.wait_for(lambda items: bool(collided(items)), timeout=60)
    (note,) = collided(sink.items)
    assert note.refs[0] == "shared.txt" and "alpha" in note.text and "beta" in note.text
