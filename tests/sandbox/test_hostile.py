"""Hostile agents in sandboxes: each tries one escape, is refused, and its own work still
completes (its ``done`` reaches the parent through the sandbox's socket); the session goes on.
"""

from __future__ import annotations

import os
import secrets
import socket
import sys
import threading
from pathlib import Path

import pytest

from tests.processes.test_worktrees import GIT_ENV, git, repo
from tests.sandbox.conftest import (
    DONE,
    Team,
    alive,
    finish,
    found,
    idle_script,
    kind,
    probe_agent,
    probe_spawn,
)

__all__ = ["kind", "repo"]  # fixtures used here

pytestmark = [pytest.mark.processes, pytest.mark.timeout(120)]

PY = sys.executable


def test_writes_outside_fail_its_own_directory_and_sandbox_rw_are_written(
    team: Team, tmp_path: Path, kind: str
) -> None:
    outside = Path("/var/tmp") / f"shepherd-probe-{secrets.token_hex(6)}"
    shared = tmp_path / "shared"
    shared.mkdir()
    body = f"""
echo x > {outside}; a=$?
echo x > /etc/shepherd-probe-{outside.name}; b=$?
echo x > {shared}/from-agent.txt; c=$?
echo mine > mine.txt; d=$?
printf 'var_tmp=%s\\netc=%s\\nshared=%s\\nown=%s\\n' $a $b $c $d > found.txt
"""
    work = tmp_path / "work"
    probe_agent(team, work, "writer", body, kind, sandbox_rw=[str(shared)])
    assert finish(team, "writer").status == "completed"
    seen = found(work)
    assert seen["var_tmp"] != "0" and seen["etc"] != "0", seen
    assert seen["shared"] == "0" and seen["own"] == "0", seen
    assert not outside.exists() and not Path(f"/etc/shepherd-probe-{outside.name}").exists()
    assert (shared / "from-agent.txt").read_text() == "x\n"
    assert (work / "mine.txt").read_text() == "mine\n"
    row = next(a for a in team[0].call("status", {}).agents if a.name == "writer")
    assert row.sandbox is not None and row.sandbox.rw == (str(shared),)
    assert (row.sandbox.net, row.sandbox.pids, row.sandbox.tmp_mb) == (False, 512, 256)


def test_another_agents_worktree_and_the_session_files_are_hidden(
    team: Team, tmp_path: Path, repo: Path, monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    sup, _ = team
    for key, value in GIT_ENV.items():  # for its commit: passed in by name (--env)
        monkeypatch.setenv(key, value)
    session, mailbox = sup.session_dir, tmp_path / "mailbox"
    theirs = session / "worktrees" / "neighbour"
    # an unsandboxed neighbour in its own worktree, with work not committed yet
    sup.call("spawn", {"name": "neighbour", "script": idle_script(tmp_path), "worktree": True,
                       "repo": str(repo)})  # fmt: skip
    (theirs / "secret.txt").write_text("uncommitted\n")
    body = f"""
cat {theirs}/secret.txt > /dev/null 2>&1; a=$?
ls -A {session} | wc -l > n_session; cat {session}/journal* > /dev/null 2>&1; b=$?
ls -A {mailbox} | wc -l > n_mailbox
ls -A {Path.home()} | wc -l > n_home
echo mine > mine.txt && git add mine.txt && git commit -qm 'snoop: mine'; c=$?
printf 'theirs=%s\\njournal=%s\\nsession_entries=%s\\nmailbox_entries=%s\\ncommit=%s\\n' \\
  $a $b $(cat n_session) $(cat n_mailbox) $c > .found.txt
rm n_session n_mailbox n_home
"""
    spawn = probe_spawn(tmp_path, kind, "snoop", body, env=list(GIT_ENV))
    sup.call("spawn", {**spawn, "worktree": True, "repo": str(repo)})
    result = finish(team, "snoop")
    assert result.status == "completed"
    lines = (session / "worktrees" / "snoop" / ".found.txt").read_text().splitlines()
    seen = dict(line.split("=", 1) for line in lines)
    assert seen["theirs"] != "0" and seen["journal"] != "0", seen
    assert seen["mailbox_entries"] == "0", seen  # an empty directory in its place
    assert int(seen["session_entries"]) <= 2, seen  # the way to its own worktree and home
    assert seen["commit"] == "0", seen  # git works in its worktree
    row = next(a for a in sup.call("status", {}).agents if a.name == "snoop")
    assert row.branch is not None
    assert git(repo, "log", "-1", "--format=%s", row.branch).strip() == "snoop: mine"
    assert (theirs / "secret.txt").exists() and any(session.iterdir())  # still there outside


def test_the_parents_environment_and_the_agents_capability_stay_outside(
    team: Team, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    monkeypatch.setenv("PARENT_SECRET", "hunter2-" + secrets.token_hex(4))
    monkeypatch.setenv("PASSED_ON", "given by name")
    body = """
env > env.txt
cat /proc/[0-9]*/environ 2>/dev/null | tr '\\0' '\\n' > proc_env.txt
ls /proc | grep -c '^[0-9]' > n_procs
printf 'procs=%s\\n' $(cat n_procs) > found.txt
"""
    work = tmp_path / "work"
    probe_agent(team, work, "envy", body, kind, env=["PASSED_ON"])
    assert finish(team, "envy").status == "completed"
    row = next(a for a in team[0].call("status", {}).agents if a.name == "envy")
    assert row.pid is not None
    bridge_env = dict(
        item.split("=", 1)
        for item in Path(f"/proc/{row.pid}/environ").read_text().split("\0")
        if "=" in item
    )
    capability = bridge_env["SHEPHERD_CAPABILITY"]
    inside = (work / "env.txt").read_text() + (work / "proc_env.txt").read_text()
    assert os.environ["PARENT_SECRET"] not in inside
    assert capability not in inside and "SHEPHERD_CAPABILITY" not in inside
    assert "SHEPHERD_MAILBOX" not in inside and "SHEPHERD_SESSION=" not in inside
    assert "PASSED_ON=given by name" in inside
    # its own processes only: bwrap's, the turn's shell and what it ran (never the parent's)
    assert int(found(work)["procs"]) < 10


class _Listener:
    """A TCP server on the loopback that counts connections."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.accepted = 0
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.accepted += 1
            conn.close()

    def close(self) -> None:
        self.sock.close()


@pytest.mark.parametrize("net", [False, True], ids=["no-network", "sandbox-net"])
def test_a_tcp_connection_needs_sandbox_net(
    team: Team, tmp_path: Path, net: bool, kind: str
) -> None:
    listener = _Listener()
    try:
        connect = f"import socket; socket.create_connection(('127.0.0.1', {listener.port}), 5)"
        body = f"{PY} -c \"{connect}\" 2>/dev/null; printf 'tcp=%s\\n' $? > found.txt"
        work = tmp_path / "work"
        probe_agent(team, work, "caller", body, kind, **({"sandbox_net": True} if net else {}))
        assert finish(team, "caller").status == "completed"
        assert (found(work)["tcp"] == "0") is net
        assert (listener.accepted == 1) is net
    finally:
        listener.close()


PTRACE = """
import ctypes, sys
libc = ctypes.CDLL(None, use_errno=True)
print(libc.ptrace(16, int(sys.argv[1]), 0, 0))  # PTRACE_ATTACH
"""


def test_a_sibling_and_the_parent_cannot_be_killed_or_traced(
    team: Team, tmp_path: Path, kind: str
) -> None:
    sup, _ = team
    sibling_work = tmp_path / "sibling"
    sibling_work.mkdir()
    (sibling_work / "sibling.sh").write_text(DONE)
    sup.call("spawn", {"name": "sibling", "adapter": "command", "cwd": str(sibling_work),
                       "cmd": "bash sibling.sh {message}"})  # fmt: skip  # not sandboxed
    assert finish(team, "sibling").status == "completed"  # so it runs, with its pid known
    sibling = next(a for a in sup.call("status", {}).agents if a.name == "sibling")
    assert sibling.pid is not None
    work = tmp_path / "work"
    work.mkdir()
    (work / "ptrace.py").write_text(PTRACE)
    body = f"""
kill -9 {sibling.pid} 2>/dev/null; a=$?
kill -0 {os.getpid()} 2>/dev/null; b=$?
c=$({PY} ptrace.py {sibling.pid} 2>/dev/null || echo failed)
printf 'kill_sibling=%s\\nsignal_parent=%s\\nptrace=%s\\n' $a $b "$c" > found.txt
"""
    probe_agent(team, work, "killer", body, kind)
    assert finish(team, "killer").status == "completed"
    seen = found(work)
    assert seen["kill_sibling"] != "0" and seen["signal_parent"] != "0", seen
    assert seen["ptrace"] in ("-1", "failed"), seen
    assert alive(sibling.pid)
    row = next(a for a in sup.call("status", {}).agents if a.name == "sibling")
    assert row.process_state != "exited"
    assert finish(team, "sibling").status == "completed"  # and it still works


REACH = """
import socket, sys
prefix = f"@shepherd-{sys.argv[1]}-"  # the sibling bridge's (other processes have theirs)
names = [l.split()[-1] for l in open('/proc/net/unix').read().splitlines()[1:]
         if l.split()[-1].startswith(prefix)]
greeted = 0
for name in names:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.settimeout(5)
        s.connect('\\0' + name[1:])
        if s.recv(64).startswith(b'{"ready"'):
            greeted += 1
    except OSError:
        pass
    finally:
        s.close()
print(f"sockets={len(names)}")
print(f"greeted={greeted}")
"""


def test_on_the_network_a_sandboxed_agent_is_refused_by_the_other_command_sockets(
    team: Team, tmp_path: Path, kind: str
) -> None:
    """Sharing the network, it can see the abstract sockets of its siblings' bridges (their
    ``shepherd-child`` calls); none serves a caller in another process namespace."""
    sup, _ = team
    sibling = tmp_path / "sibling"
    probe_agent(team, sibling, "sibling", "true")  # a bridge with a command socket
    assert finish(team, "sibling").status == "completed"  # running, its pid known
    pid = next(a.pid for a in sup.call("status", {}).agents if a.name == "sibling")
    work = tmp_path / "work"
    work.mkdir()
    (work / "reach.py").write_text(REACH)
    probe_agent(team, work, "reacher", f"{PY} reach.py {pid} > found.txt", kind, sandbox_net=True)
    assert finish(team, "reacher").status == "completed"
    seen = found(work)
    assert int(seen["sockets"]) == 1, seen  # it did see it
    assert seen["greeted"] == "0", seen
    assert sup.call("status", {}).agents  # the session goes on


def test_filling_its_temporary_directory_stops_at_its_bound(
    team: Team, tmp_path: Path, kind: str
) -> None:
    body = """
head -c 20000000 /dev/zero > /tmp/fill 2>/dev/null; a=$?
head -c 20000000 /dev/zero > /dev/shm/fill 2>/dev/null; b=$?
printf 'tmp=%s\\ntmp_size=%s\\nshm=%s\\nshm_size=%s\\n' $a $(stat -c %s /tmp/fill) \
  $b $(stat -c %s /dev/shm/fill) > found.txt
rm -f /tmp/fill /dev/shm/fill
"""
    work = tmp_path / "work"
    probe_agent(team, work, "filler", body, kind, sandbox_tmp_mb=4)
    assert finish(team, "filler").status == "completed"
    seen = found(work)
    assert seen["tmp"] != "0" and int(seen["tmp_size"]) <= 4 * 1024 * 1024, seen
    assert seen["shm"] != "0" and int(seen["shm_size"]) <= 4 * 1024 * 1024, seen


BOMB = """
import os, signal
children = []
for _ in range(200):
    try:
        pid = os.fork()
    except OSError:
        break
    if pid == 0:  # a process held alive until the bomb's end kills it
        signal.pause()
        os._exit(0)
    children.append(pid)
for pid in children:
    os.kill(pid, signal.SIGKILL)
for pid in children:
    os.waitpid(pid, 0)
print(f"forked={len(children)}")
"""


def test_a_fork_bomb_is_held_at_sandbox_pids_and_the_session_goes_on(
    team: Team, tmp_path: Path, kind: str
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    (work / "bomb.py").write_text(BOMB)
    probe_agent(team, work, "bomber", f"{PY} bomb.py > found.txt", kind, sandbox_pids=16)
    assert finish(team, "bomber").status == "completed"
    forked = int(found(work)["forked"])
    assert 0 < forked < 16, forked
    other = tmp_path / "other"
    probe_agent(team, other, "after", "echo fine > found.txt")
    assert finish(team, "after").status == "completed"  # the session goes on
    row = next(a for a in team[0].call("status", {}).agents if a.name == "bomber")
    assert row.sandbox is not None and row.sandbox.pids == 16
