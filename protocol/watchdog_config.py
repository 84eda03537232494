"""Watchdog settings and session state: pure values and the rules that layer them.

Rules
-----
* Effective settings = defaults <- user layer <- project layer <- session overrides
  (right wins). Each layer is a plain mapping (the ``[watchdog]`` table of a TOML file, or
  ``watchdog set KEY VALUE`` pairs); reading files is the caller's job.
* A layer never stops start-up: an unknown key, a value of the wrong type or out of range,
  or a layer that is not a table gives one warning naming the source and the key, and only
  that key (or layer) is ignored. Every other key of the layer still applies.
* ``watchdog set KEY VALUE`` parses the text into the field's type
  (:func:`parse_config_value`) and raises :class:`WatchdogConfigError` naming the key.
* Session state is separate from settings: the ``paused`` flag and a session-only
  rescue-message override (seed 004 Task01 §4). Alerts are suppressed when
  ``enabled`` is false or the session is paused.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Annotated, Final, Literal

import msgspec

from protocol.errors import InvalidArgument
from protocol.limits import MAX_DEADLINE_S, MAX_TEXT_CHARS

__all__ = [
    "ALERT_MODES",
    "CONFIG_KEYS",
    "DEFAULT_RESCUE_MESSAGE",
    "AlertMode",
    "WatchdogConfig",
    "WatchdogConfigError",
    "WatchdogSession",
    "alert_destinations",
    "alerts_active",
    "apply_watchdog_overrides",
    "config_to_dict",
    "effective_rescue_message",
    "merge_watchdog_layers",
    "parse_config_value",
    "pause",
    "resume",
    "set_config_value",
    "set_rescue_override",
]

AlertMode = Literal["main_only", "direct_subagent", "both"]
ALERT_MODES: Final[tuple[str, ...]] = ("main_only", "direct_subagent", "both")

DEFAULT_RESCUE_MESSAGE: Final[str] = (
    "You appear to be stuck in a loop: the same commands keep giving the same results. "
    "Stop repeating them. Summarise in a few lines what you have tried and what each attempt "
    "showed, then either change your approach (a different hypothesis, tool or file), or call "
    "done with status blocked and explain what you need to continue."
)

# Every number is bounded above too: a window of 1e300 s would reach a timer as an overflow.
PositiveInt = Annotated[int, msgspec.Meta(ge=1, le=1_000_000)]
PositiveSeconds = Annotated[float, msgspec.Meta(gt=0, le=MAX_DEADLINE_S)]
NonNegativeSeconds = Annotated[float, msgspec.Meta(ge=0, le=MAX_DEADLINE_S)]
NonEmptyStr = Annotated[str, msgspec.Meta(min_length=1, max_length=MAX_TEXT_CHARS)]


class WatchdogConfig(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Every watchdog setting with its default (seed 004 Task01 §4, DESIGN §7).

    ``forbid_unknown_fields`` is on because a whole config is only ever built from this
    module's own validated overrides; lenient loading of user files goes through
    :func:`apply_watchdog_overrides`, which warns instead.
    """

    enabled: bool = True
    rescue_message: NonEmptyStr = DEFAULT_RESCUE_MESSAGE
    repeat_threshold: PositiveInt = 3
    typecheck_repeat_threshold: PositiveInt = 2
    idle_no_progress_s: PositiveSeconds = 300.0
    cooldown_s: NonNegativeSeconds = 60.0
    max_preview_lines: PositiveInt = 20
    max_events_per_agent: PositiveInt = 200
    alert_mode: AlertMode = "main_only"


_FIELD_TYPES: Final[dict[str, object]] = {
    f.name: f.type for f in msgspec.structs.fields(WatchdogConfig)
}
CONFIG_KEYS: Final[tuple[str, ...]] = tuple(_FIELD_TYPES)

_TRUE: Final = frozenset({"true", "yes", "on", "1"})
_FALSE: Final = frozenset({"false", "no", "off", "0"})


class WatchdogConfigError(InvalidArgument, ValueError):
    """A watchdog setting that cannot be applied; ``problem`` says which way, ``key`` which."""

    def __init__(
        self, problem: Literal["unknown_key", "invalid_value"], key: str, reason: str
    ) -> None:
        super().__init__(f"watchdog setting {key!r}: {reason}")
        self.problem = problem
        self.key = key
        self.reason = reason


def _edit_distance(a: str, b: str) -> int:
    previous = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        current = [i]
        for j, cb in enumerate(b, 1):
            current.append(min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (ca != cb)))
        previous = current
    return previous[-1]


def _unknown_reason(key: str) -> str:
    distance, close = min((_edit_distance(key, known), known) for known in CONFIG_KEYS)
    hint = f" (did you mean {close!r}?)" if distance <= max(2, len(key) // 4) else ""
    return f"unknown key{hint}; known keys: {', '.join(CONFIG_KEYS)}"


def _validate(key: str, value: object) -> object:
    """Check one value against its field type (strict: no str->int coercion)."""
    if key not in _FIELD_TYPES:
        raise WatchdogConfigError("unknown_key", key, _unknown_reason(key))
    try:
        checked: object = msgspec.convert(value, type=_FIELD_TYPES[key])
    except msgspec.ValidationError as exc:
        raise WatchdogConfigError("invalid_value", key, f"{exc} (got {value!r})") from None
    if isinstance(checked, float) and not math.isfinite(checked):
        raise WatchdogConfigError("invalid_value", key, f"expected a finite number, got {value!r}")
    return checked


def parse_config_value(key: str, text: str) -> object:
    """Parse the text of ``watchdog set KEY VALUE`` into the field's type, validated."""
    if key not in _FIELD_TYPES:
        raise WatchdogConfigError("unknown_key", key, _unknown_reason(key))
    default = getattr(WatchdogConfig(), key)
    raw = text.strip()
    value: object
    if isinstance(default, bool):
        lowered = raw.lower()
        if lowered in _TRUE:
            value = True
        elif lowered in _FALSE:
            value = False
        else:
            raise WatchdogConfigError("invalid_value", key, f"expected true or false, got {text!r}")
    elif isinstance(default, int):
        try:
            value = int(raw)
        except ValueError:
            raise WatchdogConfigError(
                "invalid_value", key, f"expected an integer, got {text!r}"
            ) from None
    elif isinstance(default, float):
        try:
            value = float(raw)
        except ValueError:
            raise WatchdogConfigError(
                "invalid_value", key, f"expected a number of seconds, got {text!r}"
            ) from None
    elif key == "alert_mode":
        value = raw
        if raw not in ALERT_MODES:
            raise WatchdogConfigError(
                "invalid_value", key, f"expected one of {', '.join(ALERT_MODES)}, got {text!r}"
            )
    else:
        value = text  # free text (rescue_message): keep as typed
    return _validate(key, value)


def apply_watchdog_overrides(
    config: WatchdogConfig, mapping: Mapping[str, object], source: str
) -> tuple[WatchdogConfig, list[str]]:
    """Apply one layer of overrides; bad keys give warnings naming ``source`` and are skipped."""
    updates: dict[str, object] = {}
    warnings: list[str] = []
    for key, value in mapping.items():
        try:
            updates[str(key)] = _validate(str(key), value)
        except WatchdogConfigError as exc:
            warnings.append(f"{source}: watchdog.{exc.key}: {exc.reason}; ignored")
    if not updates:
        return config, warnings
    return msgspec.structs.replace(config, **updates), warnings


def merge_watchdog_layers(
    layers: Iterable[tuple[str, object]], base: WatchdogConfig | None = None
) -> tuple[WatchdogConfig, list[str]]:
    """Fold ``(source, table)`` layers in order (user, project, session): later layers win.

    A ``None`` table means the layer is absent (no file): silently skipped. A table that is
    not a mapping (a broken file section) gives a warning and the whole layer is ignored.
    """
    config = base if base is not None else WatchdogConfig()
    warnings: list[str] = []
    for source, table in layers:
        if table is None:
            continue
        if not isinstance(table, Mapping):
            warnings.append(
                f"{source}: [watchdog] must be a table, got {type(table).__name__}; ignored"
            )
            continue
        config, layer_warnings = apply_watchdog_overrides(config, table, source)
        warnings.extend(layer_warnings)
    return config, warnings


def set_config_value(config: WatchdogConfig, key: str, text: str) -> WatchdogConfig:
    """``watchdog set KEY VALUE``: parse, validate, apply; raises WatchdogConfigError."""
    return msgspec.structs.replace(config, **{key: parse_config_value(key, text)})


def config_to_dict(config: WatchdogConfig) -> dict[str, object]:
    """The settings as plain builtins, in field order (for ``watchdog config --json``)."""
    return {key: getattr(config, key) for key in CONFIG_KEYS}


def alert_destinations(mode: AlertMode) -> frozenset[Literal["parent", "agent"]]:
    """Where an alert goes: ``main_only`` parent, ``direct_subagent`` agent, ``both``."""
    if mode == "main_only":
        return frozenset({"parent"})
    if mode == "direct_subagent":
        return frozenset({"agent"})
    return frozenset({"parent", "agent"})


class WatchdogSession(msgspec.Struct, frozen=True, kw_only=True):
    """Session-only watchdog state (never written to settings files)."""

    paused: bool = False
    rescue_message_override: str | None = None


def pause(state: WatchdogSession) -> WatchdogSession:
    return msgspec.structs.replace(state, paused=True)


def resume(state: WatchdogSession) -> WatchdogSession:
    return msgspec.structs.replace(state, paused=False)


def set_rescue_override(state: WatchdogSession, message: str | None) -> WatchdogSession:
    """Set (or, with ``None``, clear) the session rescue message; blank text is refused."""
    if message is not None and not message.strip():
        raise WatchdogConfigError("invalid_value", "rescue_message", "must not be empty")
    return msgspec.structs.replace(state, rescue_message_override=message)


def effective_rescue_message(config: WatchdogConfig, state: WatchdogSession) -> str:
    """The session override when set, else the configured message."""
    if state.rescue_message_override is not None:
        return state.rescue_message_override
    return config.rescue_message


def alerts_active(config: WatchdogConfig, state: WatchdogSession) -> bool:
    """False when the watchdog is switched off (``enabled = false``) or paused."""
    return config.enabled and not state.paused
