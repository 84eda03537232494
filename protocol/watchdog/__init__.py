"""Watchdog, the pure part: settings, event normalisation, stuck detection, alert gating.

Sans-IO: no threads, files, clocks or logging; ``now`` and ``ts`` are passed
in as floats. The actor that owns an agent's watchdog state does::

    window.append(make_event(...))            # per tool call / result / message
    verdict = detect_stuck(window.episode(), config, now)
    decision, gate = gate_verdict(gate, verdict, config, now, paused=session.paused)
    if decision.alert: notify(render_alert(name, agent_id, task_id, verdict, rescue))

and on a new instruction (a delegated task, a message to the agent) ``gate =
reset_episode(gate)``. The rules live in the submodules, each opening with them:

* :mod:`protocol.watchdog.config`    — settings, layering, ``watchdog set``, session state
* :mod:`protocol.watchdog.normalize` — command keys, output hashing, previews
* :mod:`protocol.watchdog.classify`  — what a call does (write, read), typecheck errors
* :mod:`protocol.watchdog.events`    — events, the per-agent window, logical calls
* :mod:`protocol.watchdog.rules`     — the rules, their threshold settings and defaults
* :mod:`protocol.watchdog.detect`    — the detector rules and their confidence mapping
* :mod:`protocol.watchdog.messages`  — the rules over what an agent says between tool calls
* :mod:`protocol.watchdog.evidence`  — evidence items and the helpers the rules share
* :mod:`protocol.watchdog.alert`     — cooldown and evidence dedup, the alert text
* :mod:`protocol.watchdog.replay`    — the JSON-lines replay format
* :mod:`protocol.watchdog.targets`   — the agents the watchdog knows about
* :mod:`protocol.watchdog.queries`   — what a watchdog agent is answered, its alert's text

The names of ``__all__`` are importable from the package; each is imported from its submodule
on first use (module ``__getattr__``), so a process that needs only the settings (every
command-line call reads them) imports ``config`` and ``rules`` and not the detector. The replay
function is ``protocol.watchdog.replay.replay``: the package's ``replay`` is the submodule.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from protocol.watchdog.alert import (
        AlertDecision,
        AlertGate,
        decide_alert,
        gate_verdict,
        record_alert,
        render_alert,
        reset_episode,
    )
    from protocol.watchdog.classify import (
        classify_call,
        error_signature,
        is_check_command,
        read_target_key,
    )
    from protocol.watchdog.config import (
        ALERT_MODES,
        CONFIG_KEYS,
        DEFAULT_RESCUE_MESSAGE,
        AlertMode,
        WatchdogConfig,
        WatchdogConfigError,
        WatchdogSession,
        alert_destinations,
        alerts_active,
        apply_watchdog_overrides,
        config_to_dict,
        effective_rescue_message,
        merge_watchdog_layers,
        parse_config_value,
        pause,
        resume,
        rule_threshold,
        rule_thresholds,
        set_config_value,
        set_rescue_override,
    )
    from protocol.watchdog.detect import (
        CONFIDENCE_LEVELS,
        REASON_CODES,
        Confidence,
        Evidence,
        Verdict,
        detect_stuck,
        verdict_to_dict,
    )
    from protocol.watchdog.events import (
        EventKind,
        EventSource,
        EventWindow,
        LogicalCall,
        ToolEvent,
        current_episode,
        is_instruction,
        is_rescue,
        make_event,
        pair_calls,
        runtime_kind,
        since_last_instruction,
    )
    from protocol.watchdog.normalize import (
        hash_output,
        make_preview,
        normalize_command,
        normalize_output,
        render_call,
        strip_ansi,
    )
    from protocol.watchdog.replay import ReplayEvent, ReplayLineError, decode_replay_line
    from protocol.watchdog.rules import MONOLOGUE_MATCHES, RULES, MonologueMatch, Rule
    from protocol.watchdog.targets import (
        TargetKind,
        WatchdogTarget,
        apply_target_event,
        classify_kind,
        make_target,
        reconcile_targets,
    )

#: name -> the submodule that defines it; a submodule is imported on first use of one of its
#: names, so that importing one submodule (``protocol.watchdog.config`` for the settings, as
#: every short-lived command does) does not import the detector, the rules' texts and replay
_WHERE = {
    "ALERT_MODES": "config",
    "AlertDecision": "alert",
    "AlertGate": "alert",
    "AlertMode": "config",
    "CONFIDENCE_LEVELS": "detect",
    "CONFIG_KEYS": "config",
    "Confidence": "detect",
    "DEFAULT_RESCUE_MESSAGE": "config",
    "EventKind": "events",
    "EventSource": "events",
    "EventWindow": "events",
    "Evidence": "detect",
    "LogicalCall": "events",
    "MONOLOGUE_MATCHES": "rules",
    "MonologueMatch": "rules",
    "REASON_CODES": "detect",
    "RULES": "rules",
    "ReplayEvent": "replay",
    "ReplayLineError": "replay",
    "Rule": "rules",
    "TargetKind": "targets",
    "ToolEvent": "events",
    "Verdict": "detect",
    "WatchdogConfig": "config",
    "WatchdogConfigError": "config",
    "WatchdogSession": "config",
    "WatchdogTarget": "targets",
    "alert_destinations": "config",
    "alerts_active": "config",
    "apply_target_event": "targets",
    "apply_watchdog_overrides": "config",
    "classify_call": "classify",
    "classify_kind": "targets",
    "config_to_dict": "config",
    "current_episode": "events",
    "decide_alert": "alert",
    "decode_replay_line": "replay",
    "detect_stuck": "detect",
    "effective_rescue_message": "config",
    "error_signature": "classify",
    "gate_verdict": "alert",
    "hash_output": "normalize",
    "is_check_command": "classify",
    "is_instruction": "events",
    "is_rescue": "events",
    "make_event": "events",
    "make_preview": "normalize",
    "make_target": "targets",
    "merge_watchdog_layers": "config",
    "normalize_command": "normalize",
    "normalize_output": "normalize",
    "pair_calls": "events",
    "parse_config_value": "config",
    "pause": "config",
    "read_target_key": "classify",
    "reconcile_targets": "targets",
    "record_alert": "alert",
    "render_alert": "alert",
    "render_call": "normalize",
    "reset_episode": "alert",
    "resume": "config",
    "rule_threshold": "config",
    "rule_thresholds": "config",
    "runtime_kind": "events",
    "set_config_value": "config",
    "set_rescue_override": "config",
    "since_last_instruction": "events",
    "strip_ansi": "normalize",
    "verdict_to_dict": "detect",
}


def _submodule(name: str) -> Any:
    # static imports, one per submodule (protocol/ imports nothing dynamically)
    match name:
        case "alert":
            from protocol.watchdog import alert

            return alert
        case "classify":
            from protocol.watchdog import classify

            return classify
        case "config":
            from protocol.watchdog import config

            return config
        case "detect":
            from protocol.watchdog import detect

            return detect
        case "events":
            from protocol.watchdog import events

            return events
        case "normalize":
            from protocol.watchdog import normalize

            return normalize
        case "replay":
            from protocol.watchdog import replay

            return replay
        case "rules":
            from protocol.watchdog import rules

            return rules
        case _:
            from protocol.watchdog import targets

            return targets


def __getattr__(name: str) -> Any:
    where = _WHERE.get(name)
    if where is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(_submodule(where), name)
    globals()[name] = value  # found once, then an ordinary attribute
    return value


__all__ = [
    "ALERT_MODES",
    "CONFIDENCE_LEVELS",
    "CONFIG_KEYS",
    "DEFAULT_RESCUE_MESSAGE",
    "MONOLOGUE_MATCHES",
    "REASON_CODES",
    "RULES",
    "AlertDecision",
    "AlertGate",
    "AlertMode",
    "Confidence",
    "EventKind",
    "EventSource",
    "EventWindow",
    "Evidence",
    "LogicalCall",
    "MonologueMatch",
    "ReplayEvent",
    "ReplayLineError",
    "Rule",
    "TargetKind",
    "ToolEvent",
    "Verdict",
    "WatchdogConfig",
    "WatchdogConfigError",
    "WatchdogSession",
    "WatchdogTarget",
    "alert_destinations",
    "alerts_active",
    "apply_target_event",
    "apply_watchdog_overrides",
    "classify_call",
    "classify_kind",
    "config_to_dict",
    "current_episode",
    "decide_alert",
    "decode_replay_line",
    "detect_stuck",
    "effective_rescue_message",
    "error_signature",
    "gate_verdict",
    "hash_output",
    "is_check_command",
    "is_instruction",
    "is_rescue",
    "make_event",
    "make_preview",
    "make_target",
    "merge_watchdog_layers",
    "normalize_command",
    "normalize_output",
    "pair_calls",
    "parse_config_value",
    "pause",
    "read_target_key",
    "reconcile_targets",
    "record_alert",
    "render_alert",
    "render_call",
    "reset_episode",
    "resume",
    "rule_threshold",
    "rule_thresholds",
    "runtime_kind",
    "set_config_value",
    "set_rescue_override",
    "since_last_instruction",
    "strip_ansi",
    "verdict_to_dict",
]
