"""Watchdog replay: run the detector over a JSON-lines transcript of one agent's events.

Format (one JSON object per line; blank lines are skipped)::

    {"kind": "tool_call"|"tool_result"|"error"|"message"|"user_input"|"rescue"|"condensation"
             |"output",
     "tool": str, "command"?: str, "args"?: object, "output"?: str, "exit_code"?: int,
     "is_error"?: bool, "source"?: "user"|"agent"|"watchdog", "ts"?: float, "call_id"?: str,
     "text"?: str}

* ``tool`` is required for tool events; the other kinds may leave it out. The text of a
  message, condensation or output line is ``text`` or else ``output``.
* ``user_input`` is a new instruction (user input: a task, a message to the agent), the same
  as a ``message`` with ``source: "user"``. ``condensation`` is the agent's context being
  summarised (Pi's compaction; ``is_error`` when it failed): neither progress nor a failure.
  ``rescue`` is the watchdog's rescue message reaching the agent, the same as a ``message``
  with ``source: "watchdog"``: not an instruction (the episode goes on until the agent does
  something new, :func:`~protocol.watchdog.events.current_episode`).
  ``output`` is text that is not the agent speaking (a command agent's printed lines).
* ``error`` is a failed result; a ``tool_result`` with a non-zero ``exit_code`` or
  ``is_error: true`` fails too.
* ``ts`` defaults to the line index (0-based) in seconds. The detector's ``now`` is the
  latest ``ts`` seen so far.
* Unknown fields are ignored on purpose: transcripts exported by other tools carry extra
  fields (ids, token counts) and a post-mortem should not fail on them. Known fields are
  type-checked, and a bad line raises :class:`ReplayLineError` naming the line and field.

Output: one dict per event (``line``, ``kind`` as given, ``tool``, the verdict, and ``alert``:
whether the alert gate would have alerted the parent, with nothing paused) and, last,
``{"final": true, "likely_stuck", "confidence", "reasons", "evidence", ...}``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any, Final, Literal

import msgspec

from protocol.core.errors import InvalidArgument
from protocol.watchdog.alert import AlertGate, gate_verdict, reset_episode
from protocol.watchdog.config import WatchdogConfig
from protocol.watchdog.detect import detect_stuck, verdict_to_dict
from protocol.watchdog.events import (
    EventKind,
    EventSource,
    EventWindow,
    is_instruction,
    make_event,
)

__all__ = ["ReplayEvent", "ReplayLineError", "decode_replay_line", "replay"]

_PATH = re.compile(r" - at `(\$[^`]*)`$")
TOOL_KINDS: Final = frozenset({"tool_call", "tool_result", "error"})
ReplayKind = EventKind | Literal["user_input", "rescue"]


class ReplayEvent(msgspec.Struct, frozen=True, kw_only=True):
    """One line of a replay transcript."""

    kind: ReplayKind
    tool: str = ""
    command: str | None = None
    args: Any = None
    output: str | None = None
    text: str | None = None
    exit_code: int | None = None
    is_error: bool | None = None
    source: EventSource = "agent"
    ts: float | None = None
    call_id: str | None = None


class ReplayLineError(InvalidArgument, ValueError):
    """A transcript line that cannot be replayed; ``line`` is 1-based, ``field`` a path."""

    def __init__(self, line: int, field: str, reason: str) -> None:
        super().__init__(f"line {line}: {field}: {reason}")
        self.line = line
        self.field = field
        self.reason = reason


_DECODER: Final = msgspec.json.Decoder(ReplayEvent)


def decode_replay_line(raw: object, line: int) -> ReplayEvent:
    """Decode one transcript line (JSON text or an already-parsed object)."""
    try:
        if isinstance(raw, (str, bytes)):
            event = _DECODER.decode(raw)
        elif isinstance(raw, Mapping):
            event = msgspec.convert(dict(raw), type=ReplayEvent)
        else:
            raise ReplayLineError(line, "$", f"expected an object, got {type(raw).__name__}")
    except msgspec.ValidationError as exc:
        message = str(exc)
        found = _PATH.search(message)
        field = found.group(1) if found else "$"
        reason = message[: found.start()] if found else message
        raise ReplayLineError(line, field, reason) from None
    except msgspec.DecodeError as exc:
        raise ReplayLineError(line, "$", f"not a JSON object: {exc}") from None
    except RecursionError:
        raise ReplayLineError(line, "$", "nested too deeply to read") from None
    if event.kind in TOOL_KINDS and not event.tool:
        raise ReplayLineError(line, "$.tool", f"required for a {event.kind} event")
    return event


def replay(
    lines: Iterable[str | bytes | Mapping[str, object]],
    config: WatchdogConfig | None = None,
    *,
    agent_id: str = "replay",
    final_now: float | None = None,
) -> list[dict[str, object]]:
    """A verdict after each event, then the final verdict (at ``final_now`` if given)."""
    cfg = config if config is not None else WatchdogConfig()
    window = EventWindow(agent_id, cfg.max_events_per_agent)
    gate = AlertGate()
    results: list[dict[str, object]] = []
    now: float | None = None
    for index, raw in enumerate(lines):
        if isinstance(raw, (str, bytes)) and not raw.strip():
            continue
        entry = decode_replay_line(raw, index + 1)
        ts = entry.ts if entry.ts is not None else float(index)
        now = ts if now is None else max(now, ts)
        body = entry.text if entry.text is not None else entry.output
        kind: EventKind
        source: EventSource = entry.source
        if entry.kind == "user_input":
            kind, source = "message", "user"
        elif entry.kind == "rescue":
            kind, source = "message", "watchdog"
        else:
            kind = entry.kind
        event = make_event(
            agent_id=agent_id,
            seq=index + 1,
            ts=ts,
            kind=kind,
            config=cfg,
            tool=entry.tool,
            command=entry.command,
            args=entry.args,
            output=body,
            exit_code=entry.exit_code,
            is_error=entry.is_error,
            source=source,
            call_id=entry.call_id,
        )
        window.append(event)
        if is_instruction(event):
            gate = reset_episode(gate)
        verdict = detect_stuck(window.episode(), cfg, now)
        decision, gate = gate_verdict(gate, verdict, cfg, now)
        results.append(
            {
                "line": index + 1,
                "kind": entry.kind,
                "tool": entry.tool,
                **verdict_to_dict(verdict),
                "alert": decision.alert,
            }
        )
    end = final_now if final_now is not None else (now if now is not None else 0.0)
    final = detect_stuck(window.episode(), cfg, end)
    results.append(
        {
            "final": True,
            **verdict_to_dict(final),
            "events": len(results),
            "alerts": sum(1 for r in results if r.get("alert")),
        }
    )
    return results
