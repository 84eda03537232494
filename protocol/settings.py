"""Settings: one Struct with defaults, and pure layering of overrides onto it.

Layers (DESIGN §8): defaults, then the user file, then the project file, then session
overrides. Reading the files is the caller's job (``actors/config.py``); this module only
takes already-parsed mappings. An unknown key or a value of the wrong type never stops
anything: it becomes a warning naming the source and the key, and that key is ignored.

A nested table is layered field by field: a user file setting ``[watchdog] cooldown_s`` and a
project file setting ``[watchdog] repeat_threshold`` both apply. The ``[watchdog]`` table goes
through the watchdog's own validating :func:`~protocol.watchdog_config.apply_watchdog_overrides`
(finite numbers, ranges, "did you mean" hints; warnings read
``<source>: watchdog.<key>: <reason>; ignored``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, TypeVar

import msgspec

from protocol.watchdog_config import WatchdogConfig, apply_watchdog_overrides

__all__ = ["Settings", "apply_overrides", "parse_value"]


class Settings(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    #: completions reaching one watcher within this window go out as one notification
    coalesce_ms: float = 25.0
    #: a task waiting this long on a reply gets one stale-wait notification per episode
    stale_wait_threshold_s: float = 120.0
    #: task deadline when delegate gives none (None: no deadline)
    default_task_timeout_s: float | None = None
    #: reply deadline for expects_reply when the message gives none (None: no deadline)
    default_reply_timeout_s: float | None = None
    #: largest envelope the mailbox accepts
    max_envelope_bytes: int = 64 * 1024
    #: most unread envelopes one inbox may hold
    max_queue_depth: int = 1000
    #: acknowledged envelopes kept in cur/ for inspection, per inbox
    retention_count: int = 1000
    #: fsync each published envelope (durable across power loss, ~1k/s per publisher)
    fsync: bool = False
    #: message ids remembered for duplicate detection
    dedup_window: int = 100_000
    #: closed requests remembered (newest first) so a late reply still finds its question;
    #: a reply to an older one is refused as naming no request. Pending ones are always kept.
    closed_requests_kept: int = 1000
    #: recent output lines kept per agent for `read`
    output_lines: int = 2000
    #: fallback rescan of inboxes if a file-system event is ever missed
    fallback_poll_s: float = 1.0
    #: the stuck-loop watchdog (``[watchdog]`` table)
    watchdog: WatchdogConfig = msgspec.field(default_factory=WatchdogConfig)


S = TypeVar("S", bound=msgspec.Struct)


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
            converted = msgspec.convert(value, field.type, strict=True)
        except msgspec.ValidationError as exc:
            warnings.append(f"{source}: setting {key!r} has a bad value {value!r} ({exc}); ignored")
            continue
        problem = _out_of_range(key, converted)
        if problem is not None:
            warnings.append(f"{source}: setting {key!r} = {value!r} {problem}; ignored")
            continue
        changes[key] = converted
    return msgspec.structs.replace(base, **changes), warnings


#: numeric settings that may be zero (no coalescing; keep no acknowledged envelopes)
_ZERO_ALLOWED = frozenset({"coalesce_ms", "retention_count"})


def _out_of_range(key: str, value: Any) -> str | None:
    """Numbers must be finite and positive (a few may be zero): a NaN poll interval or a
    negative queue depth would break the mailbox, not just misbehave."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    if not math.isfinite(value):
        return "is not a finite number"
    if value < 0 or (value == 0 and key not in _ZERO_ALLOWED):
        return "must be positive" if key not in _ZERO_ALLOWED else "must not be negative"
    return None
