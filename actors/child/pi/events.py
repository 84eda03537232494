"""Pi's RPC events as agent-neutral runtime events: :class:`RuntimeEvent` and the pure
mapping :func:`map_event` (event shapes as measured on Pi 0.73.1's RPC stdout).

Rules:
- Pure: no IO, no state; an event that means nothing to the runtime maps to ``None``.
- ``agent_start`` / ``agent_end`` bound one *run* (one or more model turns). The runtime view
  calls that a turn; its end is never a task ending (idle is not done). Pi's own
  ``turn_start`` / ``turn_end`` (one model call each) are deliberately not mapped.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any, Literal

import msgspec

from protocol.core.limits import MAX_BUDGET_COST, MAX_BUDGET_TOKENS

__all__ = ["RuntimeEvent", "RuntimeEventKind", "error_of", "map_event", "usage_of"]

RuntimeEventKind = Literal[
    "turn_start", "turn_end", "tool_call", "tool_result", "output", "error", "condensation"
]


class RuntimeEvent(msgspec.Struct, frozen=True, kw_only=True):
    """An agent-neutral runtime event (to be aligned with the protocol's runtime envelope).

    - ``turn_start`` / ``turn_end``: one run of the agent began / ended (``stop_reason`` of the
      last assistant message: ``stop``, ``aborted``, ``error``, ``length``, or ``toolUse``
      when a terminating tool such as ``shepherd_done`` ended the run). A turn ending is never
      a task ending.
    - ``tool_call``: ``tool``, ``tool_call_id`` and ``command`` (bash: the command line; other
      tools: compact JSON of the arguments with sorted keys, stable for hashing); ``paths``:
      the file a ``write`` or ``edit`` call writes (its ``path`` argument).
    - ``tool_result``: ``tool``, ``tool_call_id``, ``output`` (the text parts joined) and
      ``is_error``.
    - ``output``: assistant text of one finished assistant message.
    - ``error``: the model call failed, or an extension raised (``text`` says what).
    - ``condensation``: Pi compacted the context (``compaction_end``, manual or automatic;
      ``text`` gives the reason, and ``is_error`` with the error when it failed). An aborted
      compaction changed nothing and maps to nothing. The watchdog needs it: a compaction is
      neither progress nor a failure, and compactions back to back are a loop of their own.
    """

    kind: RuntimeEventKind
    tool: str | None = None
    tool_call_id: str | None = None
    command: str | None = None
    paths: tuple[str, ...] = ()
    output: str | None = None
    is_error: bool = False
    text: str | None = None
    stop_reason: str | None = None


def map_event(ev: Mapping[str, Any]) -> RuntimeEvent | None:
    """Translate one Pi RPC event into a :class:`RuntimeEvent`, or ``None`` if it has none.

    Pure: no IO, no state. Pi's own ``turn_start``/``turn_end`` (one model call each) are
    deliberately not mapped: the runtime's unit is Pi's whole run (``agent_start`` …
    ``agent_end``), which is what ends when Pi goes idle.
    """
    kind = ev.get("type")
    if kind == "agent_start":
        return RuntimeEvent(kind="turn_start")
    if kind == "agent_end":
        last = _last_assistant(ev.get("messages"))
        reason = _str_or_none(last.get("stopReason")) if last else None
        error = _str_or_none(last.get("errorMessage")) if last else None
        return RuntimeEvent(
            kind="turn_end", stop_reason=reason, is_error=reason == "error", text=error
        )
    if kind == "tool_execution_start":
        tool = str(ev.get("toolName") or "")
        return RuntimeEvent(
            kind="tool_call",
            tool=tool,
            tool_call_id=_str_or_none(ev.get("toolCallId")),
            command=_tool_command(tool, ev.get("args")),
            paths=_written(tool, ev.get("args")),
        )
    if kind == "tool_execution_end":
        result = ev.get("result")
        content = result.get("content") if isinstance(result, Mapping) else None
        return RuntimeEvent(
            kind="tool_result",
            tool=str(ev.get("toolName") or ""),
            tool_call_id=_str_or_none(ev.get("toolCallId")),
            output=_join_text(content),
            is_error=bool(ev.get("isError")),
        )
    if kind == "message_end":
        message = ev.get("message")
        if not isinstance(message, Mapping) or message.get("role") != "assistant":
            return None
        reason = _str_or_none(message.get("stopReason"))
        if reason == "error":
            return RuntimeEvent(
                kind="error",
                is_error=True,
                stop_reason=reason,
                text=_str_or_none(message.get("errorMessage")) or "model call failed",
            )
        text = _join_text(message.get("content"))
        if not text:
            return None
        return RuntimeEvent(kind="output", text=text, stop_reason=reason)
    if kind == "compaction_end" and ev.get("aborted") is not True:
        reason = _str_or_none(ev.get("reason")) or "unknown"
        error = _str_or_none(ev.get("errorMessage"))
        if error is None and not isinstance(ev.get("result"), Mapping):
            error = "no result"
        text = f"context compaction ({reason})" + (f" failed: {error}" if error else "")
        return RuntimeEvent(kind="condensation", text=text, is_error=error is not None)
    if kind == "extension_error":
        return RuntimeEvent(
            kind="error",
            is_error=True,
            text=f"extension {ev.get('extensionPath')} failed in {ev.get('event')}: "
            f"{ev.get('error')}",
        )
    return None


def error_of(ev: Mapping[str, Any]) -> str | None:
    """The error of a finished assistant message that ended with one (``stopReason``
    ``error``: the model call failed), else ``None``."""
    message = ev.get("message") if ev.get("type") == "message_end" else None
    if not isinstance(message, Mapping) or message.get("role") != "assistant":
        return None
    if message.get("stopReason") != "error":
        return None
    return _str_or_none(message.get("errorMessage")) or "model call failed"


# --- budgets


def usage_of(ev: Mapping[str, Any]) -> tuple[int, float] | None:
    """Tokens and cost (US dollars) of one finished assistant message (``message_end``), from
    its ``usage`` (``totalTokens``, else the sum of its parts; ``cost.total``); ``None`` when
    it carries none. Values that are not finite non-negative numbers count as 0, and each is
    held to the most one report may carry."""
    if ev.get("type") != "message_end":
        return None
    message = ev.get("message")
    if not isinstance(message, Mapping) or message.get("role") != "assistant":
        return None
    usage = message.get("usage")
    if not isinstance(usage, Mapping):
        return None
    total = _amount(usage.get("totalTokens"))
    if total == 0:
        total = sum(_amount(usage.get(k)) for k in ("input", "output", "cacheRead", "cacheWrite"))
    cost = usage.get("cost")
    dollars = _amount(cost.get("total")) if isinstance(cost, Mapping) else 0.0
    if total == 0 and dollars == 0:
        return None
    return min(int(total), MAX_BUDGET_TOKENS), min(dollars, MAX_BUDGET_COST)


def _amount(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return 0.0
    return float(value) if math.isfinite(value) and value > 0 else 0.0


def _str_or_none(value: object) -> str | None:
    return value if isinstance(value, str) else None


def _last_assistant(messages: object) -> Mapping[str, Any] | None:
    if not isinstance(messages, list):
        return None
    for message in reversed(messages):
        if isinstance(message, Mapping) and message.get("role") == "assistant":
            return message
    return None


def _join_text(content: object) -> str:
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return ""
    return "\n".join(
        part["text"]
        for part in content
        if isinstance(part, Mapping)
        and part.get("type") == "text"
        and isinstance(part.get("text"), str)
    )


#: Pi's tools that write a file, and the argument naming it
_WRITERS = frozenset({"write", "edit"})
_PATH_ARGS = ("path", "file_path", "filePath")


def _written(tool: str, args: object) -> tuple[str, ...]:
    """The file a writing tool's call writes (its path argument), if it names one."""
    if tool not in _WRITERS or not isinstance(args, Mapping):
        return ()
    for key in _PATH_ARGS:
        path = args.get(key)
        if isinstance(path, str) and 0 < len(path) <= 1024:
            return (path,)
    return ()


def _tool_command(tool: str, args: object) -> str:
    if tool == "bash" and isinstance(args, Mapping) and isinstance(args.get("command"), str):
        command: str = args["command"]
        return command
    return json.dumps(args, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
