"""What an ACP agent tells its adapter (:mod:`actors.child.acp`): its session updates (the
turn's text, tool calls, reported cost) become runtime events, and its permission requests
become Shepherd approvals.

Rules (the adapter's module says the whole protocol):
- ``tool_call``: a tool call starting, its title (or kind) and its raw input as compact JSON
  as the command; ``tool_result``: its status ``completed`` or ``failed``, the command of its
  call, its text content's tail; ``output``: the agent's message text of a turn, joined,
  published at the turn's end. Everything is bounded as :mod:`actors.child.pi.turns` bounds
  Pi's events.
- Usage: the growth of the session's reported cost (``usage_update``, US dollars only) is a
  ``usage`` event.
- ``session/request_permission`` runs ``shepherd-child approve-request`` with the call's title
  and input (the task goes ``waiting``; the parent decides); approved: ``allow_once`` (else
  ``allow_always``); denied: ``reject_once`` (else ``reject_always``, else ``cancelled``). A
  request during a cancel, or withdrawn by one, is answered ``cancelled``. With
  ``spawn --approve KIND:GLOB`` rules (:mod:`protocol.calls.gates`: the call's kind, its
  command, path or title), only a request that matches one goes to the parent; any other is
  allowed at once, and the parent's log says so.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import sys
from typing import Any

from acp import RequestError
from acp.schema import (
    AgentMessageChunk,
    AllowedOutcome,
    DeniedOutcome,
    PermissionOption,
    RequestPermissionResponse,
    TextContentBlock,
    ToolCallProgress,
    ToolCallStart,
    ToolCallUpdate,
    UsageUpdate,
)

from actors.child.acp_options import AcpOptions
from actors.runtime.procs import OUTPUT_TAIL_BYTES
from protocol.calls.gates import matching, subject_of
from protocol.core.limits import MAX_BUDGET_COST, MAX_EDIT_PATHS

__all__ = [
    "APPROVAL_TEXT_LIMIT",
    "COMMAND_LIMIT",
    "TEXT_LIMIT",
    "AgentClient",
    "AgentSaid",
    "head",
]

#: The approval's text (a tool call's title and input) is cut to this.
APPROVAL_TEXT_LIMIT = 2000
#: Text and tool commands published beyond this are cut (an envelope is at most 64 KiB; the
#: same bounds as Pi's events)
TEXT_LIMIT = 16 * 1024
COMMAND_LIMIT = 8 * 1024


def head(text: str, limit: int) -> str:
    data = text.encode()
    if len(data) <= limit:
        return text
    return data[:limit].decode(errors="ignore") + "\n[… cut by shepherd …]"


def _tail(text: str, limit: int) -> str:
    data = text.encode()
    if len(data) <= limit:
        return text
    return "[… earlier output cut …]\n" + data[-limit:].decode(errors="ignore")


def _tool_text(content: object) -> str:
    """The text parts of a tool call's content, joined."""
    if not isinstance(content, list):
        return ""
    parts: list[str] = []
    for item in content:
        inner = getattr(item, "content", None)
        text = getattr(inner, "text", None)
        if isinstance(text, str):
            parts.append(text)
    return "\n".join(parts)


def _compact(value: object) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)


def _chosen(options: list[PermissionOption], *, approved: bool) -> RequestPermissionResponse | None:
    """The agent's option for the decision: allow (or reject) once, else always; None when
    it offered neither."""
    kinds = ("allow_once", "allow_always") if approved else ("reject_once", "reject_always")
    for kind in kinds:
        for option in options:
            if option.kind == kind:
                return RequestPermissionResponse(
                    outcome=AllowedOutcome(outcome="selected", option_id=option.option_id)
                )
    return None


class AgentSaid:
    """The adapter's half that reads what the agent says (mixed into ``AcpAdapter``, whose
    state it uses: ``_said``, ``_commands``, ``_titles``, ``_cost_seen``, ``_cancelling``,
    ``_closing``, ``_environ``, ``_approval``, ``_approval_cancelled``, ``_opts``,
    ``_session_id``, ``_log`` and ``_publish``)."""

    _said: list[str]
    _commands: dict[str, str]
    _titles: dict[str, str]
    _cost_seen: float
    _cancelling: bool
    _closing: bool
    _environ: dict[str, str]
    _approval: Any
    _approval_cancelled: asyncio.Event
    _opts: AcpOptions
    _session_id: str | None
    _log: Any

    def _publish(self, event: Any, **fields: Any) -> None:
        raise NotImplementedError

    def _flush_said(self) -> None:
        text = "".join(self._said).strip()
        self._said = []
        if text:
            self._publish("output", text=head(text, TEXT_LIMIT))

    # ------------------------------------------------------------------ the agent's updates

    def _on_update(self, update: Any) -> None:
        match update:
            case AgentMessageChunk(content=TextContentBlock(text=text)):
                if sum(map(len, self._said)) < TEXT_LIMIT * 2:
                    self._said.append(text)
            case ToolCallStart():
                raw = update.raw_input
                command = head(_compact(raw) if raw is not None else update.title, COMMAND_LIMIT)
                self._commands[update.tool_call_id] = command
                tool = update.kind or update.title
                self._titles[update.tool_call_id] = tool
                paths = _written(update.kind, update.locations)
                self._publish("tool_call", tool=tool, command=command, paths=paths)
            case ToolCallProgress(status="completed" | "failed" as status):
                call = update.tool_call_id
                output = _tool_text(update.content)
                if not output and update.raw_output is not None:
                    output = _compact(update.raw_output)
                self._publish(
                    "tool_result",
                    tool=self._titles.pop(call, update.kind or update.title or ""),
                    command=self._commands.pop(call, None),
                    output=_tail(output, OUTPUT_TAIL_BYTES),
                    is_error=status == "failed",
                )
            case UsageUpdate(cost=cost) if cost is not None and cost.currency.upper() == "USD":
                amount = cost.amount
                if math.isfinite(amount) and amount > self._cost_seen:
                    spent = min(amount - self._cost_seen, MAX_BUDGET_COST)
                    self._cost_seen = amount
                    self._publish("usage", tokens=0, cost=spent)
            case _:
                pass

    async def _permission(
        self, tool_call: ToolCallUpdate, options: list[PermissionOption]
    ) -> RequestPermissionResponse:
        cancelled = RequestPermissionResponse(outcome=DeniedOutcome(outcome="cancelled"))
        if self._cancelling or self._closing:
            return cancelled
        what = tool_call.title or tool_call.kind or "a tool call"
        raw = tool_call.raw_input
        if self._opts.gates:
            kind = tool_call.kind or self._titles.get(tool_call.tool_call_id) or "other"
            subject = subject_of(raw, tool_call.title)
            if matching(self._opts.gates, kind, subject) is None:
                said = head(f"{kind}: {subject}", APPROVAL_TEXT_LIMIT)
                self._publish("output", text=f"[shepherd] allowed, no --approve rule: {said}")
                return _chosen(options, approved=True) or cancelled
        text = f"The agent asks to run {what}" + (f": {_compact(raw)}" if raw is not None else "")
        text = head(text, APPROVAL_TEXT_LIMIT)
        self._publish("output", text=f"[shepherd] approval asked: {text}")
        approved = await self._ask_parent(text)
        if approved is None:  # withdrawn by a cancel (or the approval could not run)
            return cancelled
        return _chosen(options, approved=approved) or cancelled

    async def _ask_parent(self, text: str) -> bool | None:
        """``shepherd-child approve-request``: True approved, False denied, None withdrawn."""
        self._approval_cancelled.clear()
        env = self._environ
        child_bin = env.get("SHEPHERD_CHILD_BIN")
        argv = [child_bin] if child_bin else [sys.executable, "-m", "actors.child.entry"]
        proc = await asyncio.create_subprocess_exec(
            *argv,
            "approve-request",
            "--json",
            "--",
            text,
            env=env,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.DEVNULL,
        )
        self._approval = proc
        waited = asyncio.create_task(proc.communicate())
        withdrawn = asyncio.create_task(self._approval_cancelled.wait())
        try:
            await asyncio.wait({waited, withdrawn}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            self._approval = None
        if not waited.done():
            withdrawn.cancel()
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            await waited
            self._publish("output", text="[shepherd] approval withdrawn: the turn was cancelled")
            return None
        withdrawn.cancel()
        out, _ = waited.result()
        if proc.returncode not in (0, 1):
            self._publish("error", text="the approval request failed", is_error=True)
            return None
        with contextlib.suppress(ValueError):
            decision = json.loads(out or b"{}")
            if isinstance(decision, dict) and isinstance(decision.get("approved"), bool):
                return bool(decision["approved"])
        return proc.returncode == 0


class AgentClient:
    """The ACP client side: the agent's requests and notifications (loop thread)."""

    def __init__(self, adapter: AgentSaid) -> None:
        self._a = adapter

    def _foreign(self, session_id: str) -> bool:
        """Is ``session_id`` another than the agent's one session (once that is open)?"""
        ours = self._a._session_id
        return ours is not None and session_id != ours

    async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
        if self._foreign(session_id):
            self._a._log.warning("an update for session {!r:.80} dropped: not its own", session_id)
            return
        self._a._on_update(update)

    async def request_permission(
        self,
        session_id: str,
        tool_call: ToolCallUpdate,
        options: list[PermissionOption],
        **kwargs: Any,
    ) -> RequestPermissionResponse:
        if self._foreign(session_id):
            raise RequestError.invalid_params(
                {"sessionId": session_id[:80], "reason": "not this client's session"}
            )
        return await self._a._permission(tool_call, options)

    async def ext_method(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        return {}

    async def ext_notification(self, method: str, params: dict[str, Any]) -> None:
        return None

    def on_connect(self, conn: Any) -> None:
        return None


#: the kinds of ACP tool calls that change the files at their locations
_WRITING_KINDS = frozenset({"edit", "delete", "move"})


def _written(kind: str | None, locations: Any) -> tuple[str, ...]:
    """The files an ACP tool call changes: its locations' paths, for an edit, delete or move
    (at most :data:`~protocol.core.limits.MAX_EDIT_PATHS`)."""
    if kind not in _WRITING_KINDS or not locations:
        return ()
    paths = [p for loc in locations if isinstance(p := getattr(loc, "path", None), str)]
    return tuple(p for p in paths if 0 < len(p) <= 1024)[:MAX_EDIT_PATHS]
