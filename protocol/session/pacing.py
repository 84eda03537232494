"""Pacing a provider's turns once it refused one for its rate limit: the session starts them
no faster than the provider was seen to take them, instead of letting every waiting agent in
at once (a burst the provider refuses again, which starts the next cool-down).

Rules:

1. **Paced from its first rate limit on.** When a cool-down of a provider starts
   (:mod:`protocol.session.providers`, rule 1), the provider is paced: every turn the session
   starts for it (a task handed over, :mod:`protocol.session.admission`; a refused turn
   resumed) takes a token, and tokens come one at a time, ``1 / pace`` seconds apart. A task
   that finds no token is queued (the admission queue, in its order; ``status`` shows it
   ``queued``); a refused turn waits, first refused first. No token is given during a
   cool-down. A turn an agent starts by itself (a second turn of a task, a message's turn)
   takes none: the session does not start it.
2. **The pace is learned.** It starts at the turns of the provider that got through (ended
   cleanly) in the second before its first refusal, at least 1 per second. While no paced
   turn was refused, each token raises it by 1 (it doubles each second: a slow start);
   after, by ``RAISE / pace`` (``RAISE`` turns per second each second). A cool-down started
   by the refusal of a *paced* turn (one a token started) lowers it, at most once a second:
   the first time to a tenth below the lesser of the pace and what got through in the
   second before, then by a tenth. A refused turn the session did not start by a token (one
   of the burst before pacing, reported late) says nothing of the pace. Always within 1 and
   :data:`MAX_PACE`.
3. Not journaled, as cool-downs are not: a restarted parent starts unpaced and learns again.
4. Pure and deterministic: the same events at the same times give the same tokens.
"""

from __future__ import annotations

from collections import deque

from protocol.session.state import Pace, SessionState

__all__ = ["MAX_PACE", "RAISE", "paced_rates", "ready", "refused", "spend", "through"]

#: the fastest a provider is paced, turns per second
MAX_PACE = 1000.0
#: turns per second added each second of pacing, once refused while paced (rule 2)
RAISE = 0.1
#: what a cool-down that starts while paced leaves of the pace (rule 2)
_LOWER = 0.9
#: turns counted as got through: those of the last second
_WINDOW_S = 1.0


def through(s: SessionState, provider: str, agent_id: str, now: float) -> None:
    """A turn of ``provider`` got through (rule 2's count)."""
    pace = s.paces.get(provider)
    if pace is not None:
        pace.granted.discard(agent_id)
    times = s.got_through.get(provider)
    if times is None:
        times = s.got_through[provider] = deque()
    times.append(now)
    while times and times[0] <= now - _WINDOW_S:
        times.popleft()


def _seen_taking(s: SessionState, provider: str, now: float) -> int:
    times = s.got_through.get(provider, ())
    return sum(1 for at in times if at > now - _WINDOW_S)


def refused(s: SessionState, provider: str, agent_id: str, now: float) -> None:
    """A cool-down of ``provider`` starts, after ``agent_id``'s turn was refused: paced from
    now on, at a learned pace (rule 2)."""
    seen = float(max(1, _seen_taking(s, provider, now)))
    pace = s.paces.get(provider)
    if pace is None:
        s.paces[provider] = Pace(min(seen, MAX_PACE), now)
        return
    if agent_id not in pace.granted or now - pace.lowered_at < _WINDOW_S:
        return  # not a paced turn; or the pace was lowered for this burst already
    pace.granted.discard(agent_id)
    pace.lowered_at = now
    target = min(pace.rate, seen) if pace.slow_start else pace.rate
    pace.slow_start = False
    pace.rate = max(1.0, target * _LOWER)


def ready(s: SessionState, provider: str | None, now: float) -> bool:
    """May a turn of ``provider`` start now (a token is there, or it is not paced)?"""
    pace = s.paces.get(provider) if provider is not None else None
    return pace is None or pace.next_at <= now


def spend(s: SessionState, provider: str | None, agent_id: str, now: float) -> None:
    """A turn of ``provider`` starts for ``agent_id``: it took the token (rules 1 and 2)."""
    pace = s.paces.get(provider) if provider is not None else None
    if pace is None:
        return
    pace.granted.add(agent_id)
    step = 1.0 if pace.slow_start else RAISE / pace.rate
    pace.rate = min(pace.rate + step, MAX_PACE)
    pace.next_at = max(pace.next_at, now) + 1.0 / pace.rate


def paced_rates(s: SessionState) -> dict[str, float]:
    """Each paced provider's pace, turns per second (``status``)."""
    return {provider: round(pace.rate, 2) for provider, pace in s.paces.items()}
