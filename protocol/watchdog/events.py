"""Watchdog events: what is kept about each tool call, the per-agent window, logical calls.

Rules
-----
* A :class:`ToolEvent` keeps the normalised command, the output hash, a short preview and
  (for typecheck/compile failures) an error signature; never the whole output.
* An *instruction* is a ``message`` event whose source is ``user`` (the parent's delegated
  task, a message from the parent or a peer, a user prompt). The detector only looks at
  events since the last instruction: a new instruction opens a new episode.
* A *rescue message* is a ``message`` whose source is ``watchdog``: the watchdog's rescue
  message reaching the agent (a nudge). It is not an instruction and no rule counts it: an
  agent that goes on with its loop after the nudge is still in the same episode, and its
  counts go on. The episode ends at the agent's first *new* call after the nudge — another
  command, or a success with an output not seen just before (the same command now passing) —
  and a new episode starts with that call (:func:`current_episode`). An instruction
  is not hashed (``output_hash`` None): no rule compares instructions, they only open
  episodes, and normalising and hashing every delegated task's text was a quarter of the
  watchdog's time when thousands of tasks were delegated at once.
* An agent *message* is text the agent itself says (a model's reply, a scripted ``say``).
  Text that is not the agent speaking is ``output``: the lines a command agent's running
  process prints (the ``command`` adapter runs the agent as a process per turn, and its
  stdout is that process's output, not a message to anyone) and the bridge's own notes
  (``[shepherd] ...``). :func:`runtime_kind` makes that call for each runtime event. Output
  is kept for inspection and counts for no rule: it is neither a message nor a tool call.
* A ``condensation`` is the agent's context being summarised (Pi's compaction). It is
  neither progress nor a failure: no rule counts it as a call, a write, a message or an
  error, and it breaks no streak (only the ``condensation_loop`` rule counts condensations).
* :class:`EventWindow` is a bounded ring buffer per agent (``max_events_per_agent``); it keeps
  older events for inspection but remembers where the current episode starts.
* Calls are counted as *logical* calls: a ``tool_call`` and the ``tool_result``/``error`` that
  answers it are one call (matched by ``call_id`` when both carry one, else the oldest open
  call of the same tool, else the oldest open call). A result with no open call is a call of
  its own; a call with no result yet is *pending* and has no output hash.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Sequence
from typing import Final, Literal

import msgspec

from protocol.watchdog.classify import error_signature
from protocol.watchdog.config import WatchdogConfig
from protocol.watchdog.normalize import hash_output, make_preview, render_call

__all__ = [
    "BRIDGE_NOTE_PREFIX",
    "EventKind",
    "EventSource",
    "EventWindow",
    "LogicalCall",
    "ToolEvent",
    "current_episode",
    "is_instruction",
    "is_rescue",
    "make_event",
    "pair_calls",
    "runtime_kind",
    "since_last_instruction",
]

EventKind = Literal["tool_call", "tool_result", "error", "message", "condensation", "output"]
EventSource = Literal["user", "agent", "watchdog"]
TOOL_EVENT_KINDS: Final = frozenset({"tool_call", "tool_result", "error"})

#: how the bridge marks the notes it adds to an agent's output stream
BRIDGE_NOTE_PREFIX: Final = "[shepherd]"
#: adapters whose output is a running process's output, never the agent speaking
PROCESS_OUTPUT_ADAPTERS: Final = frozenset({"command"})


def runtime_kind(adapter: str | None, event: str, text: str | None = None) -> EventKind | None:
    """What one runtime event of an agent is to the watchdog (None: nothing it keeps).

    ``output`` from a ``command`` agent is its process's output, and a bridge note is the
    bridge speaking: neither is an agent message (three identical error lines printed by a
    command in its first second are not a monologue). A tool result's success or failure is
    the caller's to read (``is_error``, ``exit_code``).
    """
    match event:
        case "tool_call" | "tool_result" | "condensation":
            return event
        case "output":
            if adapter in PROCESS_OUTPUT_ADAPTERS:
                return "output"
            if (text or "").startswith(BRIDGE_NOTE_PREFIX):
                return "output"
            return "message"
    return None


class ToolEvent(msgspec.Struct, frozen=True, kw_only=True):
    """One observed event of an agent, reduced to what the detector needs."""

    agent_id: str
    seq: int
    ts: float
    kind: EventKind
    tool: str = ""
    command: str = ""  # normalised command key (empty for messages)
    output_hash: str | None = None  # sha256 of the normalised output / message (no instruction)
    preview: str = ""  # at most max_preview_lines lines
    exit_code: int | None = None
    is_error: bool = False
    source: EventSource = "agent"
    call_id: str | None = None  # pairs a result with its call when the runtime has ids
    error_signature: str | None = None  # typecheck/compile error signature (sha256)
    error_line: str = ""  # the first error line behind error_signature
    blank: bool = False  # message with no text (or result with no output)


def make_event(
    *,
    agent_id: str,
    seq: int,
    ts: float,
    kind: EventKind,
    config: WatchdogConfig,
    tool: str = "",
    command: str | None = None,
    args: object = None,
    output: str | None = None,
    exit_code: int | None = None,
    is_error: bool | None = None,
    source: EventSource = "agent",
    call_id: str | None = None,
) -> ToolEvent:
    """Build a :class:`ToolEvent` from raw material; the raw output is not kept.

    ``error`` events are failed results; a result with a non-zero ``exit_code`` fails too.
    For messages, output and condensations ``output`` is the text (a condensation's summary).
    """
    text = output if output is not None else ""
    failed = (
        is_error
        if is_error is not None
        else (kind == "error" or (exit_code is not None and exit_code != 0))
    )
    key = render_call(tool, command, args) if kind in TOOL_EVENT_KINDS else ""
    hashed = output is not None or kind in {"message", "tool_result", "error"}
    instruction = kind == "message" and source != "agent"  # nothing compares them
    signature = None
    if kind in {"tool_result", "error"} and text:
        signature = error_signature(key, text)
    return ToolEvent(
        agent_id=agent_id,
        seq=seq,
        ts=ts,
        kind=kind,
        tool=tool,
        command=key,
        output_hash=hash_output(text) if hashed and not instruction else None,
        preview=make_preview(text, config.max_preview_lines),
        exit_code=exit_code,
        is_error=failed,
        source=source,
        call_id=call_id,
        error_signature=signature[0] if signature else None,
        error_line=signature[1] if signature else "",
        blank=hashed and not text.strip(),
    )


def is_instruction(event: ToolEvent) -> bool:
    """A new instruction reaches the agent: a ``message`` from the user/parent side."""
    return event.kind == "message" and event.source == "user"


def is_rescue(event: ToolEvent) -> bool:
    """The watchdog's rescue message reaches the agent: a ``message`` from ``watchdog``."""
    return event.kind == "message" and event.source == "watchdog"


def since_last_instruction(events: Sequence[ToolEvent]) -> list[ToolEvent]:
    """Events from the last instruction (included) to the end."""
    for index in range(len(events) - 1, -1, -1):
        if is_instruction(events[index]):
            return list(events[index:])
    return list(events)


def _is_new(call: LogicalCall, before: LogicalCall | None) -> bool:
    """Is ``call`` something new after a nudge, compared with the agent's call before it:
    another command, or a success whose output is not the one before (a failure with a new
    error text is the same action failing again)."""
    if before is None or call.command != before.command:
        return True
    return not call.pending and not call.is_error and call.output_hash != before.output_hash


def current_episode(events: Sequence[ToolEvent]) -> list[ToolEvent]:
    """The episode the rules judge: since the last instruction, and after a rescue message
    from the agent's first new call on (the nudge itself ends nothing)."""
    episode = since_last_instruction(events)
    rescues = [i for i, event in enumerate(episode) if is_rescue(event)]
    if not rescues:
        return episode
    index_of = {event.seq: i for i, event in enumerate(episode)}
    calls = pair_calls(episode)
    start = 0
    for rescue in rescues:
        if rescue < start:
            continue
        before = None
        for call in calls:
            at = index_of[call.seq]
            if at < start:
                continue
            if at < rescue:
                before = call
            elif _is_new(call, before):
                start = at
                break
    return episode[start:]


class EventWindow:
    """A bounded per-agent buffer of events that knows where the current episode starts.

    Plain in-memory value with no IO; owned by one actor.
    """

    def __init__(self, agent_id: str, max_events: int = 200) -> None:
        if max_events < 1:
            raise ValueError("max_events must be at least 1")
        self.agent_id = agent_id
        self._events: deque[ToolEvent] = deque(maxlen=max_events)
        self._appended = 0  # events ever appended
        self._episode_start = 0  # absolute index of the last instruction (0 if none)
        self.started_at: float | None = None  # ts of the episode start

    @property
    def max_events(self) -> int:
        return self._events.maxlen or 0

    @property
    def dropped(self) -> int:
        """Events evicted by the ring buffer bound."""
        return self._appended - len(self._events)

    @property
    def next_seq(self) -> int:
        """A per-window sequence number for the next event (callers may use their own)."""
        return self._appended

    def __len__(self) -> int:
        return len(self._events)

    def append(self, event: ToolEvent) -> None:
        if is_instruction(event) or self.started_at is None:
            self._episode_start = self._appended
            self.started_at = event.ts
        self._events.append(event)
        self._appended += 1

    def extend(self, events: Iterable[ToolEvent]) -> None:
        for event in events:
            self.append(event)

    def events(self) -> list[ToolEvent]:
        """Every retained event, oldest first (for inspection)."""
        return list(self._events)

    def episode(self) -> list[ToolEvent]:
        """Events since the last instruction (the instruction itself first, if retained)."""
        first = self._appended - len(self._events)
        skip = max(self._episode_start - first, 0)
        return list(self._events)[skip:]


class LogicalCall(msgspec.Struct, frozen=True, kw_only=True):
    """A tool call and its result, counted once."""

    seq: int  # seq of the call (or of the result, for a result with no call)
    ts: float
    tool: str
    command: str
    result_seq: int | None = None
    end_ts: float | None = None
    output_hash: str | None = None  # None while pending
    preview: str = ""
    exit_code: int | None = None
    is_error: bool = False
    error_signature: str | None = None
    error_line: str = ""
    blank_output: bool = False

    @property
    def pending(self) -> bool:
        return self.result_seq is None


def _from_result(result: ToolEvent, call: ToolEvent | None) -> LogicalCall:
    origin = call if call is not None else result
    return LogicalCall(
        seq=origin.seq,
        ts=origin.ts,
        tool=origin.tool or result.tool,
        command=origin.command or result.command,
        result_seq=result.seq,
        end_ts=result.ts,
        output_hash=result.output_hash,
        preview=result.preview,
        exit_code=result.exit_code,
        is_error=result.is_error,
        error_signature=result.error_signature,
        error_line=result.error_line,
        blank_output=result.blank,
    )


def pair_calls(events: Iterable[ToolEvent]) -> list[LogicalCall]:
    """Logical calls in call order; messages are skipped."""
    slots: list[LogicalCall] = []
    open_calls: list[tuple[int, ToolEvent]] = []  # (slot index, call event)
    for event in events:
        if event.kind == "tool_call":
            slots.append(
                LogicalCall(seq=event.seq, ts=event.ts, tool=event.tool, command=event.command)
            )
            open_calls.append((len(slots) - 1, event))
        elif event.kind in {"tool_result", "error"}:
            match = _match(open_calls, event)
            if match is None:
                slots.append(_from_result(event, None))
            else:
                slot, call = open_calls.pop(match)
                slots[slot] = _from_result(event, call)
    return slots


def _match(open_calls: list[tuple[int, ToolEvent]], result: ToolEvent) -> int | None:
    if not open_calls:
        return None
    if result.call_id is not None:
        for index, (_, call) in enumerate(open_calls):
            if call.call_id == result.call_id:
                return index
        if any(call.call_id is not None for _, call in open_calls):
            return None  # ids are in use and none matches: an orphan result
    if result.tool:
        for index, (_, call) in enumerate(open_calls):
            if call.tool == result.tool:
                return index
        return None
    return 0
