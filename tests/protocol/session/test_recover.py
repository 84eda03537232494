"""protocol.session.recover: after a restart in which agents' bridges are gone too, those
agents start again and their open tasks are handed to them again, resumed with their history,
once per incarnation; a bridge found running is adopted, never started twice."""

from __future__ import annotations

import copy
from collections.abc import Iterable

import msgspec
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import invariant, rule

from protocol.calls import api
from protocol.records.journal import AgentRecoverRecord, TaskResumeRecord
from protocol.records.notifications import StaleWait, TaskCompletion
from protocol.records.requests import RequestRecord, RequestState
from protocol.records.settings import Settings
from protocol.records.tasks import TaskRecord, TaskState
from protocol.session import recover
from protocol.session.effects import Deliver, Effect, Journal, SpawnAgent
from protocol.session.restore import Restore, fold, resume
from protocol.session.state import SessionState
from protocol.wire.envelopes import NoticeEnvelope, TaskEnvelope

from .harness import SESSION, Session, delivered, journaled, of
from .test_properties import SessionMachine

SETTINGS = Settings(stale_wait_threshold_s=100.0, coalesce_ms=10.0)


def restart(
    s: Session,
    *,
    recovering: bool = True,
    live: Iterable[str] = (),
    told: dict[str, list[str]] | None = None,
    journal: list[msgspec.Struct] | None = None,
) -> tuple[Session, list[Effect]]:
    """A new parent for ``s``'s session (``journal``: what of it reached the disk), recovering
    or not, with the bridges of ``live`` found running."""
    delivered_to: dict[str, set[str]] = {}
    noticed: dict[str, set[str]] = {}
    for heard in s.heard:
        note = heard.note
        if s.to_parent(heard) and isinstance(note, TaskCompletion):
            delivered_to.setdefault(note.watcher_id, set()).update(r.task_id for r in note.results)
        if isinstance(note, StaleWait):
            noticed.setdefault(note.task_id, set()).add(note.request_id)
    t = Session(s.state.settings, now=s.now + 10)
    t.ids = s.ids  # ids never collide with the old parent's
    t.journal = list(s.journal if journal is None else journal)
    t.state = fold(t.journal, SessionState(SESSION, s.state.settings))
    restore = Restore(
        state=t.state,
        delivered=delivered_to,
        stale_noticed=noticed,
        recover=recovering,
        live=frozenset(live),
        told=told or {},
    )
    return t, t.run(resume(restore, t.ctx()))


def team() -> tuple[Session, dict[str, str]]:
    """a asked b (replied), then c (pending): a waits; b works; c finished its task; d was
    closed."""
    s = Session(SETTINGS)
    a, b, c, d = (s.spawn(n) for n in ("a", "b", "c", "d"))
    for agent, pid in ((a, 101), (b, 102), (c, 103), (d, 104)):
        s.runtime(agent, "ready", pid=pid)
    ta = s.delegate("a", "write the parser")
    tb = s.delegate("b", "review the lexer")
    tc = s.delegate("c", "lint")
    s.now += 1
    first = s.ask(a, "b", "which grammar?")
    s.reply(b, first, "the PEG one")
    s.now += 1
    s.ask(a, "c", "which style?")
    s.done(c, summary="clean")
    s.call(api.CloseArgs(agent="d"))
    s.exit(d, 0)
    return s, {"a": a, "b": b, "c": c, "d": d, "ta": ta, "tb": tb, "tc": tc, "q": first}


def spawned(effects: list[Effect]) -> dict[str, SpawnAgent]:
    return {e.agent_id: e for e in of(effects, SpawnAgent)}


def test_without_recover_a_restart_is_what_it_was() -> None:
    s, ids = team()
    _, plain = restart(s, recovering=False)
    _, everyone_alive = restart(s, recovering=True, live=(ids["a"], ids["b"], ids["c"]))
    assert of(plain, SpawnAgent) == of(everyone_alive, SpawnAgent)
    assert delivered(plain, TaskEnvelope) == delivered(everyone_alive, TaskEnvelope)
    assert not journaled(plain, AgentRecoverRecord) and not journaled(plain, TaskResumeRecord)
    # without --recover the gone bridges are still only adopted (and then fail their tasks)
    assert all(e.adopt or e.exited for e in of(plain, SpawnAgent))


def test_only_agents_whose_bridge_is_gone_start_again_with_the_same_adapter_and_options() -> None:
    s, ids = team()
    t, effects = restart(s, live=(ids["b"],))
    spawns = spawned(effects)
    again = spawns[ids["a"]]
    assert not again.adopt and not again.exited and again.pid is None
    old = s.state.agents[ids["a"]]
    assert again.options == {**old.options, "recovered": 1}
    assert (again.adapter, again.capability, again.name) == (old.adapter, old.capability, "a")
    assert spawns[ids["b"]].adopt  # found running: adopted, never a second process
    assert not spawns[ids["c"]].adopt  # no open task, but part of the team: started again
    assert spawns[ids["d"]].exited and not spawns[ids["d"]].adopt  # closed: never again
    records = {r.agent_id: r.incarnation for r in journaled(effects, AgentRecoverRecord)}
    assert records == {ids["a"]: 1, ids["c"]: 1}
    assert t.state.agents[ids["a"]].incarnation == 1


def test_an_open_task_is_handed_again_resumed_with_its_history() -> None:
    s, ids = team()
    told = {ids["ta"]: ["halfway: the tokens are done"]}
    t, effects = restart(s, live=(ids["b"], ids["c"]), told=told)
    (env,) = delivered(effects, TaskEnvelope, ids["a"])
    assert env.resumed and env.task_id == ids["ta"]
    assert env.message_id != s.state.tasks[ids["ta"]].message_id  # a new hand-over
    assert env.content.startswith("[resumed]")
    assert "write the parser" in env.content
    assert f"a asked b ({ids['q']}): which grammar? -> replied: the PEG one" in env.content
    # the question a's dead process asked c was orphaned: closed, quoted, asked again if needed
    assert "which style? -> cancelled" in env.content
    assert "told the parent: halfway: the tokens are done" in env.content
    (resume_record,) = journaled(effects, TaskResumeRecord)
    assert (resume_record.task_id, resume_record.incarnation) == (ids["ta"], 1)
    assert resume_record.message_id == env.message_id
    # journaled before it is delivered
    journal_at = effects.index(Journal(record=resume_record))
    deliver_at = next(
        i for i, e in enumerate(effects) if isinstance(e, Deliver) and e.envelope == env
    )
    assert journal_at < deliver_at
    # the live agent's task: today's envelope, its old id (its inbox drops it)
    (old,) = delivered(effects, TaskEnvelope, ids["b"])
    assert not old.resumed and old.message_id == s.state.tasks[ids["tb"]].message_id
    # the task is still open, and running: nothing of the dead incarnation is left to wait on
    assert t.state.tasks[ids["ta"]].state is TaskState.RUNNING


def test_the_history_is_bounded_newest_kept() -> None:
    s = Session(SETTINGS)
    a, b = s.spawn("a"), s.spawn("b")
    task = s.delegate("a", "talk a lot")
    for i in range(60):
        request = s.ask(a, "b", f"question {i} " + "x" * 900)
        s.reply(b, request, f"answer {i}")
    record = s.state.tasks[task]
    lines, left_out = recover.history(s.state, record, ["y" * 5000])
    assert sum(len(line) + 1 for line in lines) <= recover.HISTORY_CHARS
    assert all(len(line) <= recover.HISTORY_LINE_CHARS for line in lines)
    assert left_out == 61 - len(lines) and left_out > 0
    assert lines[-1].startswith("a told the parent: yyy")  # the newest kept
    text = recover.resumed_text(record, lines, left_out)
    assert f"{left_out} earlier entries left out" in text


def test_a_history_that_would_not_fit_one_envelope_is_cut_to_fit() -> None:
    s = Session(Settings(max_envelope_bytes=2048))
    a, b = s.spawn("a"), s.spawn("b")
    task = s.delegate("a", "small")
    for i in range(10):
        s.reply(b, s.ask(a, "b", f"q{i} " + "z" * 300), "ok")
    _, effects = restart(s)
    (env,) = delivered(effects, TaskEnvelope, a)
    assert env.resumed and env.task_id == task and "earlier entries left out" in env.content


def test_a_restart_that_finds_the_recovered_incarnation_running_hands_nothing_new() -> None:
    s, ids = team()
    t, first = restart(s, live=(ids["b"], ids["c"]))
    (env,) = delivered(first, TaskEnvelope, ids["a"])
    for recovering in (True, False):
        _, again = restart(t, recovering=recovering, live=(ids["a"], ids["b"], ids["c"]))
        assert spawned(again)[ids["a"]].adopt
        (same,) = delivered(again, TaskEnvelope, ids["a"])
        assert same.message_id == env.message_id  # its inbox drops it: not handed twice
        assert not journaled(again, TaskResumeRecord)


def test_a_crash_between_starting_an_agent_and_handing_its_task_hands_it_once() -> None:
    s, ids = team()
    t, first = restart(s, live=(ids["b"], ids["c"]))
    (recovered,) = journaled(first, AgentRecoverRecord)
    cut = t.journal.index(recovered) + 1  # the agent_recover record reached the disk; no more
    u, again = restart(t, live=(ids["a"], ids["b"], ids["c"]), journal=t.journal[:cut])
    (env,) = delivered(again, TaskEnvelope, ids["a"])
    assert env.resumed
    (record,) = journaled(again, TaskResumeRecord)
    assert record.incarnation == 1 and record.message_id == env.message_id
    assert u.state.handed[ids["ta"]] == (1, env.message_id)


def test_a_bridge_gone_again_gets_the_next_incarnation_and_the_task_again() -> None:
    s, ids = team()
    t, first = restart(s, live=(ids["b"], ids["c"]))
    (one,) = delivered(first, TaskEnvelope, ids["a"])
    _, second = restart(t, live=(ids["b"], ids["c"]))
    assert spawned(second)[ids["a"]].options["recovered"] == 2
    (two,) = delivered(second, TaskEnvelope, ids["a"])
    assert two.resumed and two.message_id != one.message_id


def test_a_recovered_agent_settles_its_task_as_any_agent_does() -> None:
    s, ids = team()
    t, _ = restart(s, live=(ids["b"], ids["c"]))
    t.runtime(ids["a"], "ready", pid=201)
    effects = t.done(ids["a"], summary="parsed", cancel_requests=True)
    (settled,) = [r for r in journaled(effects, TaskRecord) if r.task_id == ids["ta"]]
    assert settled.result is not None and settled.result.status == "completed"
    assert t.state.agents[ids["a"]].pid == 201
    folded = fold(t.journal, SessionState(SESSION, SETTINGS))
    assert folded.agents[ids["a"]].incarnation == 1 and folded.agents[ids["a"]].pid == 201


def test_an_agent_that_cannot_start_again_fails_its_task_with_the_reason() -> None:
    s, ids = team()
    t, _ = restart(s, live=(ids["b"], ids["c"]))
    effects = t.exit(ids["a"], 2, reason="script file is gone", before_ready=True)
    record = t.state.tasks[ids["ta"]]
    assert record.state is TaskState.FAILED and record.result is not None
    assert "script file is gone" in (record.result.error or "")
    assert any(getattr(n.note, "code", "") == "agent_exited" for n in effects if hasattr(n, "note"))


def test_a_crash_anywhere_in_a_recovery_then_another_hands_each_task_once_per_incarnation() -> None:
    """Every prefix of the journal a recovery wrote (a crash at any point of it), then another
    recovery finding the new bridges running or gone: one envelope id per task and
    incarnation, ever."""
    s, ids = team()
    t, first = restart(s, live=(ids["c"],))
    ever: dict[tuple[str, int], str] = {}
    for env in delivered(first, TaskEnvelope):
        ever[(env.task_id, t.state.agents[env.target_id].incarnation)] = env.message_id
    for cut in range(len(s.journal), len(t.journal) + 1):
        for live in ((), (ids["a"], ids["b"], ids["c"])):
            u, again = restart(t, live=live, journal=t.journal[:cut])
            for env in delivered(again, TaskEnvelope):
                key = (env.task_id, u.state.agents[env.target_id].incarnation)
                handed_before = any(
                    isinstance(r, TaskResumeRecord) and (r.task_id, r.incarnation) == key
                    for r in t.journal[:cut]
                )
                if handed_before:
                    assert env.message_id == ever[key]


# ------------------------------------------------------------------ any program, any recovery


class RecoveringMachine(SessionMachine):
    """The session machine of ``test_properties``, with restarts that recover, finding any
    subset of the bridges running. On top of its checks: each open task is handed to each
    incarnation of its agent as one envelope id at most (a resend has the same id, which the
    inbox drops), a resumed hand-over goes only to an agent started again, and only agents
    whose bridge was not running are started again."""

    def __init__(self) -> None:
        super().__init__()
        self.by_incarnation: dict[tuple[str, str, int], str] = {}

    @rule(pick_live=st.lists(st.booleans(), min_size=8, max_size=8))
    def recover_restart(self, pick_live: list[bool]) -> None:
        old = self.s
        delivered_to: dict[str, set[str]] = {}
        noticed: dict[str, set[str]] = {}
        for heard in old.heard:
            if old.to_parent(heard) and isinstance(heard.note, TaskCompletion):
                got = delivered_to.setdefault(heard.note.watcher_id, set())
                got.update(r.task_id for r in heard.note.results)
            if isinstance(heard.note, StaleWait):
                noticed.setdefault(heard.note.task_id, set()).add(heard.note.request_id)
        new = Session(old.state.settings, now=old.now)
        new.ids = old.ids
        new.journal, new.heard, new.settled = old.journal, old.heard, old.settled
        new.state = fold(old.journal, SessionState(SESSION, old.state.settings))
        live = frozenset(a for i, a in enumerate(new.state.agents) if pick_live[i % 8])
        restore = Restore(
            state=new.state,
            delivered=delivered_to,
            stale_noticed=noticed,
            recover=True,
            live=live,
        )
        before = {a: r.incarnation for a, r in new.state.agents.items()}
        self.s = new
        effects = new.run(resume(restore, new.ctx()))
        self.keep(effects)
        started = {e.agent_id for e in of(effects, SpawnAgent) if not e.adopt and not e.exited}
        assert started.isdisjoint(live)
        for agent_id in started:
            assert new.state.agents[agent_id].incarnation == before[agent_id] + 1
            # rule 6: nothing of the dead incarnation is left open, asked by it or of it ...
            left = [
                r.request_id
                for r in new.state.requests.pending()
                if agent_id in (r.sender_id, r.target_id)
            ]
            assert left == [], (agent_id, left)
            # ... so its open task can always be completed by a plain done (no cancelling)
            for record in new.state.tasks.values():
                if record.agent_id == agent_id and not record.terminal:
                    assert record.state is not TaskState.WAITING
                    probe = copy.deepcopy(new)  # tried aside: the program goes on as it was
                    probe.runtime(agent_id, "ready", pid=999)
                    probe.done(agent_id, task_id=record.task_id, summary="done after recovery")
                    result = probe.state.tasks[record.task_id].result
                    assert result is not None and result.status == "completed", result

    def keep(self, effects: list[Effect]) -> None:
        super().keep(effects)
        for e in of(effects, Deliver):
            env = e.envelope
            if not isinstance(env, TaskEnvelope):
                continue
            incarnation = self.state.agents[e.agent_id].incarnation
            assert not env.resumed or incarnation > 0
            key = (env.task_id, e.agent_id, incarnation)
            assert self.by_incarnation.setdefault(key, env.message_id) == env.message_id, key

    @rule()
    def restart(self) -> None:
        journal_before = len(self.s.journal)
        super().restart()
        # a restart without --recover starts nothing and journals no recovery
        assert not any(isinstance(r, AgentRecoverRecord) for r in self.s.journal[journal_before:])

    @invariant()
    def a_task_is_open_only_with_an_agent_that_may_run_it(self) -> None:
        for record in self.state.tasks.values():
            if not record.terminal:
                assert not self.state.agents[record.agent_id].closed


TestRecoveringMachine = RecoveringMachine.TestCase
TestRecoveringMachine.settings = settings(max_examples=150, stateful_step_count=40, deadline=None)


def test_a_recovered_agents_open_requests_are_orphaned_and_its_task_can_complete() -> None:
    """Rule 6, from every side: a asked c (pending) and a's bridge is gone: the question is
    closed (cancelled, orphaned) before a starts again, journaled, a's task runs again, and a
    plain done completes it; a late reply to the old question reopens nothing. A question
    asked *of* a recovered agent is closed too, and its asker told."""
    s, ids = team()
    t, effects = restart(s, live=(ids["b"], ids["c"]))
    (orphaned,) = [
        r for r in journaled(effects, RequestRecord) if r.state is RequestState.CANCELLED
    ]
    assert orphaned.sender_id == ids["a"] and orphaned.target_id == ids["c"]
    spawn_at = next(i for i, e in enumerate(effects) if isinstance(e, SpawnAgent))
    assert effects.index(Journal(record=orphaned)) < spawn_at  # closed before it starts
    assert t.state.tasks[ids["ta"]].state is TaskState.RUNNING
    late = t.reply(ids["c"], orphaned.request_id, "too late")
    assert t.state.tasks[ids["ta"]].state is TaskState.RUNNING
    assert late  # the late reply was answered (refused or delivered), and reopened nothing
    t.runtime(ids["a"], "ready", pid=201)
    t.done(ids["a"], summary="parsed")  # no cancel_requests needed
    result = t.state.tasks[ids["ta"]].result
    assert result is not None
    assert result.status == "completed"
    # a second restart agrees (it was journaled)
    again = fold(t.journal, SessionState(SESSION, SETTINGS))
    request = again.requests.get(orphaned.request_id)
    assert request is not None and request.state is RequestState.CANCELLED

    # asked of it: b asks a, then a's bridge is gone: b is told, and b's task runs again
    s, ids = team()
    s.runtime(ids["a"], "ready", pid=101)
    question = s.ask(ids["b"], "a", "is the parser ready?")
    assert s.state.tasks[ids["tb"]].state is TaskState.WAITING
    t, effects = restart(s, live=(ids["b"], ids["c"]))
    assert t.state.tasks[ids["tb"]].state is TaskState.RUNNING
    told = [
        e.envelope
        for e in of(effects, Deliver)
        if e.agent_id == ids["b"] and isinstance(e.envelope, NoticeEnvelope)
    ]
    assert [n.ref_id for n in told] == [question]
    assert "orphaned" in told[0].text


def test_a_task_delegated_to_a_recovered_agent_is_not_resumed_at_the_next_restart() -> None:
    s, ids = team()
    t, _ = restart(s, live=(ids["a"], ids["b"]))  # c (no task) started again
    new_task = t.delegate("c", "lint again")
    for recovering in (False, True):
        _, again = restart(t, recovering=recovering, live=(ids["a"], ids["b"], ids["c"]))
        (env,) = delivered(again, TaskEnvelope, ids["c"])
        assert not env.resumed and env.message_id == t.state.tasks[new_task].message_id
        assert not journaled(again, TaskResumeRecord)
