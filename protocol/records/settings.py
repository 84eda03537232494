"""Settings: one Struct with defaults, and pure layering of overrides onto it.

Layers: defaults, then the user file, then the project file, then session
overrides. Reading the files is the caller's job (``actors/surfaces/config.py``); this module only
takes already-parsed mappings. An unknown key or a value of the wrong type never stops
anything: it becomes a warning naming the source and the key, and that key is ignored.

Every field has its bounds in its annotation (finite numbers; a deadline at most
:data:`~protocol.core.limits.MAX_DEADLINE_S`; sizes and counts within a range a session can live
with): a file value out of range is a warning and ignored, and :func:`check_settings` refuses a
``Settings`` built in Python with a value out of range (``invalid_argument`` naming the field).

A nested table is layered field by field: a user file setting ``[watchdog] cooldown_s`` and a
project file setting ``[watchdog] repeat_threshold`` both apply. The ``[watchdog]`` table goes
through the watchdog's own validating :func:`~protocol.watchdog.config.apply_watchdog_overrides`
(finite numbers, ranges, "did you mean" hints; warnings read
``<source>: watchdog.<key>: <reason>; ignored``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, TypeVar

import msgspec

from protocol.core.errors import InvalidArgument
from protocol.core.limits import (
    BudgetCost,
    BudgetTokens,
    DeadlineSeconds,
    ProviderName,
    SoftFraction,
)
from protocol.watchdog.config import WatchdogConfig, apply_watchdog_overrides

__all__ = ["SessionLimits", "Settings", "apply_overrides", "check_settings", "parse_value"]


#: 1 KiB to 16 MiB
_EnvelopeBytes = Annotated[int, msgspec.Meta(ge=1024, le=16 * 1024 * 1024)]
#: a count of things kept or queued: at least one, at most a million
_Count = Annotated[int, msgspec.Meta(ge=1, le=1_000_000)]
#: the same, where zero means "keep none"
_CountOrNone = Annotated[int, msgspec.Meta(ge=0, le=1_000_000)]


class Settings(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    #: results of one watcher's tasks that end within this window of the first (its agent's
    #: `done`, or the parent's ending) go out as one notification; none is held longer than
    #: this past its end
    coalesce_ms: Annotated[float, msgspec.Meta(ge=0, le=60_000)] = 25.0
    #: a task waiting this long on a reply gets one stale-wait notification per episode
    stale_wait_threshold_s: DeadlineSeconds = 120.0
    #: task deadline when delegate gives none (None: no deadline)
    default_task_timeout_s: DeadlineSeconds | None = None
    #: reply deadline for expects_reply when the message gives none (None: no deadline)
    default_reply_timeout_s: DeadlineSeconds | None = None
    #: largest envelope the mailbox accepts (1 KiB to 16 MiB)
    max_envelope_bytes: _EnvelopeBytes = 64 * 1024
    #: most unread envelopes one inbox may hold
    max_queue_depth: _Count = 1000
    #: acknowledged envelopes kept in cur/ for inspection, per inbox
    retention_count: _CountOrNone = 1000
    #: fsync each published envelope (durable across power loss, ~1k/s per publisher)
    fsync: bool = False
    #: message ids remembered for duplicate detection
    dedup_window: Annotated[int, msgspec.Meta(ge=1, le=10_000_000)] = 100_000
    #: closed requests remembered (newest first) so a late reply still finds its question;
    #: a reply to an older one is refused as naming no request. Pending ones are always kept.
    closed_requests_kept: _CountOrNone = 1000
    #: recent output lines kept per agent for `read`
    output_lines: _Count = 2000
    #: fallback rescan of inboxes if a file-system event is ever missed
    fallback_poll_s: Annotated[float, msgspec.Meta(ge=0.01, le=3600)] = 1.0
    #: the stuck-loop watchdog (``[watchdog]`` table)
    watchdog: WatchdogConfig = msgspec.field(default_factory=WatchdogConfig)
    # --- budgets
    #: the session's budget of tokens and of cost (US dollars) over every task (None: none)
    budget_tokens: BudgetTokens | None = None
    #: the session's budget of cost, US dollars (None: none)
    budget_cost: BudgetCost | None = None
    #: the share of a budget at which the parent is warned, once per task (or session) and limit
    budget_soft_fraction: SoftFraction = 0.8
    # --- agents on other hosts (``shepherd node``)
    #: a node not heard from for this long (it beats every second) is lost: its agents are
    #: gone, and their tasks fail with a reason naming the node
    node_lost_s: Annotated[float, msgspec.Meta(ge=3, le=3600)] = 10.0
    # --- admission and model providers (protocol.session.admission, .providers)
    #: at most this many tasks handed to agents at once; the rest wait, queued (None: no cap)
    max_running: _Count | None = None
    #: the same cap per model provider (``{"openai": 4}``), beside ``max_running``
    max_running_per_provider: dict[ProviderName, _Count] = msgspec.field(default_factory=dict)
    #: a turn failed by its provider (not a rate limit) is run again this many times, then
    #: the task fails (provider_error)
    provider_retries: Annotated[int, msgspec.Meta(ge=0, le=20)] = 3
    #: the first retry's wait, doubled for each next one (jittered), up to the max
    provider_backoff_s: Annotated[float, msgspec.Meta(gt=0, le=3600)] = 2.0
    provider_backoff_max_s: Annotated[float, msgspec.Meta(gt=0, le=3600)] = 60.0
    #: the longest a provider's rate-limit cool-down may last, whatever it asks for
    provider_cooldown_max_s: Annotated[float, msgspec.Meta(gt=0, le=86400)] = 300.0


class SessionLimits(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """The settings that bound what a session may do (None: no bound of that kind), each a
    field of :class:`Settings` of the same name and type: recorded with the session, and
    restored by a restart that gives none (:mod:`protocol.session.limits`)."""

    #: the session's budget of tokens and of cost over every task
    budget_tokens: BudgetTokens | None = None
    budget_cost: BudgetCost | None = None
    #: the deadline of a task, and of a reply, when the call gives none
    default_task_timeout_s: DeadlineSeconds | None = None
    default_reply_timeout_s: DeadlineSeconds | None = None


def _same_fields(part: type[msgspec.Struct], whole: type[msgspec.Struct]) -> None:
    """``part``'s fields are ``whole``'s, with the same types and defaults (checked once, at
    import: a change to one that the other misses fails at once)."""
    fields = {f.name: f for f in msgspec.structs.fields(whole)}
    for f in msgspec.structs.fields(part):
        mine = fields.get(f.name)
        if mine is None or (mine.type, mine.default) != (f.type, f.default):
            raise TypeError(f"{part.__name__}.{f.name} is not {whole.__name__}.{f.name}")


_same_fields(SessionLimits, Settings)


S = TypeVar("S", bound=msgspec.Struct)


def check_settings(settings: Settings) -> Settings:
    """``settings`` if every field is within its bounds, else ``invalid_argument`` naming the
    field: a ``Settings(...)`` built in Python is not checked by its constructor."""
    try:
        return msgspec.convert(msgspec.to_builtins(settings), Settings)
    except msgspec.ValidationError as exc:
        raise InvalidArgument(f"settings: {exc}") from None


def parse_value(struct_type: type[msgspec.Struct], key: str, text: str) -> Any:
    """Parse a command-line string (``"3"``, ``"true"``, ``"none"``) into ``key``'s type."""
    fields = {f.name: f for f in msgspec.structs.fields(struct_type)}
    if key not in fields:
        raise KeyError(key)
    lowered = text.strip().lower()
    raw: Any = text
    if lowered in {"none", "null"}:
        raw = None
    elif lowered in {"true", "false"}:
        raw = lowered == "true"
    else:
        try:
            raw = msgspec.json.decode(text.strip())
        except msgspec.DecodeError:
            raw = text
    try:
        return msgspec.convert(raw, fields[key].type, strict=False)
    except msgspec.ValidationError:
        if raw == text:
            raise
        return msgspec.convert(text, fields[key].type, strict=False)  # e.g. "123" for a str


def apply_overrides(base: S, mapping: Mapping[str, Any], source: str) -> tuple[S, list[str]]:
    """Apply ``mapping`` onto ``base`` key by key; bad keys become warnings, not errors."""
    fields = {f.name: f for f in msgspec.structs.fields(type(base))}
    changes: dict[str, Any] = {}
    warnings: list[str] = []
    for key, value in mapping.items():
        field = fields.get(key)
        if field is None:
            warnings.append(f"{source}: unknown setting {key!r} ignored")
            continue
        if isinstance(field.type, type) and issubclass(field.type, msgspec.Struct):
            if not isinstance(value, Mapping):
                warnings.append(f"{source}: setting {key!r} must be a table; ignored")
                continue
            current = getattr(base, key)
            nested: Any
            nested_warnings: list[str]
            if isinstance(current, WatchdogConfig):
                nested, nested_warnings = apply_watchdog_overrides(current, value, source)
            else:
                nested, nested_warnings = apply_overrides(current, value, f"{source} [{key}]")
            changes[key] = nested
            warnings.extend(nested_warnings)
            continue
        try:
            # the field's annotation carries its bounds: out of range fails here too
            converted = msgspec.convert(value, field.type, strict=True)
        except (msgspec.ValidationError, OverflowError) as exc:
            warnings.append(f"{source}: setting {key!r} has a bad value {value!r} ({exc}); ignored")
            continue
        changes[key] = converted
    return msgspec.structs.replace(base, **changes), warnings
