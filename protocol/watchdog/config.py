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
  (:func:`parse_config_value`) and raises :class:`WatchdogConfigError` naming the key (and,
  for a value out of range, the bound).
* Every rule has a threshold setting ``RULE.threshold`` (:mod:`protocol.watchdog.rules` says
  which rules, their defaults and where those come from); a rule with no threshold of its own
  (``None``) uses its fallback, ``repeat_threshold`` or ``typecheck_repeat_threshold``
  (:func:`rule_threshold`). In a TOML file the key is written under ``[watchdog]`` as
  ``monologue.threshold = 5`` or as a ``[watchdog.monologue]`` table: nested tables are read
  as dotted keys. ``monologue.match`` chooses whether a monologue is any agent messages in a
  row (``any``) or the same text repeated (``identical``).
* Every number has an upper bound as well as a lower one (counts 1..1,000,000, seconds at
  most seven days): a huge value would reach a timer or a loop as an overflow.
* Session state is separate from settings: the ``paused`` flag and a session-only
  rescue-message override. Alerts are suppressed when
  ``enabled`` is false or the session is paused.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Annotated, Any, Final, Literal

import msgspec

from protocol.core.errors import InvalidArgument
from protocol.core.limits import MAX_DEADLINE_S, MAX_TEXT_CHARS
from protocol.watchdog.rules import MONOLOGUE_MATCHES, RULES, MonologueMatch, rule

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
    "rule_threshold",
    "rule_thresholds",
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
MAX_COUNT: Final = 1_000_000
PositiveInt = Annotated[int, msgspec.Meta(ge=1, le=MAX_COUNT)]
PositiveSeconds = Annotated[float, msgspec.Meta(gt=0, le=MAX_DEADLINE_S)]
NonNegativeSeconds = Annotated[float, msgspec.Meta(ge=0, le=MAX_DEADLINE_S)]
NonEmptyStr = Annotated[str, msgspec.Meta(min_length=1, max_length=MAX_TEXT_CHARS)]


class WatchdogConfig(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Every watchdog setting with its default.

    ``forbid_unknown_fields`` is on because a whole config is only ever built from this
    module's own validated overrides; lenient loading of user files goes through
    :func:`apply_watchdog_overrides`, which warns instead.
    """

    #: false: alerts are suppressed
    enabled: bool = True
    #: what an agent is told when an alert is sent to it (``alert_mode``) or it is steered
    rescue_message: NonEmptyStr = DEFAULT_RESCUE_MESSAGE
    #: the threshold of every rule that has none of its own
    repeat_threshold: PositiveInt = 3
    #: the threshold of ``repeated_typecheck_error`` when it has none of its own
    typecheck_repeat_threshold: PositiveInt = 2
    #: tools running this long in all with no write count towards ``no_progress`` (the model's
    #: think time between a result and its next call is not counted)
    idle_no_progress_s: PositiveSeconds = 300.0
    #: at least this long between two alerts about one agent
    cooldown_s: NonNegativeSeconds = 60.0
    #: lines of a tool's output kept as the preview an alert quotes
    max_preview_lines: PositiveInt = 20
    #: events kept per agent (the window the rules judge)
    max_events_per_agent: PositiveInt = 200
    #: where an alert goes: ``main_only`` the parent, ``direct_subagent`` the agent (as a
    #: steer with the rescue message), ``both``
    alert_mode: AlertMode = "main_only"
    # One threshold per rule (protocol.watchdog.rules gives each default its source); None:
    # the rule has no threshold of its own and uses its fallback setting.
    repeated_command_threshold: PositiveInt | None = msgspec.field(
        default=rule("repeated_command").default, name="repeated_command.threshold"
    )
    repeated_failure_threshold: PositiveInt | None = msgspec.field(
        default=rule("repeated_failure").default, name="repeated_failure.threshold"
    )
    repeated_typecheck_error_threshold: PositiveInt | None = msgspec.field(
        default=rule("repeated_typecheck_error").default, name="repeated_typecheck_error.threshold"
    )
    no_progress_threshold: PositiveInt | None = msgspec.field(
        default=rule("no_progress").default, name="no_progress.threshold"
    )
    read_only_loop_threshold: PositiveInt | None = msgspec.field(
        default=rule("read_only_loop").default, name="read_only_loop.threshold"
    )
    alternating_cycle_threshold: PositiveInt | None = msgspec.field(
        default=rule("alternating_cycle").default, name="alternating_cycle.threshold"
    )
    monologue_threshold: PositiveInt | None = msgspec.field(
        default=rule("monologue").default, name="monologue.threshold"
    )
    #: ``any``: agent messages in a row make a monologue; ``identical``: only the same text
    monologue_match: MonologueMatch = msgspec.field(default="any", name="monologue.match")
    empty_responses_threshold: PositiveInt | None = msgspec.field(
        default=rule("empty_responses").default, name="empty_responses.threshold"
    )
    error_streak_threshold: PositiveInt | None = msgspec.field(
        default=rule("error_streak").default, name="error_streak.threshold"
    )
    condensation_loop_threshold: PositiveInt | None = msgspec.field(
        default=rule("condensation_loop").default, name="condensation_loop.threshold"
    )


# Settings are named by their keys (``monologue.threshold``); the attributes by Python names.
_FIELD_TYPES: Final[dict[str, object]] = {
    f.encode_name: f.type for f in msgspec.structs.fields(WatchdogConfig)
}
_ATTRS: Final[dict[str, str]] = {
    f.encode_name: f.name for f in msgspec.structs.fields(WatchdogConfig)
}
CONFIG_KEYS: Final[tuple[str, ...]] = tuple(_FIELD_TYPES)
_CHOICES: Final[dict[str, tuple[str, ...]]] = {
    "alert_mode": ALERT_MODES,
    "monologue.match": MONOLOGUE_MATCHES,
}
assert all(f"{r.code}.threshold" in _ATTRS for r in RULES), "a rule without a threshold field"


def rule_threshold(config: WatchdogConfig, code: str) -> int:
    """The threshold a rule uses: its own setting, else its fallback setting's value."""
    own: int | None = getattr(config, _ATTRS[f"{code}.threshold"])
    if own is not None:
        return own
    fallback: int = getattr(config, rule(code).fallback)
    return fallback


def rule_thresholds(config: WatchdogConfig) -> dict[str, int]:
    """Every rule's threshold in effect, by reason code."""
    return {r.code: rule_threshold(config, r.code) for r in RULES}


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
    if key in _CHOICES and value not in _CHOICES[key]:
        choices = ", ".join(_CHOICES[key])
        raise WatchdogConfigError("invalid_value", key, f"expected one of {choices}, got {value!r}")
    try:
        checked: object = msgspec.convert(value, type=_FIELD_TYPES[key])
    except msgspec.ValidationError as exc:
        raise WatchdogConfigError("invalid_value", key, f"{exc} (got {value!r})") from None
    if isinstance(checked, float) and not math.isfinite(checked):
        raise WatchdogConfigError("invalid_value", key, f"expected a finite number, got {value!r}")
    return checked


def _kind(key: str) -> str:
    """How ``watchdog set`` reads the text of a key: bool, int, float, choice or text."""
    if key in _CHOICES:
        return "choice"
    default = getattr(WatchdogConfig(), _ATTRS[key])
    if key.endswith(".threshold") or (isinstance(default, int) and not isinstance(default, bool)):
        return "int"
    if isinstance(default, bool):
        return "bool"
    if isinstance(default, float):
        return "float"
    return "text"


def parse_config_value(key: str, text: str) -> object:
    """Parse the text of ``watchdog set KEY VALUE`` into the field's type, validated."""
    if key not in _FIELD_TYPES:
        raise WatchdogConfigError("unknown_key", key, _unknown_reason(key))
    raw = text.strip()
    value: object
    match _kind(key):
        case "bool":
            lowered = raw.lower()
            if lowered in _TRUE:
                value = True
            elif lowered in _FALSE:
                value = False
            else:
                raise WatchdogConfigError(
                    "invalid_value", key, f"expected true or false, got {text!r}"
                )
        case "int":
            try:
                value = int(raw)
            except ValueError:
                raise WatchdogConfigError(
                    "invalid_value", key, f"expected an integer, got {text!r}"
                ) from None
        case "float":
            try:
                value = float(raw)
            except ValueError:
                raise WatchdogConfigError(
                    "invalid_value", key, f"expected a number of seconds, got {text!r}"
                ) from None
        case "choice":
            value = raw
            if raw not in _CHOICES[key]:
                raise WatchdogConfigError(
                    "invalid_value",
                    key,
                    f"expected one of {', '.join(_CHOICES[key])}, got {text!r}",
                )
        case _:
            value = text  # free text (rescue_message): keep as typed
    return _validate(key, value)


def _flatten(mapping: Mapping[Any, object], prefix: str = "") -> Iterable[tuple[str, object]]:
    """``{"monologue": {"threshold": 5}}`` -> ``("monologue.threshold", 5)``: a TOML table
    under ``[watchdog]`` (``[watchdog.monologue]``, or the dotted key) names a setting too."""
    for key, value in mapping.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping) and name not in _FIELD_TYPES:
            yield from _flatten(value, f"{name}.")
        else:
            yield name, value


def apply_watchdog_overrides(
    config: WatchdogConfig, mapping: Mapping[str, object], source: str
) -> tuple[WatchdogConfig, list[str]]:
    """Apply one layer of overrides; bad keys give warnings naming ``source`` and are skipped."""
    updates: dict[str, object] = {}
    warnings: list[str] = []
    for key, value in _flatten(mapping):
        try:
            updates[_ATTRS.get(key, key)] = _validate(key, value)
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
    value = parse_config_value(key, text)  # first: it names an unknown key
    return msgspec.structs.replace(config, **{_ATTRS[key]: value})


def config_to_dict(config: WatchdogConfig) -> dict[str, object]:
    """The settings as plain builtins by key, in field order (for ``watchdog config --json``);
    a rule threshold of ``None`` means the rule uses its fallback setting."""
    return {key: getattr(config, _ATTRS[key]) for key in CONFIG_KEYS}


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
