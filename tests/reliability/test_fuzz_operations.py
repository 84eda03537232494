"""Schema-driven fuzzing of every operation at every surface, with a canary after each input.

Inputs come from each operation's JSON schema (``hypothesis-jsonschema``), aimed at live
handles and often spoiled with hostile values (``tests/reliability/operation_fuzz.py``). They
go in through every surface a user has:

- the Python API (``Session.run`` of the checked Args, the watchdog's session call), first on
  the deterministic simulation (many inputs, virtual time), then on a live session;
- the CLI: ``shepherd tool NAME --args JSON`` (the tool path) and the typed commands with
  hostile flag values (``shepherd delegate A T --timeout nan`` ...);
- MCP: the server's own tool-call handler;
- the child CLI: ``shepherd-child message|done`` as a real agent of the session.

Each answer must be data or a typed error; after each input the canary checks that a short
deadline still fires and a watched completion is still delivered exactly once. Every test
reports its counts (inputs by surface and kind, outcomes by code, canary checks).
"""

from __future__ import annotations

import contextlib
import io
import itertools
import json
import os
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import msgspec
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from actors.child import cli as child_cli
from actors.session.agent import AgentSpec
from actors.session.session import Session
from actors.session.sinks import CollectingSink
from actors.session.supervisor import Supervisor
from actors.session.watchdog import is_watchdog_call
from actors.session.watchdog import session_call as watchdog_call
from actors.surfaces import cli as shepherd_cli
from actors.surfaces.mcp_server import ShepherdMcp
from actors.testing import SimSession
from protocol import ops
from protocol.calls import api
from protocol.core.errors import ShepherdError
from protocol.records.notifications import TaskCompletion
from protocol.scripted.script import parse_script
from tests.reliability.live import Story
from tests.reliability.operation_fuzz import (
    CHILD_SCHEMAS,
    HOSTILE,
    KNOWN_CODES,
    SCHEMAS,
    World,
    calls,
    child_argv,
)

FUZZ = settings(
    deadline=None,
    database=None,
    derandomize=True,  # CI runs the same inputs every time; scripts/fuzz.py explores
    phases=(Phase.explicit, Phase.generate),  # a failing example is reported unshrunk
    suppress_health_check=[
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
        HealthCheck.filter_too_much,
        HealthCheck.function_scoped_fixture,
    ],
)

#: agents the fuzzer's calls may name and act on (their tasks too)
WORKER = {
    "steps": [
        {
            "repeat": {
                "times": 10_000,
                "steps": [{"await": "any"}, {"say": "worker got: {last}"}],
            }
        }
    ]
}
#: the canary's agents, out of the fuzzer's reach (no call names them)
FINISHER = {
    "steps": [
        {
            "repeat": {
                "times": 10_000,
                "steps": [
                    {"await": "task"},
                    {"await": "message"},
                    {"done": {"status": "completed", "summary": "canary"}},
                ],
            }
        }
    ]
}
NEVER = {"steps": [{"repeat": {"times": 10_000, "steps": [{"await": "task"}]}}]}


def _code_of(exc: BaseException) -> str:
    assert isinstance(exc, ShepherdError), f"an untyped error escaped: {exc!r}"
    assert exc.code in KNOWN_CODES, f"unknown error code {exc.code}: {exc}"
    return exc.code


def _adjust_for_live(op: str, args: dict[str, Any]) -> None:
    """Keep valid calls from blocking the run or starting arbitrary programs: a wait or a
    notifications wait is short, a spawn is a scripted agent (hostile values still go in)."""
    if op == "wait":
        args["timeout_s"] = 0.05
    if op == "notifications":
        args["wait_seconds"] = 0.0
    if op == "spawn":
        args["adapter"] = "scripted"
        for key in ("cmd", "resume_cmd", "pi", "models_json"):
            args.pop(key, None)


# ---------------------------------------------------------------------- the simulation


class SimCanary:
    """The canary in virtual time: a 30-second deadline fires, a completion arrives once."""

    def __init__(self, session: SimSession, sink: CollectingSink) -> None:
        self.session = session
        self.sink = sink
        session.sim_launcher.scripts["canaryfinisher"] = parse_script(FINISHER)
        session.sim_launcher.scripts["canarynever"] = parse_script(NEVER)
        session.spawn("canaryfinisher", script=FINISHER)
        session.spawn("canarynever", script=NEVER)
        self.checks = 0

    def _settled(self, task_id: str) -> list[TaskCompletion]:
        return [
            n
            for n in self.sink.items
            if isinstance(n, TaskCompletion) and any(r.task_id == task_id for r in n.results)
        ]

    def check(self) -> None:
        sim = self.session.sim
        late = self.session.delegate("canarynever", "wait", timeout_minutes=0.5)
        done = self.session.delegate("canaryfinisher", "finish")
        self.session.watch([late.task_id, done.task_id])
        self.session.message("canaryfinisher", "now")
        sim.run_until(
            lambda: bool(self._settled(late.task_id)) and bool(self._settled(done.task_id)),
            max_time=600,
        )
        sim.run_all(max_time=5)  # a duplicate would come within the coalescing window
        (timed_out,) = self._settled(late.task_id)
        (completed,) = self._settled(done.task_id)
        assert {r.status for r in timed_out.results + completed.results} >= {"timed_out"}
        assert any(r.status == "completed" for r in completed.results)
        self.checks += 1


def _run_in_session(session: Session, op: str, args: dict[str, Any]) -> Any:
    if is_watchdog_call(op):
        return watchdog_call(session, op, args)
    return session.run(api.build_args(ops.OPERATIONS[op], **args))


def test_every_operation_on_the_python_api_in_the_simulation(report: Counter[str]) -> None:
    sink = CollectingSink()
    session = SimSession.simulated(7, sink=sink, trace=False)
    world = World()
    for n in range(2):
        name = f"worker{n}"
        session.spawn(name, script=WORKER)
        world.add("agent", name)
    world.add("script", "/nonexistent/script.json")
    canary = SimCanary(session, sink)
    sim_schemas = {k: v for k, v in SCHEMAS.items() if v[0] != "notifications"}

    @settings(FUZZ, max_examples=400)
    @given(call=calls(world, sim_schemas))
    def one(call: tuple[str, str, dict[str, Any], str]) -> None:
        _, op, args, how = call
        report[f"input:{how}"] += 1
        try:
            answer = _run_in_session(session, op, args)
        except Exception as exc:
            report[f"refused:{_code_of(exc)}"] += 1
        else:
            report["accepted"] += 1
            _learn(world, answer)
        session.sim.run_all(max_time=1)
        canary.check()

    try:
        one()
    finally:
        session.shutdown()
    report["canary_checks"] = canary.checks
    assert report["accepted"] > 50 and report["refused:invalid_argument"] > 50, report


def _learn(world: World, answer: Any) -> None:
    """Remember the live handles an answer gives (task ids, request ids)."""
    for attr, kind in (("task_id", "task"), ("request_id", "request")):
        value = getattr(answer, attr, None)
        if isinstance(value, str):
            world.add(kind, value)


# ---------------------------------------------------------------------- a live session


class LiveCanary:
    """The canary on a live session, with two long-lived agents out of the fuzzer's reach:
    a 30 ms deadline fires, and a watched completion arrives once."""

    def __init__(self, sup: Supervisor, sink: CollectingSink, story: Story, root: Path) -> None:
        self.sup = sup
        self.sink = sink
        self.story = story
        for name, script in (("canaryfinisher", FINISHER), ("canarynever", NEVER)):
            path = root / f"{name}.json"
            path.write_text(json.dumps(script))
            sup.call("spawn", {"name": name, "script": str(path)})
            story.wait(f"{name}: process idle")
        self.checks = 0

    def _settled(self, task_id: str) -> list[TaskCompletion]:
        return [
            n
            for n in list(self.sink.items)
            if isinstance(n, TaskCompletion) and any(r.task_id == task_id for r in n.results)
        ]

    def check(self) -> None:
        late = self.sup.call(
            "delegate", {"target": "canarynever", "task": "wait", "timeout_minutes": 0.0005}
        )
        # 30 ms: on a slow machine it may have passed before the watch; then the watch's own
        # answer carries the result (and it must never come again as a notification)
        inline = list(self.sup.call("watch", {"ids": [late.task_id]}).completed)
        done = self.sup.call("delegate", {"target": "canaryfinisher", "task": "finish"})
        watched = self.sup.call("watch", {"ids": [done.task_id]})
        assert watched.pending == (done.task_id,)  # it finishes only on the message below
        self.sup.call("message", {"target": "canaryfinisher", "message": "now"})
        assert self.sink.wait_for(
            lambda _: (
                bool(inline or self._settled(late.task_id)) and bool(self._settled(done.task_id))
            ),
            30,
        ), (
            "the canary died: a deadline did not fire or a completion was not delivered\n"
            f"deadline settled: {bool(inline or self._settled(late.task_id))}, "
            f"completion settled: {bool(self._settled(done.task_id))}\n"
            f"{self.sup.session.status('canaryfinisher')}\n"
            f"{self.sup.session.status('canarynever')}\n"
            f"{self.sup.session.read('canaryfinisher', 20)}\n"
            f"story: {self.story.lines[-30:]}"
        )
        late_results = inline + [r for n in self._settled(late.task_id) for r in n.results]
        assert [r.status for r in late_results] == ["timed_out"], late_results
        (completed,) = self._settled(done.task_id)
        assert completed.results[0].status == "completed"
        self.checks += 1
        assert self._no_duplicates()

    def _no_duplicates(self) -> bool:
        seen: Counter[tuple[str, str]] = Counter()
        for n in list(self.sink.items):
            if isinstance(n, TaskCompletion):
                for r in n.results:
                    seen[(n.watcher_id, r.task_id)] += 1
        return all(count == 1 for count in seen.values())


class LiveWorld:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.sink = CollectingSink()
        self.story = Story(timeout=30)
        self.sup = Supervisor(
            root / "session", sinks=[self.sink], tap=self.story, mailbox_root=root / "mailbox"
        )
        self.world = World()
        self.script = root / "worker.json"
        self.script.write_text(json.dumps(WORKER))
        self.world.add("script", str(self.script))
        self.world.add("directory", str(root))
        self.names = itertools.count()
        self.workers: list[str] = []
        for _ in range(2):
            self.spawn_worker()
        self.canary = LiveCanary(self.sup, self.sink, self.story, root)

    def spawn_worker(self) -> str:
        name = f"worker{next(self.names)}"
        self.sup.call("spawn", {"name": name, "script": str(self.script)})
        self.story.wait(f"{name}: process idle")
        self.world.add("agent", name)
        self.workers.append(name)
        return name

    def keep_workers(self) -> None:
        """The fuzzer may close workers: keep two live ones to aim at."""
        rows = {a.name: a for a in self.sup.session.status().agents}
        live = [w for w in self.workers if w in rows and not rows[w].closed]
        self.workers = live
        while len(self.workers) < 2:
            self.spawn_worker()
        self.world.handles["agent"] = list(self.workers)

    def close_extras(self) -> None:
        """Agents a valid spawn started are closed again (each is a real process)."""
        for row in self.sup.session.status().agents:
            if row.name.startswith(("worker", "canary")) or row.closed:
                continue
            with contextlib.suppress(ShepherdError):
                self.sup.session.close(row.agent_id)

    def learn(self, answer: Any) -> None:
        if isinstance(answer, dict):
            for key, kind in (("task_id", "task"), ("request_id", "request")):
                if isinstance(answer.get(key), str):
                    self.world.add(kind, answer[key])
        else:
            _learn(self.world, answer)

    def agent_env(self, name: str) -> dict[str, str]:
        row = self.sup.session.status(name).agents[0]
        broker = self.sup.session.broker.proxy()
        capability = broker.capability_of(row.agent_id).get(timeout=10)
        spec = AgentSpec(
            agent_id=row.agent_id,
            name=name,
            session_id=self.sup.session_id,
            capability=capability,
            adapter="scripted",
        )
        return {**os.environ, **self.sup.launcher.environment(spec)}


@pytest.fixture(scope="module")
def live_world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveWorld]:
    root = tmp_path_factory.mktemp("fuzz")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("XDG_STATE_HOME", str(root / "state"))
        mp.setenv("XDG_CONFIG_HOME", str(root / "config"))
        mp.delenv("SHEPHERD_SESSION", raising=False)
        world = LiveWorld(root)
        try:
            yield world
        finally:
            world.sup.shutdown()


def _live_round(lw: LiveWorld, report: Counter[str], how: str, attempt: Any, surface: str) -> None:
    """One input on one surface, then the canary."""
    report[f"input:{surface}:{how}"] += 1
    code = attempt()
    report[f"outcome:{code}"] += 1
    lw.close_extras()
    lw.keep_workers()
    lw.canary.check()


def _python_api(lw: LiveWorld, op: str, args: dict[str, Any]) -> str:
    try:
        answer = (
            watchdog_call(lw.sup.session, op, args)
            if is_watchdog_call(op)
            else lw.sup.session.run(api.build_args(ops.OPERATIONS[op], **args))
        )
    except Exception as exc:
        return _code_of(exc)
    lw.learn(answer)
    return "ok"


def _json_out(run: Any) -> tuple[int, Any]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = run()
    text = out.getvalue().strip()
    return code, json.loads(text.splitlines()[-1]) if text else None


def _cli_tool(lw: LiveWorld, name: str, op: str, args: dict[str, Any]) -> str:
    if name.startswith("op:") or op == "notifications":
        return _python_api(lw, op, args)  # no tool of that name: the Python API path
    session = str(lw.root / "session")
    argv = ["tool", name, "--args", json.dumps(args), "--json", "--session", session]
    code, body = _json_out(lambda: shepherd_cli.main(argv))
    assert code in (0, 2), (argv, code, body)
    if code == 2:
        assert body["error"]["code"] in KNOWN_CODES, body
        return str(body["error"]["code"])
    lw.learn(body)
    return "ok"


def _mcp(lw: LiveWorld, server: ShepherdMcp, name: str, op: str, args: dict[str, Any]) -> str:
    if name.startswith("op:"):
        return _python_api(lw, op, args)
    result = anyio.run(server.call, name, args)
    body = msgspec.json.decode(result.content[0].text)  # type: ignore[union-attr]
    if result.is_error:
        assert body["error"]["code"] in KNOWN_CODES, body
        return str(body["error"]["code"])
    lw.learn(body)
    return "ok"


@pytest.mark.processes
def test_every_operation_on_a_live_session_through_every_parent_surface(
    live_world: LiveWorld, report: Counter[str]
) -> None:
    lw = live_world
    server = ShepherdMcp(str(lw.root / "session"))
    surfaces = st.sampled_from(["python", "cli-tool", "mcp"])

    @settings(FUZZ, max_examples=90)
    @given(call=calls(lw.world, adjust=_adjust_for_live), surface=surfaces)
    def one(call: tuple[str, str, dict[str, Any], str], surface: str) -> None:
        name, op, args, how = call
        if op == "notifications":  # not an operation of the session: a tool of the surfaces
            surface = "mcp"
        if surface == "python":
            attempt = lambda: _python_api(lw, op, args)  # noqa: E731
        elif surface == "cli-tool":
            attempt = lambda: _cli_tool(lw, name, op, args)  # noqa: E731
        else:
            attempt = lambda: _mcp(lw, server, name, op, args)  # noqa: E731
        _live_round(lw, report, how, attempt, surface)

    one()
    report["canary_checks"] = lw.canary.checks
    assert report["outcome:ok"] > 10 and report["outcome:invalid_argument"] > 10, report


#: typed CLI commands with a slot for a hostile value (``{}``)
CLI_TEMPLATES = (
    ("delegate", "{agent}", "work", "--timeout={}"),
    ("delegate", "{agent}", "{}"),
    ("message", "{agent}", "{}"),
    ("message", "{agent}", "q", "--expects-reply", "--reply-to={}"),
    ("watch", "{}"),
    ("wait", "{}", "--timeout=0.05"),
    ("wait", "shepherd-task-0000000000000000", "--timeout={}"),
    ("status", "{}"),
    ("read", "{agent}", "--lines={}"),
    ("top", "--once", "--interval={}"),
    ("cancel", "{}", "--reason=x"),
    ("fail", "{}", "--error={}"),
    ("close", "{}"),
    ("spawn", "{}", "--script={script}"),
    ("watchdog", "set", "cooldown_s", "{}"),
    ("watchdog", "inspect", "{agent}", "--limit={}"),
)


def _as_text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value)


@pytest.mark.processes
def test_typed_cli_commands_with_hostile_values(
    live_world: LiveWorld, report: Counter[str]
) -> None:
    lw = live_world
    session = str(lw.root / "session")

    @settings(FUZZ, max_examples=60)
    @given(template=st.sampled_from(CLI_TEMPLATES), value=st.sampled_from(HOSTILE))
    def one(template: tuple[str, ...], value: Any) -> None:
        agent = lw.workers[0]
        argv = [
            part.replace("{agent}", agent).replace("{script}", str(lw.script)) for part in template
        ]
        argv = [_as_text(value) if part == "{}" else part for part in argv]
        argv += ["--json", "--session", session]

        def attempt() -> str:
            code, body = _json_out(lambda: shepherd_cli.main(argv))
            assert code in (0, 2, shepherd_cli.WAIT_TIMED_OUT), (argv, code, body)
            if code == 2:
                assert body["error"]["code"] in KNOWN_CODES, (argv, body)
                return str(body["error"]["code"])
            return "ok"

        _live_round(lw, report, "hostile", attempt, f"cli:{template[0]}")

    one()
    report["canary_checks"] = lw.canary.checks


@pytest.mark.processes
def test_child_commands_with_schema_driven_and_hostile_arguments(
    live_world: LiveWorld, report: Counter[str]
) -> None:
    lw = live_world
    worker = lw.workers[0]
    lw.world.add("agent", "shepherd")

    @settings(FUZZ, max_examples=60)
    @given(call=calls(lw.world, CHILD_SCHEMAS))
    def one(call: tuple[str, str, dict[str, Any], str]) -> None:
        _, op, args, how = call
        me = lw.workers[0]
        if not any(
            a.task is not None and not a.closed and a.task.result is None
            for a in lw.sup.session.status(me).agents
        ):
            lw.learn(lw.sup.call("delegate", {"target": me, "task": "fuzzed work"}))
        environ = lw.agent_env(me)
        argv = child_argv(op, args)

        def attempt() -> str:
            code, body = _json_out(lambda: child_cli.main(argv, environ))
            if op == "approve-request" and code == 1:  # denied: its deadline passed unanswered
                return "denied"
            assert code in (0, 2), (argv, code, body)
            if code == 2:
                assert body["error"]["code"] in KNOWN_CODES, (argv, body)
                return str(body["error"]["code"])
            return "ok"

        _live_round(lw, report, how, attempt, f"child:{op}")

    del worker
    one()
    report["canary_checks"] = lw.canary.checks
    assert report["outcome:ok"] > 5, report
