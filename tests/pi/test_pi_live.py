"""The live scenarios with REAL Pi children under a real supervisor.

Each Pi agent runs in its own ``shepherd-child`` bridge (``--adapter pi-rpc``) against its own
scripted model server. The test waits on conditions only: the supervisor's lifecycle story
(its ``tap``), the runtime events reaching each agent's actor (a spy on the parent side), the
scripted models' recorded requests, the notification sink, and FIFOs a blocking tool writes
its pid to. Nothing sleeps.
"""

from __future__ import annotations

import json
import os
import re
import select
import shlex
import signal
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from actors.child.scripted_model import Gate, ScriptedModel, Step, Text, ToolCall, models_json
from actors.runtime.procs import session_members
from actors.session.sinks import CollectingSink
from actors.session.supervisor import Supervisor
from protocol.calls.render import render_task_context
from protocol.records.notifications import TaskCompletion
from protocol.records.tasks import TaskResult
from protocol.session import inbound
from protocol.session.effects import Effect
from protocol.session.state import Ctx, SessionState
from protocol.wire.envelopes import AnyEnvelope, RuntimeEnvelope, TaskEnvelope
from tests.processes.conftest import bridge_pids
from tests.reliability.live import Story, pids_with_env, process_running

pytestmark = [pytest.mark.pi, pytest.mark.timeout(90)]

WAIT_S = 60.0
QUESTION = {
    "target": "planner",
    "message": "Which module should I map first?",
    "expects_reply": True,
}


# ---------------------------------------------------------------------- observation


class ParentEvents:
    """Every runtime event as the parent's session handles it: (agent name, envelope)."""

    def __init__(self) -> None:
        self.items: list[tuple[str, RuntimeEnvelope]] = []
        self._cond = threading.Condition()

    def record(self, name: str, env: RuntimeEnvelope) -> None:
        with self._cond:
            self.items.append((name, env))
            self._cond.notify_all()

    def of(self, name: str) -> list[RuntimeEnvelope]:
        with self._cond:
            return [env for who, env in self.items if who == name]

    def wait(
        self,
        name: str,
        event: str,
        *,
        after: int = 0,
        timeout: float = WAIT_S,
        where: Callable[[RuntimeEnvelope], bool] = lambda _: True,
    ) -> int:
        """Index (in ``of(name)``) of the first matching event at or after ``after``."""
        found: list[int] = []

        def check() -> bool:
            mine = [env for who, env in self.items if who == name]
            found[:] = [
                i for i in range(after, len(mine)) if mine[i].event == event and where(mine[i])
            ][:1]
            return bool(found)

        with self._cond:
            if not self._cond.wait_for(check, timeout):
                seen = [f"{e.event}:{(e.text or e.command or '')[:50]}" for e in self.of(name)]
                raise AssertionError(f"{name}: no {event} event after #{after}; saw {seen}")
        return found[0]


def text_has(fragment: str) -> Callable[[RuntimeEnvelope], bool]:
    return lambda env: fragment in (env.text or "")


def user_texts(request: dict[str, Any]) -> list[str]:
    """The text of every user message of one chat-completions request, in order."""
    texts = []
    for message in request["messages"]:
        if message.get("role") != "user":
            continue
        content = message.get("content")
        if isinstance(content, list):
            content = "".join(part.get("text", "") for part in content)
        texts.append(str(content))
    return texts


def completions(sink: CollectingSink) -> list[TaskResult]:
    return [r for n in list(sink.items) if isinstance(n, TaskCompletion) for r in n.results]


def blocking_command(fifo: Path, flag: Path) -> str:
    """A bash tool command that writes its pid into ``fifo`` (the test reads it: no polling
    by the test) and then blocks until ``flag`` exists (the tool's own loop)."""
    return (
        f"echo $$ > {shlex.quote(str(fifo))}; echo started; "
        f"while [ ! -e {shlex.quote(str(flag))} ]; do sleep 0.02; done; echo released"
    )


def read_fifo_line(fifo: Path, timeout: float = WAIT_S) -> str:
    fd = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    data = b""
    try:
        while not data.endswith(b"\n"):
            ready, _, _ = select.select([fd], [], [], timeout)
            if not ready:
                raise AssertionError(f"nothing written to {fifo} within {timeout}s")
            chunk = os.read(fd, 256)
            if not chunk:
                break
            data += chunk
    finally:
        os.close(fd)
    return data.decode().strip()


def agent_processes(agent_id: str) -> list[int]:
    """Live processes whose environment names this agent (bridge, Pi, Pi's tools)."""
    return pids_with_env(f"SHEPHERD_AGENT_ID={agent_id}")


# ---------------------------------------------------------------------- the team


class Team:
    """A real supervisor whose agents are real Pi processes, one scripted model each."""

    def __init__(self, tmp_path: Path, pi_bin: Path) -> None:
        self.tmp_path = tmp_path
        self.pi_bin = pi_bin
        self.workdir = tmp_path / "work"
        self.workdir.mkdir()
        self.story = Story(timeout=WAIT_S)
        self.events = ParentEvents()
        self.sink = CollectingSink()
        self.sup = Supervisor(
            tmp_path / "session",
            sinks=[self.sink],
            mailbox_root=tmp_path / "mailbox",
            tap=self.story,
        )
        self.session = self.sup.session
        self.models: list[ScriptedModel] = []

    def spawn_pi(self, name: str, *steps: Step, **options: Any) -> ScriptedModel:
        """A Pi agent whose model is a new scripted model of ``steps`` (``options``: spawn's
        other options, ``role``, ``approve``, ...)."""
        model = ScriptedModel(steps)
        self.models.append(model)
        path = self.tmp_path / f"{name}-models.json"
        path.write_text(json.dumps(models_json(model.base_url)))
        self.session.spawn(
            name,
            adapter="pi-rpc",
            pi=str(self.pi_bin),
            models_json=str(path),
            cwd=str(self.workdir),
            **options,
        )
        return model

    def agent_id(self, name: str) -> str:
        return self.session.status(name).agents[0].agent_id

    def bridge_pid(self, name: str) -> int:
        return self.sup.launcher.children[self.agent_id(name)].pid

    def pi_pid(self, name: str) -> int:
        bridge = self.bridge_pid(name)
        pids = [
            pid
            for pid in session_members(bridge)
            if Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0", 1)[0] == b"pi"
        ]
        assert len(pids) == 1, pids
        return pids[0]

    def close(self) -> None:
        try:
            self.sup.shutdown()
        finally:
            for model in self.models:
                model.close()


@pytest.fixture
def team(tmp_path: Path, pi_bin: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Team]:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.delenv("SHEPHERD_SESSION", raising=False)
    built = Team(tmp_path, pi_bin)
    original = inbound.envelope

    def spy(state: SessionState, env: AnyEnvelope, cx: Ctx) -> list[Effect]:
        # every runtime event as the session's rule handles it (turn events included: the
        # agent's actor is shown only the ones it reads)
        effects = original(state, env, cx)
        if isinstance(env, RuntimeEnvelope) and env.sender_id in state.agents:
            built.events.record(state.agents[env.sender_id].name, env)
        return effects

    monkeypatch.setattr(inbound, "envelope", spy)
    try:
        yield built
    finally:
        built.close()


# ---------------------------------------------------------------------- the matrix


def test_scout_asks_planner_turn_ends_waiting_reply_is_a_new_turn_done_once(team: Team) -> None:
    release = threading.Event()
    reply_args: dict[str, Any] = {"target": "scout", "message": "Start with src/core."}
    planner = team.spawn_pi(
        "planner",
        Gate(release, then=ToolCall("shepherd_message", reply_args)),
        Text("Answered the scout."),
    )
    scout = team.spawn_pi(
        "scout",
        ToolCall("shepherd_message", QUESTION),
        Text("I asked the planner and will continue when the answer arrives."),
        ToolCall("shepherd_done", {"status": "completed", "summary": "Mapped src/core"}),
        Text("never asked for: done ends the run"),
    )
    s = team.session
    task = s.delegate("scout", "Map the code base for the refactor")
    s.watch(task.task_id)

    # the scout asked (its model was told the task in the task context's wording) and its turn ended
    working = team.story.wait("scout: process working")
    team.story.wait(f"scout: task {task.task_id} waiting for planner")
    team.story.wait("scout: process idle", after=working)
    first = scout.requests[0]
    scout_id = team.agent_id("scout")
    told = TaskEnvelope(
        message_id="shepherd-message-00000000",
        session_id=team.sup.session_id,
        sender_id="shepherd",
        target_id=scout_id,
        created_at=0.0,
        task_id=task.task_id,
        content="Map the code base for the refactor",
    )
    assert user_texts(first) == [render_task_context(told)]

    # the question reached the planner's model (held at the gate): the scout is idle, its task
    # is waiting, and nothing has completed
    (question,) = planner.wait_for_requests(1, timeout=WAIT_S)
    asked = user_texts(question)[-1]
    assert asked.startswith("[Shepherd message from scout]\nMessage ID: shepherd-message-")
    assert asked.endswith("\n\nWhich module should I map first?")
    match = re.search(r"reply with shepherd_message reply_to=(shepherd-message-[0-9a-f]+)\.", asked)
    assert match is not None, asked
    request_id = match.group(1)
    (row,) = s.status("scout").agents
    assert row.process_state == "idle"
    assert row.task is not None and row.task.state == "waiting"
    assert [r.request_id for r in row.task.pending_requests] == [request_id]
    assert completions(team.sink) == []
    assert [e.event for e in team.events.of("scout")].count("turn_end") == 1

    # the planner replies; the reply reaches the scout's model as a NEW turn
    reply_args["reply_to"] = request_id
    release.set()
    requests = scout.wait_for_requests(3, timeout=WAIT_S)
    resumed = requests[2]["messages"]
    assert resumed[-2] == {
        "role": "assistant",
        "content": "I asked the planner and will continue when the answer arrives.",
    }
    reply = user_texts(requests[2])[-1]
    lines = reply.split("\n")
    assert lines[0] == "[Shepherd message from planner]"
    assert lines[1].startswith("Message ID: shepherd-message-")
    assert lines[2] == f"Reply to: {request_id}"
    assert reply.endswith("\n\nStart with src/core.")

    # the scout calls shepherd_done: exactly one completion
    assert team.sink.wait_for(lambda _: len(completions(team.sink)) >= 1, timeout=WAIT_S)
    first_end = team.events.wait("scout", "turn_end")
    second_start = team.events.wait("scout", "turn_start", after=first_end)
    team.events.wait("scout", "turn_end", after=second_start)
    (result,) = completions(team.sink)
    assert (result.task_id, result.status, result.return_code) == (task.task_id, "completed", 0)
    assert result.text == "Mapped src/core"
    scout_events = [e.event for e in team.events.of("scout")]
    assert scout_events.count("turn_start") == scout_events.count("turn_end") == 2
    assert len(scout.requests) == 3 and scout.pending_steps == 1
    # done settled the task; the scout's process is still up and idle (not exited)
    (row,) = s.status("scout").agents
    assert row.process_state == "idle"
    assert row.task is not None and row.task.state == "completed"
    assert len(completions(team.sink)) == 1


def test_steer_while_a_tool_runs_lands_right_after_that_tools_result(
    team: Team, tmp_path: Path
) -> None:
    fifo, flag = tmp_path / "started.fifo", tmp_path / "release"
    os.mkfifo(fifo)
    scout = team.spawn_pi(
        "scout", ToolCall("bash", {"command": blocking_command(fifo, flag)}), Text("Steered.")
    )
    team.session.delegate("scout", "Run the long command.")
    read_fifo_line(fifo)  # the tool is running
    team.session.message("scout", "Change of plan: stop after this command.", steer=True)
    team.events.wait("scout", "output", where=text_has("queued as a steer"))
    flag.touch()
    team.events.wait("scout", "turn_end")

    _, second = scout.wait_for_requests(2, timeout=WAIT_S)
    roles = [m["role"] for m in second["messages"]]
    assert roles[-3:] == ["assistant", "tool", "user"]
    assert "released" in second["messages"][-2]["content"]
    steer = user_texts(second)[-1]
    assert steer.startswith("[Shepherd message from shepherd]\nMessage ID: shepherd-message-")
    assert steer.endswith("\n\nChange of plan: stop after this command.")
    events = [e.event for e in team.events.of("scout")]
    assert events.count("turn_start") == events.count("turn_end") == 1  # one run
    assert completions(team.sink) == []


def test_follow_up_while_running_lands_after_the_final_answer(team: Team, tmp_path: Path) -> None:
    fifo, flag = tmp_path / "started.fifo", tmp_path / "release"
    os.mkfifo(fifo)
    scout = team.spawn_pi(
        "scout",
        ToolCall("bash", {"command": blocking_command(fifo, flag)}),
        Text("First answer."),
        Text("Answer to the follow-up."),
    )
    team.session.delegate("scout", "Run the long command.")
    read_fifo_line(fifo)
    team.session.message("scout", "And one more thing.")
    team.events.wait("scout", "output", where=text_has("queued as a follow-up"))
    flag.touch()
    team.events.wait("scout", "turn_end")

    requests = scout.wait_for_requests(3, timeout=WAIT_S)
    assert "And one more thing." not in json.dumps(requests[1]["messages"])
    last = requests[2]["messages"]
    assert [m["role"] for m in last[-2:]] == ["assistant", "user"]
    assert last[-2]["content"] == "First answer."
    assert user_texts(requests[2])[-1].endswith("\n\nAnd one more thing.")
    outputs = [e.text for e in team.events.of("scout") if e.event == "output"]
    assert outputs[-2:] == ["First answer.", "Answer to the follow-up."]
    events = [e.event for e in team.events.of("scout")]
    assert events.count("turn_start") == events.count("turn_end") == 1
    assert completions(team.sink) == []


def test_a_turn_ending_without_done_leaves_the_task_running_and_tool_events_reach_the_parent(
    team: Team,
) -> None:
    team.spawn_pi(
        "scout",
        ToolCall("bash", {"command": "echo hello-from-pi"}),
        Text("All done, I think."),
    )
    s = team.session
    task = s.delegate("scout", "Say hello from the shell.")
    s.watch(task.task_id)
    working = team.story.wait("scout: process working")
    team.story.wait("scout: process idle", after=working)

    (row,) = s.status("scout").agents
    assert row.process_state == "idle"
    assert row.task is not None and row.task.state == "running"
    assert s.result(task.task_id) is None
    assert completions(team.sink) == []

    # the tool events reached the parent's event log: the watchdog's window and `read`
    events = s.watchdog("read_events", agent="scout")["events"]
    calls = [e for e in events if e["kind"] == "tool_call"]
    results = [e for e in events if e["kind"] == "tool_result"]
    assert [(e["tool"], "echo hello-from-pi" in e["command"]) for e in calls] == [("bash", True)]
    assert len(results) == 1 and "hello-from-pi" in results[0]["preview"]
    assert "echo hello-from-pi" in results[0]["command"]
    lines = s.read("scout").lines
    assert "$ echo hello-from-pi" in lines
    assert "hello-from-pi" in lines
    assert "All done, I think." in lines


def start_endless_tool(team: Team, tmp_path: Path) -> tuple[Any, int]:
    """Pi scout on a watched task, running a bash tool that never ends: (task, tool pid)."""
    fifo = tmp_path / "started.fifo"
    os.mkfifo(fifo)
    team.spawn_pi("scout", ToolCall("bash", {"command": blocking_command(fifo, tmp_path / "x")}))
    task = team.session.delegate("scout", "Run the endless command.")
    team.session.watch(task.task_id)
    return task, int(read_fifo_line(fifo))


def test_close_while_running_aborts_cancels_130_and_leaves_no_process(
    team: Team, tmp_path: Path
) -> None:
    task, tool_pid = start_endless_tool(team, tmp_path)
    s = team.session
    agent_id = team.agent_id("scout")
    pi_pid = team.pi_pid("scout")
    assert os.getsid(tool_pid) == tool_pid  # Pi runs bash tools detached: their own session

    closed = s.close("scout")
    assert closed.cancelled_task_id == task.task_id
    assert team.sink.wait_for(lambda _: bool(completions(team.sink)), timeout=WAIT_S)
    result = s.result(task.task_id)
    assert result is not None and (result.status, result.return_code) == ("cancelled", 130)
    team.story.wait("scout: process exited")
    assert not process_running(tool_pid), "the running tool was stopped"
    assert not process_running(pi_pid)
    assert agent_processes(agent_id) == []
    assert bridge_pids(team.sup.session_dir) == []
    assert [(r.status, r.return_code) for r in completions(team.sink)] == [("cancelled", 130)]
    log = (team.sup.session_dir / "agents" / agent_id / "output.log").read_text()
    assert "pi stopped" in log


def test_pi_killed_fails_the_task_with_return_code_1(team: Team, tmp_path: Path) -> None:
    task, tool_pid = start_endless_tool(team, tmp_path)
    s = team.session
    agent_id = team.agent_id("scout")

    os.kill(team.pi_pid("scout"), signal.SIGKILL)
    assert team.sink.wait_for(lambda _: bool(completions(team.sink)), timeout=WAIT_S)
    (result,) = completions(team.sink)
    assert (result.task_id, result.status, result.return_code) == (task.task_id, "failed", 1)
    assert "without calling done" in (result.error or "")
    team.story.wait("scout: process exited")
    assert s.status("scout").agents[0].exit_code == 137
    log = (team.sup.session_dir / "agents" / agent_id / "output.log").read_text()
    assert "pi exited on its own with status 137" in log
    assert not process_running(tool_pid), "Pi's detached tool did not outlive it"
    assert agent_processes(agent_id) == []


def test_the_pi_demo_tells_the_canonical_story_with_one_completion(
    pi_bin: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import io

    from actors.surfaces.demo import run_pi_demo

    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    out = io.StringIO()
    assert run_pi_demo(out, timeout_s=60.0, pi=str(pi_bin)) == 0, out.getvalue()
    story = out.getvalue()
    assert "completions delivered: 1" in story
    assert "waiting for planner: 'Which module should I map first?'" in story
    assert "completed (rc 0) by scout: Mapped src/core" in story
    assert "[Shepherd message from planner]" in story  # what the scout's model was told


def test_a_pi_agent_in_its_own_worktree(team: Team, tmp_path: Path) -> None:
    """Pi runs in the agent's git worktree: its bash tool writes there, and the completion
    lists the file (the repository's own checkout is untouched)."""
    import subprocess

    repo = tmp_path / "repo"
    repo.mkdir()
    for argv in (["init", "-q", "-b", "main"], ["commit", "-q", "--allow-empty", "-m", "0"]):
        subprocess.run(
            ["git", "-c", "user.name=T", "-c", "user.email=t@example.invalid", *argv],
            cwd=repo,
            check=True,
            capture_output=True,
        )
    model = ScriptedModel(
        [
            ToolCall("bash", {"command": "echo from-pi > pi.txt && pwd"}),
            ToolCall("shepherd_done", {"status": "completed", "summary": "wrote it"}),
            Text("done"),
        ]
    )
    team.models.append(model)
    config = tmp_path / "pi-models.json"
    config.write_text(json.dumps(models_json(model.base_url)))
    s = team.session
    s.spawn(
        "scout",
        adapter="pi-rpc",
        pi=str(team.pi_bin),
        models_json=str(config),
        worktree=True,
        repo=str(repo),
    )
    task = s.delegate("scout", "write pi.txt")
    # (Pi's start alone takes seconds on a busy machine: a longer wait than the others')
    waited = s.wait(task.task_id, timeout_s=75)
    (result,) = waited.completed
    assert result.status == "completed", result
    assert result.changes is not None
    assert result.changes.files == ("pi.txt",)
    worktree = team.sup.session_dir / "worktrees" / "scout"
    assert (worktree / "pi.txt").read_text() == "from-pi\n"
    assert not (repo / "pi.txt").exists()
