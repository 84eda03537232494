"""The session's limits across restarts: the settings that bound what it may do
(:class:`~protocol.records.settings.SessionLimits`: its budgets, the default deadlines of a task
and of a reply), recorded with it.

Rules:

1. **Recorded with the session.** A new session journals its limits (a
   :class:`~protocol.records.journal.SessionLimitsRecord`) before anything else is done; the latest
   such record is the session's limits (the fold keeps it: :attr:`SessionState.limits`).
2. **Restored by a restart that gives none.** A restart (``serve --session-dir``,
   ``--recover``, ``--resume``) whose settings leave a limit out (None) runs with the recorded
   one: a budget is never dropped by starting the session again without its flag.
3. **Changed aloud.** A restart that gives another value of a limit runs with it; each change
   is told (:func:`told`, its old and new value) and journaled, so the next restart restores
   the new value. A session journaled before limits were recorded records them at its first
   restart.

Pure; the supervisor reads the records and writes the record (``actors.session.supervisor``).
"""

from __future__ import annotations

from typing import Any

import msgspec

from protocol.records.journal import SessionLimitsRecord
from protocol.records.settings import SessionLimits, Settings, check_settings

__all__ = ["LimitChange", "limits_of", "restart", "told"]


class LimitChange(msgspec.Struct, frozen=True, kw_only=True):
    """A restart gave a limit another value than the session's records (rule 3)."""

    name: str
    old: Any
    new: Any


def limits_of(settings: Settings) -> SessionLimits:
    """The limits ``settings`` give."""
    return SessionLimits(**{f: getattr(settings, f) for f in SessionLimits.__struct_fields__})


def restart(
    settings: Settings, recorded: SessionLimits | None, at: float
) -> tuple[Settings, tuple[LimitChange, ...], SessionLimitsRecord | None]:
    """What a session started with ``settings`` runs with, given the limits its records hold
    (``recorded``; None for a new session, or one journaled before limits were): the
    settings, the limits changed (rule 3) and the record to journal (None: nothing new)."""
    given = limits_of(settings)
    if recorded is None:  # rule 1 (and rule 3's last sentence)
        return settings, (), SessionLimitsRecord(limits=given, at=at)
    kept = {
        f: getattr(recorded, f)
        for f in SessionLimits.__struct_fields__
        if getattr(given, f) is None and getattr(recorded, f) is not None
    }
    effective = check_settings(msgspec.structs.replace(settings, **kept)) if kept else settings
    limits = limits_of(effective)
    changes = tuple(
        LimitChange(name=f, old=getattr(recorded, f), new=getattr(limits, f))
        for f in SessionLimits.__struct_fields__
        if getattr(limits, f) != getattr(recorded, f)
    )
    if not changes:  # rule 2: as recorded
        return effective, (), None
    return effective, changes, SessionLimitsRecord(limits=limits, previous=recorded, at=at)


def told(change: LimitChange) -> str:
    """One line of a change: the setting, its old and its new value."""

    def shown(value: Any) -> str:
        return "none" if value is None else str(value)

    return (
        f"the session's {change.name} changed: {shown(change.old)} -> {shown(change.new)} "
        "(the session's records had the old value; this start gave the new one)"
    )
