"""Model providers: one rate-limit cool-down per provider, shared by every agent that uses
it, and provider errors retried with capped exponential backoff, then ending the task.

An agent's adapter reports a provider's refusal of its turn (``rate_limited``: a 429, 529,
"overloaded", with the provider's Retry-After when it gave one) or another provider or model
error (``provider_error``); after either it waits, starting no turn, for ``resume``. Agents are
told ``hold`` (start no new turn) and ``resume`` (run the refused turn again, take new turns)
by control envelopes (:mod:`protocol.wire.envelopes`).

Rules:

1. **One cool-down per provider, shared.** A rate limit starts (or extends) the provider's
   cool-down: until the Retry-After the provider asked for, else the backoff (rule 3), with a
   jitter of up to a tenth, capped at ``provider_cooldown_max_s``. A cool-down only ever
   extends, never shortens. Every live agent of that provider (its ``provider`` option, or
   the provider it reported) is told ``hold`` when it starts; agents of other providers are
   unaffected; no queued task of that provider starts (admission).
2. **Told once each way.** The parent gets one ``provider_cooldown`` notice when a cool-down
   starts (extending it says nothing more) and one ``provider_cooldown_ended`` when it ends.
   A cool-down's start paces the provider (:mod:`protocol.session.pacing`): at its end every
   agent of the provider without a refused turn is told ``resume`` at once (its tasks waited
   in the queue), and the refused turns are resumed one per token, first refused first, as
   the queue's tasks start.
3. **A provider error is retried, then ends the task honestly.** Each ``provider_error`` of
   an agent's turn is an attempt: it is resumed after ``provider_backoff_s`` doubled per
   attempt (jittered, capped at ``provider_backoff_max_s``; later still if its provider is
   cooling down). Past ``provider_retries`` attempts, its task fails with reason
   ``provider_error``, naming the provider and its last error (the agent is told its task
   ended, as for any parent's ending). A rate limit is never counted as an attempt. A turn
   that gets anything through (a tool call, usage, a turn that ends cleanly) starts the count
   again.
4. The jitter is a pure function of what it jitters (the provider or agent, the time, the
   attempt): the same inputs give the same delays, so the simulation replays them.
"""

from __future__ import annotations

import hashlib

from protocol.records.notifications import Notice
from protocol.records.tasks import TaskEvent
from protocol.session import admission, outbox, pacing, settlement
from protocol.session.effects import (
    CooldownDue,
    Deliver,
    Effect,
    Notify,
    PaceDue,
    RetryDue,
    StartTimer,
    Story,
)
from protocol.session.state import AgentRow, Ctx, SessionState
from protocol.wire.envelopes import ControlEnvelope, RuntimeEnvelope

__all__ = [
    "PROVIDER_ERROR",
    "cooled",
    "cooling",
    "paced",
    "provider_error",
    "rate_limited",
    "retry",
    "seen",
]

#: the reason of a task ended by its provider's errors (rule 3)
PROVIDER_ERROR = "provider_error"
#: the most a jitter adds to a delay (rule 1)
_JITTER = 0.1


def _jitter(*parts: object) -> float:
    """A fraction in [0, _JITTER), a pure function of ``parts`` (rule 4)."""
    digest = hashlib.blake2b(repr(parts).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2**64 * _JITTER


def _backoff(s: SessionState, attempt: int) -> float:
    settings = s.settings
    first: float = settings.provider_backoff_s
    return min(first * 2.0 ** max(0, attempt - 1), settings.provider_backoff_max_s)


def cooling(s: SessionState, provider: str, now: float) -> bool:
    return s.cooldowns.get(provider, 0.0) > now


def _provider(s: SessionState, row: AgentRow, env: RuntimeEnvelope) -> str:
    if env.provider is not None:
        s.providers[row.agent_id] = env.provider
        return env.provider
    return admission.provider_of(s, row.agent_id) or "unknown"


def _control(s: SessionState, row: AgentRow, action: str, why: str, cx: Ctx) -> Deliver:
    env = outbox.from_parent(ControlEnvelope, s, cx, row.agent_id, action=action, reason=why)
    return Deliver(agent_id=row.agent_id, envelope=env)


def _agents_of(s: SessionState, provider: str) -> list[AgentRow]:
    return [
        row
        for row in s.agents.values()
        if not row.closed and admission.provider_of(s, row.agent_id) == provider
    ]


def rate_limited(s: SessionState, row: AgentRow, env: RuntimeEnvelope, cx: Ctx) -> list[Effect]:
    """Rule 1: the agent waits; its provider's cool-down starts or extends."""
    provider = _provider(s, row, env)
    s.held[row.agent_id] = provider
    asked = env.retry_after_s if env.retry_after_s is not None else _backoff(s, 1)
    wait = min(asked * (1.0 + _jitter(provider, cx.now)), s.settings.provider_cooldown_max_s)
    before = s.cooldowns.get(provider, 0.0)
    until = max(before, cx.now + wait)
    effects: list[Effect] = [Story(text=f"{row.name}: rate limited by {provider}")]
    if until == before:
        return effects  # within the cool-down already: it only ever extends
    s.cooldowns[provider] = until
    effects.append(
        StartTimer(delay=until - cx.now, event=CooldownDue(provider=provider, until=until))
    )
    if before > cx.now:
        return effects  # extended: told once when it started
    pacing.refused(s, provider, row.agent_id, cx.now)
    held = [r for r in _agents_of(s, provider) if r.agent_id not in s.held]
    said = f" ({env.text[:200]})" if env.text else ""
    text = (
        f"{provider} refused {row.name}'s turn for its rate limit{said}; no agent of "
        f"{provider} starts a turn for {until - cx.now:.1f} s (cool-down; {len(held) + 1} "
        "agent(s) of it wait)"
    )
    note = Notice(
        created_at=cx.now,
        code="provider_cooldown",
        text=text,
        agent_id=row.agent_id,
        task_id=row.active_task,
        refs=(provider,),
    )
    why = f"{provider} is cooling down after a rate limit, for {until - cx.now:.1f} s"
    effects += [Notify(note=note)] + [_control(s, r, "hold", why, cx) for r in held]
    return effects


def cooled(s: SessionState, event: CooldownDue, cx: Ctx) -> list[Effect]:
    """Rule 2: the cool-down ended (unless it was extended since)."""
    if s.cooldowns.get(event.provider) != event.until:
        return []
    if event.until > cx.now:  # early (a clock that fires timers early): not over yet
        return [StartTimer(delay=event.until - cx.now, event=event)]
    del s.cooldowns[event.provider]
    provider = event.provider
    rows = _agents_of(s, provider)
    pace = s.paces[provider]
    refused = [a for a, p in s.held.items() if p == provider and a not in pace.waiting]
    pace.waiting.extend(refused)
    note = Notice(
        created_at=cx.now,
        code="provider_cooldown_ended",
        text=f"{provider}'s cool-down ended: its {len(rows)} agent(s) go on, paced at "
        f"{pace.rate:.1f} turns/s ({len(pace.waiting)} refused turn(s) wait their turn)",
        refs=(provider,),
    )
    why = f"{provider}'s cool-down ended"
    effects: list[Effect] = [Notify(note=note)]
    effects += [_control(s, row, "resume", why, cx) for row in rows if row.agent_id not in s.held]
    return effects + _next_turn(s, provider, cx)


def paced(s: SessionState, event: PaceDue, cx: Ctx) -> list[Effect]:
    """A paced provider's next token (pacing, rule 1)."""
    pace = s.paces.get(event.provider)
    if pace is None:
        return []
    pace.armed = False
    return _next_turn(s, event.provider, cx)


def _next_turn(s: SessionState, provider: str, cx: Ctx) -> list[Effect]:
    """Start the next waiting turn of ``provider`` if its token is there: a refused turn
    (first refused first), else the queue's next task; then the timer for the next token."""
    pace = s.paces[provider]
    effects: list[Effect] = []
    if not cooling(s, provider, cx.now) and pacing.ready(s, provider, cx.now):
        while pace.waiting:
            agent_id = pace.waiting.popleft()
            row = s.agents.get(agent_id)
            if s.held.get(agent_id) != provider:
                continue  # resumed meanwhile: no token spent
            del s.held[agent_id]
            if row is None or row.closed:
                continue  # gone: no token spent
            pacing.spend(s, provider, agent_id, cx.now)
            effects.append(_control(s, row, "resume", f"{provider}'s turn for it came", cx))
            break
    return effects + admission.fill(s, cx)


def provider_error(s: SessionState, row: AgentRow, env: RuntimeEnvelope, cx: Ctx) -> list[Effect]:
    """Rule 3: retried after a backoff, or the task ends ``provider_error``."""
    provider = _provider(s, row, env)
    key = row.active_task or row.agent_id
    attempt = s.provider_attempts.get(key, 0) + 1
    error = (env.text or "no error text")[:500]
    if attempt > s.settings.provider_retries:
        s.provider_attempts.pop(key, None)
        s.held.pop(row.agent_id, None)
        if row.active_task is None:  # a turn outside a task: it is stopped
            return [_control(s, row, "abort", f"{provider} failed it: {error}", cx)]
        tries = s.settings.provider_retries
        times = "time" if tries == 1 else "times"
        why = f"{PROVIDER_ERROR}: {provider}: {error} (retried {tries} {times})"
        return settlement.settle(
            s, row.active_task, TaskEvent.FAIL, cx, error=why, reason=PROVIDER_ERROR
        )
    s.provider_attempts[key] = attempt
    s.held[row.agent_id] = provider
    delay = _backoff(s, attempt) * (1.0 + _jitter(row.agent_id, attempt, cx.now))
    return [
        Story(text=f"{row.name}: {provider} error, retry {attempt} in {delay:.1f} s: {error}"),
        StartTimer(
            delay=delay, event=RetryDue(agent_id=row.agent_id, counted=key, attempt=attempt)
        ),
    ]


def retry(s: SessionState, event: RetryDue, cx: Ctx) -> list[Effect]:
    """Rule 3: the backoff passed: resumed (its provider's cool-down's end resumes it else)."""
    row = s.agents.get(event.agent_id)
    provider = s.held.get(event.agent_id)
    counted = s.provider_attempts.get(event.counted)
    if counted is not None and counted != event.attempt:
        return []  # a later attempt's timer is armed
    task = s.tasks.get(event.counted)
    if task is not None and task.terminal:  # its task ended meanwhile: counted no more
        s.provider_attempts.pop(event.counted, None)
    if row is None or row.closed or provider is None or cooling(s, provider, cx.now):
        return []  # gone; or its provider's cool-down's end resumes it
    del s.held[event.agent_id]
    return [_control(s, row, "resume", f"retry {event.attempt} after a {provider} error", cx)]


def restored(s: SessionState, cx: Ctx) -> list[Effect]:
    """After a parent restart: the cool-downs and waits of the last parent are not known (not
    journaled), so none stands: every live agent is told ``resume`` (a no-op for one that
    neither holds nor waits; one whose refused turn is refused again reports it again)."""
    why = "a restarted parent: the last one's holds are over"
    return [
        _control(s, row, "resume", why, cx)
        for row in s.agents.values()
        if not row.closed and row.process_state != "exited"
    ]


def seen(s: SessionState, row: AgentRow, env: RuntimeEnvelope, cx: Ctx) -> list[Effect]:
    """What of an agent's runtime event concerns its provider: a refusal (rules 1 and 3), a
    turn that got through (rule 3), the provider its adapter names with ``ready``."""
    match env.event:
        case "rate_limited":
            return rate_limited(s, row, env, cx)
        case "provider_error":
            return provider_error(s, row, env, cx)
        case "ready":  # one that comes up during its provider's cool-down holds too
            if env.provider is not None:
                s.providers[row.agent_id] = env.provider
            provider = admission.provider_of(s, row.agent_id)
            if provider is not None and cooling(s, provider, cx.now):
                why = f"{provider} is cooling down after a rate limit"
                return [_control(s, row, "hold", why, cx)]
        case "usage" | "tool_call" | "turn_end" if not env.is_error:
            if env.event == "turn_end":
                if row.agent_id in s.held:
                    return []  # the refused turn's own end (a command's exit status may be 0)
                provider = admission.provider_of(s, row.agent_id)
                if provider is not None:  # it got through (pacing, rule 2)
                    pacing.through(s, provider, row.agent_id, cx.now)
            if s.provider_attempts:
                s.provider_attempts.pop(row.active_task or row.agent_id, None)
    return []
