"""The sandbox's rules without a process: the options' checks (pure), what enters a sandboxed
process's environment, what a call through the sandbox's socket runs with, and which rule
governs each path."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from actors.child.sandbox import INSIDE_SOCKET, Sandbox
from actors.runtime.command_socket import Request
from protocol.calls import api
from protocol.core.errors import InvalidArgument
from protocol.records.sandbox import SandboxView, check_spawn, is_normal_path, view_of

BRIDGE_ENV = {
    "PATH": "/usr/bin:/bin",
    "LANG": "C.UTF-8",
    "PARENT_SECRET": "hunter2",
    "GIVEN": "by name",
    "SHEPHERD_CAPABILITY": "the-capability",
    "SHEPHERD_MAILBOX": "/the/mailbox",
    "SHEPHERD_AGENT_ID": "shepherd-agent-1",
    "SHEPHERD_NATS_CREDS": "/the/creds",
}


def make(tmp_path: Path, runner: Any = None, **view: Any) -> Sandbox:
    return Sandbox(
        SandboxView(**view),
        environ=BRIDGE_ENV,
        cwd=str(tmp_path),
        agent_dir=tmp_path / "agent",
        hidden=[],
        runner=runner,
        name="test",
    )


@pytest.mark.parametrize(
    ("path", "normal"),
    [
        ("/a/b", True),
        ("/", False),
        ("a/b", False),
        ("/a/../b", False),
        ("/a/./b", False),
        ("/a//b", False),
        ("/a/", False),
        ("/a\x00", False),
        ("/.hidden", True),
    ],
)
def test_a_writable_path_must_be_absolute_and_normalised(path: str, normal: bool) -> None:
    assert is_normal_path(path) is normal


def test_the_options_checks() -> None:
    def args(**options: Any) -> api.SpawnArgs:
        return api.SpawnArgs(name="a", adapter="command", cmd="x {message}", **options)

    check_spawn(args(sandbox=True, sandbox_rw=("/x",), env=("HOME",)))
    check_spawn(args())
    with pytest.raises(InvalidArgument, match="--sandbox-net"):
        check_spawn(args(sandbox_net=True))
    with pytest.raises(InvalidArgument, match="identity"):
        check_spawn(args(sandbox=True, env=("SHEPHERD_X",)))
    with pytest.raises(InvalidArgument, match="normalised"):
        check_spawn(args(sandbox=True, sandbox_rw=("/a/../b",)))


def test_status_shows_the_sandbox_with_its_defaults() -> None:
    assert view_of({}) is None and view_of({"sandbox": False}) is None
    assert view_of({"sandbox": True}) == SandboxView(net=False, pids=512, tmp_mb=256)
    shown = view_of({"sandbox": True, "sandbox_pids": 0, "sandbox_net": True, "env": ["A"]})
    assert shown == SandboxView(net=True, pids=0, tmp_mb=256, env=("A",))


def test_a_sandboxed_process_gets_the_short_list_its_named_variables_and_its_adapters(
    tmp_path: Path,
) -> None:
    box = make(tmp_path, env=("GIVEN",))
    env = {**BRIDGE_ENV, "PI_OFFLINE": "1", "SHEPHERD_TURN": "3", "LC_ALL": "C"}
    inside = box.environ(env)
    assert inside["PATH"] == "/usr/bin:/bin" and inside["GIVEN"] == "by name"
    assert inside["PI_OFFLINE"] == "1"  # the adapter set it for its process
    assert inside["SHEPHERD_TURN"] == "3" and inside["SHEPHERD_AGENT_ID"] == "shepherd-agent-1"
    assert inside["LC_ALL"] == "C" and inside["TMPDIR"] == "/tmp"
    assert inside["HOME"] == str(tmp_path / "agent" / "home")
    for secret in (
        "PARENT_SECRET",
        "SHEPHERD_CAPABILITY",
        "SHEPHERD_MAILBOX",
        "SHEPHERD_NATS_CREDS",
    ):
        assert secret not in inside


def test_a_call_through_the_socket_runs_as_the_bridge_with_only_what_it_handed_out(
    tmp_path: Path,
) -> None:
    seen: list[Request] = []

    def runner(request: Request) -> tuple[int, str, str]:
        seen.append(request)
        return 0, "", ""

    box = make(tmp_path, runner=runner)
    forged = {
        "SHEPHERD_CAPABILITY": "forged",
        "SHEPHERD_MAILBOX": "/elsewhere",
        "SHEPHERD_TURN_REPORT": "/etc/cron.d/x",
        "SHEPHERD_CHILD_TIMEOUT_S": "5",
        "SHEPHERD_COMMAND_SOCKET": INSIDE_SOCKET,
    }
    box._run(Request(["done", "--status", "completed"], forged, "/"))
    env = seen[-1].env
    assert env["SHEPHERD_CAPABILITY"] == "the-capability"  # the bridge's own identity
    assert env["SHEPHERD_MAILBOX"] == "/the/mailbox"
    assert "SHEPHERD_TURN_REPORT" not in env  # not a path it handed out
    assert "SHEPHERD_COMMAND_SOCKET" not in env and env["SHEPHERD_CHILD_TIMEOUT_S"] == "5"
    report = str(tmp_path / "turns" / "turn-1.json")
    box.wrap(["true"], {**BRIDGE_ENV, "SHEPHERD_TURN_REPORT": report})  # a turn handed it out
    box._run(Request(["rate-limited"], {**forged, "SHEPHERD_TURN_REPORT": report}, "/"))
    assert seen[-1].env["SHEPHERD_TURN_REPORT"] == report


def test_the_most_specific_rule_governs_each_path(tmp_path: Path) -> None:
    session = tmp_path / "checkout" / ".shepherd"
    worktree = session / "worktrees" / "a"
    for path in (worktree, tmp_path / "home"):
        path.mkdir(parents=True)
    box = Sandbox(
        SandboxView(),
        environ=BRIDGE_ENV,
        cwd=str(worktree),
        agent_dir=tmp_path / "agent",
        hidden=[str(session)],
        private=[str(tmp_path / "home")],
        runner=None,
        name="test",
    )
    rules = box._rules(rw=[str(tmp_path / "checkout")])
    assert rules[str(session)] == "secret"  # inside a writable checkout: still hidden
    assert rules[str(tmp_path / "home")] == "hide"
    asked = box._rules(rw=[str(session), str(tmp_path / "home")])
    assert asked[str(session)] == "secret"  # named writable: the session's files stay hidden
    assert asked[str(tmp_path / "home")] == "rw"  # the parent's home, when asked for
    assert rules[str(worktree)] == "rw"  # inside the hidden session: its own, writable
    assert rules[str(tmp_path / "checkout")] == "rw"
    mounts = box._mounts([str(tmp_path / "checkout")])
    order = [mounts.index(str(p)) for p in (tmp_path / "checkout", session, worktree)]
    assert order == sorted(order)  # shallower first: the deeper rule is mounted over it


def test_the_human_status_line_says_the_sandbox() -> None:
    from protocol.calls.views import status_line

    agent = {"name": "boxed", "process_state": "idle", "last_active_at": 0.0}
    assert "sandbox" not in status_line(agent, {}, 0.0)
    box = {"net": False, "pids": 16, "tmp_mb": 4, "rw": ["/a", "/b"], "env": ["HOME"]}
    line = status_line({**agent, "sandbox": box}, {}, 0.0)
    assert line.endswith("[sandbox: no net, 16 pids, /tmp 4 MiB, +2 rw, env HOME]"), line
    line = status_line({**agent, "sandbox": {"net": True, "pids": 0, "tmp_mb": 256}}, {}, 0.0)
    assert line.endswith("[sandbox: net, no pid bound, /tmp 256 MiB]"), line


def test_python_and_tools_under_a_covered_directory_are_bound_back_read_only(
    tmp_path: Path,
) -> None:
    """A checkout (and its virtualenv) under ``/tmp``, which the sandbox has fresh."""
    tools = Path("/tmp") / f"shepherd-rules-{tmp_path.name}"
    tools.mkdir(exist_ok=True)
    try:
        box = Sandbox(
            SandboxView(),
            environ={**BRIDGE_ENV, "PATH": f"{tools}:/usr/bin"},
            cwd=str(tmp_path),
            agent_dir=tmp_path / "agent",
            hidden=[],
            runner=None,
            name="test",
        )
        assert box._rules(rw=[])[str(tools)] == "ro"
        assert "/usr/bin" not in box._rules(rw=[])  # already readable
    finally:
        tools.rmdir()
