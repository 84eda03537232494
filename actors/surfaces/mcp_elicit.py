"""Approval requests put to an MCP parent's user at once, as MCP elicitations.

Rules:
- Only for a client that declared the ``elicitation`` capability in ``initialize``; any other
  client gets approval requests as notifications only (``approval_requested``, from
  ``shepherd_notifications``) and answers with ``shepherd_approve`` / ``shepherd_deny``.
- A loop beside the server follows the session's notifications with a cursor of its own
  (``<client>.approvals``: each approval request is put to the user once per client name, also
  across restarts of the server) and, for each ``approval_requested``, sends one form
  elicitation (``approve``: yes/no, ``text``: the note or the reason). Accepted, it approves or
  denies the request (a denial without text gets the reason ``denied by the user``);
  declined, it denies it (``declined by the user``); cancelled or failed, it leaves the
  request pending: the notification path still holds it.
- The elicitation is an extra path, never the only one: an approval already answered another
  way is refused (``invalid_transition``) and only logged.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any, Protocol

import anyio
import anyio.to_thread
import msgspec
from mcp import types

from actors.records.mcp_cursor import CursorStore
from actors.records.session_info import SessionInfo
from actors.runtime.log import logger
from protocol.core.errors import ShepherdError
from protocol.ops.tools import ToolSpec, args_from_tool_call, tool_by_name

if TYPE_CHECKING:
    from mcp.server.session import ServerSession


class _Server(Protocol):
    """What the loop needs of the MCP server (``actors.surfaces.mcp_server.ShepherdMcp``)."""

    client_name: str

    def session(self) -> SessionInfo: ...

    def _run_op(self, spec: ToolSpec, args: msgspec.Struct) -> Any: ...


__all__ = ["SCHEMA", "ApprovalElicitor", "answer_for"]

#: how often the loop looks for new notifications when it found none (seconds)
POLL_S = 0.2

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "approve": {
            "type": "boolean",
            "title": "Approve",
            "description": "Let the agent go on (true) or deny it (false)",
        },
        "text": {
            "type": "string",
            "title": "Note or reason",
            "description": "A note for the agent if you approve, the reason if you deny",
        },
    },
    "required": ["approve"],
}


def answer_for(request_id: str, result: types.ElicitResult) -> tuple[str, dict[str, Any]] | None:
    """The tool call (name, arguments) the user's answer makes; None leaves it pending."""
    if result.action == "decline":
        return "shepherd_deny", {"request_id": request_id, "reason": "declined by the user"}
    if result.action != "accept" or not isinstance(result.content, dict):
        return None
    text = result.content.get("text")
    text = text.strip() if isinstance(text, str) and text.strip() else None
    if result.content.get("approve") is True:
        fields: dict[str, Any] = {"request_id": request_id}
        if text is not None:
            fields["note"] = text
        return "shepherd_approve", fields
    return "shepherd_deny", {"request_id": request_id, "reason": text or "denied by the user"}


class ApprovalElicitor:
    """The loop of the module rules, for one server (one client connection)."""

    def __init__(self, app: _Server) -> None:
        self._app = app
        self._session: ServerSession | None = None
        self._ready = anyio.Event()

    def offer(self, session: ServerSession) -> None:
        """A request arrived on ``session``: start eliciting if its client can answer."""
        if self._session is not None:
            return
        wanted = types.ClientCapabilities(elicitation=types.ElicitationCapability())
        if session.check_client_capability(wanted):
            self._session = session
            self._ready.set()

    async def run(self) -> None:
        await self._ready.wait()
        while True:
            try:
                info = await anyio.to_thread.run_sync(self._app.session)
                store = CursorStore(info.session_dir, f"{self._app.client_name}.approvals")
                batch = await anyio.to_thread.run_sync(store.take, info)
            except (ShepherdError, OSError) as exc:
                logger.debug("approvals: no session to follow yet: {exc}", exc=exc)
                await anyio.sleep(POLL_S * 5)
                continue
            for note in batch.notifications:
                if isinstance(note, dict) and note.get("code") == "approval_requested":
                    await self._ask(note)
            if not batch.more:
                await anyio.sleep(POLL_S)

    async def _ask(self, note: dict[str, Any]) -> None:
        assert self._session is not None
        refs = note.get("refs") or ()
        if not refs:
            return
        request_id = str(refs[0])
        try:
            result = await self._session.elicit_form(str(note.get("text", "")), SCHEMA)
        except Exception as exc:  # the client could not ask: the notification path remains
            logger.warning("approval {id}: elicitation failed: {exc}", id=request_id, exc=exc)
            return
        chosen = answer_for(request_id, result)
        if chosen is None:
            return
        name, fields = chosen
        try:
            spec = tool_by_name("parent", name)
            args = args_from_tool_call(spec, fields)
            await anyio.to_thread.run_sync(functools.partial(self._app._run_op, spec, args))
        except ShepherdError as exc:
            logger.warning(
                "approval {id}: {code}: {msg}", id=request_id, code=exc.code, msg=exc.message
            )
