"""Pi's event stream as the bridge reports it: the runs Pi has open, the messages in its queue,
and the runtime events its events become.

Rules:
- Events (:func:`~actors.child.pi.events.map_event`) become runtime events: ``turn_start``
  (``agent_start``), ``turn_end`` (``agent_end``: a turn ending, NEVER a task settlement),
  ``tool_call`` (tool, command), ``tool_result`` (tool, its command, the output's last
  :data:`~actors.runtime.procs.OUTPUT_TAIL_BYTES`, is_error), ``output`` (assistant text),
  ``error`` and ``condensation``. Only ``shepherd_done`` settles a task, through the parent.
- A finished assistant message that carries ``usage`` also becomes a ``usage`` event (its
  tokens and cost, :func:`~actors.child.pi.events.usage_of`): the parent counts it against
  the task's budget.
- Nothing published is unbounded (an envelope is at most 64 KiB): assistant text, errors and
  tool commands are cut to :data:`TEXT_LIMIT` / :data:`COMMAND_LIMIT` (their head), a tool's
  output to its tail.
- A ``tool_result`` carries the command of its ``tool_call`` (the watchdog keys on it),
  remembered by tool call id until the result, or until the run ends.
- Runs open are counted from ``agent_start`` / ``agent_end`` (never below 0) and the queue is
  what the last ``queue_update`` listed (steering plus follow-up). This view can lag Pi's by
  an event: what depends on it (the adapter's choice of words, its stranded-queue check)
  confirms with Pi or lets Pi decide.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from actors.child.adapters import AgentContext
from actors.child.pi.events import RuntimeEvent, map_event, usage_of
from actors.runtime.procs import OUTPUT_TAIL_BYTES

if TYPE_CHECKING:
    from loguru import Logger

__all__ = ["COMMAND_LIMIT", "TEXT_LIMIT", "PiTurns"]

#: Assistant text and tool commands beyond this are cut (an envelope is at most 64 KiB).
TEXT_LIMIT = 16 * 1024
COMMAND_LIMIT = 8 * 1024


def _tail(text: str, limit: int) -> str:
    data = text.encode()
    if len(data) <= limit:
        return text
    return "[… earlier output cut …]\n" + data[-limit:].decode(errors="ignore")


def _head(text: str, limit: int) -> str:
    data = text.encode()
    if len(data) <= limit:
        return text
    return data[:limit].decode(errors="ignore") + "\n[… cut by shepherd …]"


class PiTurns:
    """One Pi's runs and queue as its events tell them, published to ``ctx`` (core thread)."""

    def __init__(self, ctx: AgentContext, log: Logger) -> None:
        self._ctx = ctx
        self._log = log
        #: runs open on Pi's event stream (agent_start minus agent_end)
        self.runs_open = 0
        #: messages in Pi's queue, as its last queue_update said
        self.queued = 0
        #: tool_call_id -> command, so a result carries its command (the watchdog keys on it)
        self._commands: dict[str, str] = {}

    @property
    def idle(self) -> bool:
        """No run open, as far as the events seen so far say."""
        return self.runs_open == 0

    @property
    def stranded(self) -> bool:
        """Pi's queue holds messages while no run is open (to be confirmed with Pi)."""
        return self.runs_open == 0 and self.queued > 0

    def observe(self, event: Mapping[str, Any], *, publish: bool = True) -> None:
        """Count one of Pi's events, and publish what it means unless ``publish`` is False."""
        kind = event.get("type")
        if kind == "agent_start":
            self.runs_open += 1
        elif kind == "agent_end":
            self.runs_open = max(0, self.runs_open - 1)
            self._commands.clear()
        elif kind == "queue_update":
            steering, follow_up = event.get("steering"), event.get("followUp")
            self.queued = (len(steering) if isinstance(steering, list) else 0) + (
                len(follow_up) if isinstance(follow_up, list) else 0
            )
        mapped = map_event(event)
        if mapped is not None and publish:
            self._publish(mapped)
        spent = usage_of(event) if publish else None
        if spent is not None:  # budgets: what this model call cost, counted by the parent
            self._ctx.runtime("usage", tokens=spent[0], cost=spent[1])

    def _publish(self, ev: RuntimeEvent) -> None:
        runtime = self._ctx.runtime
        match ev.kind:
            case "turn_start":
                runtime("turn_start")
            case "turn_end":
                self._log.info("turn ended ({})", ev.stop_reason)
                runtime("turn_end", is_error=ev.is_error, text=ev.text)
            case "tool_call":
                command = _head(ev.command or "", COMMAND_LIMIT)
                if ev.tool_call_id is not None:
                    self._commands[ev.tool_call_id] = command
                runtime("tool_call", tool=ev.tool, command=command, paths=ev.paths)
            case "tool_result":
                called = self._commands.pop(ev.tool_call_id or "", None)
                runtime(
                    "tool_result",
                    tool=ev.tool,
                    command=called,
                    output=_tail(ev.output or "", OUTPUT_TAIL_BYTES),
                    is_error=ev.is_error,
                )
            case "output":
                runtime("output", text=_head(ev.text or "", TEXT_LIMIT))
            case "error":
                runtime("error", text=_head(ev.text or "error", TEXT_LIMIT), is_error=True)
            case "condensation":
                text = _head(ev.text or "context compaction", TEXT_LIMIT)
                runtime("condensation", text=text, is_error=ev.is_error)
