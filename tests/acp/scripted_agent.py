"""An ACP agent built with the SDK's agent side, following a script: the edge cases of the
``acp`` adapter's tests (crashes, malformed frames, a permission request during a cancel).

Run as ``python scripted_agent.py SCRIPT.json``. The script is a list of turns, one per prompt,
each a list of steps; every prompt's text is appended to ``SCRIPT.json.prompts`` (one JSON
string a line) and every step's outcome to ``SCRIPT.json.log``. Steps::

    {"say": TEXT}                         an agent message chunk
    {"say": TEXT, "session": ID}          ... in another session's name (a hostile update)
    {"tool": TITLE, "input": {...}, "output": TEXT, "failed": false}
                                          a tool call starting, then its result
    {"shell": [ARGV...]}                  run a command (e.g. shepherd-child done ...)
    {"mcp": TOOL, "arguments": {...}}     call a tool of the client's "shepherd" MCP server
    {"permission": TITLE, "kind": KIND}   ask the client (KIND optional); logs the outcome
                                          ("session": ID: in another session's name; an
                                          error is logged as {"permission_error": CODE})
    {"wait_cancel": true}                 wait for session/cancel, then end "cancelled"
    {"cost": USD}                         a usage_update with the session's cost so far
    {"tokens": N}                         the prompt response's usage
    {"crash": CODE}                       exit at once
    {"garbage": TEXT}                     write TEXT as a raw line to stdout (malformed frame)
    {"huge": N}                           write a line of N bytes to stdout (no message)
    {"close_output": true}                close stdout (logs its pid), then live on
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import uuid
from typing import Any

from acp import (
    PROTOCOL_VERSION,
    RequestError,
    run_agent,
    start_tool_call,
    text_block,
    update_agent_message,
    update_tool_call,
)
from acp.schema import (
    AgentCapabilities,
    Cost,
    Implementation,
    InitializeResponse,
    LoadSessionResponse,
    NewSessionResponse,
    PermissionOption,
    PromptResponse,
    ToolCallUpdate,
    Usage,
    UsageUpdate,
)

SCRIPT = sys.argv[1]


def log(line: Any) -> None:
    with open(SCRIPT + ".log", "a", encoding="utf-8") as f:
        f.write(json.dumps(line) + "\n")


class ScriptedAgent:
    def __init__(self) -> None:
        with open(SCRIPT, encoding="utf-8") as f:
            self.turns: list[list[dict[str, Any]]] = json.load(f)
        self.conn: Any = None
        self.cancelled = asyncio.Event()
        self.mcp_servers: list[Any] = []

    def on_connect(self, conn: Any) -> None:
        self.conn = conn

    async def initialize(self, protocol_version: int, **kwargs: Any) -> InitializeResponse:
        return InitializeResponse(
            protocol_version=PROTOCOL_VERSION,
            agent_capabilities=AgentCapabilities(load_session=True),
            agent_info=Implementation(name="scripted-acp", version="1.0"),
        )

    async def new_session(
        self, cwd: str, mcp_servers: list[Any] | None = None, **kwargs: Any
    ) -> NewSessionResponse:
        self.mcp_servers = list(mcp_servers or [])
        log({"mcp_servers": [server.name for server in self.mcp_servers]})
        sid = uuid.uuid4().hex
        log({"new_session": sid, "cwd": cwd})
        return NewSessionResponse(session_id=sid)

    async def load_session(self, cwd: str, session_id: str, **kwargs: Any) -> LoadSessionResponse:
        log({"load_session": session_id})
        return LoadSessionResponse()

    async def cancel(self, session_id: str, **kwargs: Any) -> None:
        log({"cancel": session_id})
        self.cancelled.set()

    async def call_tool(self, name: str, arguments: dict[str, Any]) -> str:
        """Call a tool of the client's ``shepherd`` MCP server, as an agent does."""
        from mcp.client.session import ClientSession
        from mcp.client.stdio import StdioServerParameters, stdio_client

        server = next(s for s in self.mcp_servers if s.name == "shepherd")
        params = StdioServerParameters(
            command=server.command,
            args=list(server.args),
            env={v.name: v.value for v in server.env},
        )
        async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            result = await session.call_tool(name, arguments)
        return "".join(getattr(part, "text", "") for part in result.content)

    async def prompt(self, session_id: str, prompt: list[Any], **kwargs: Any) -> PromptResponse:
        text = "".join(getattr(block, "text", "") for block in prompt)
        with open(SCRIPT + ".prompts", "a", encoding="utf-8") as f:
            f.write(json.dumps(text) + "\n")
        self.cancelled.clear()
        steps: list[dict[str, Any]] = self.turns.pop(0) if self.turns else [{"say": "none"}]
        tokens = 0
        for step in steps:
            if "say" in step:
                await self.conn.session_update(
                    step.get("session", session_id), update_agent_message(text_block(step["say"]))
                )
            elif "tool" in step:
                call = uuid.uuid4().hex
                await self.conn.session_update(
                    session_id,
                    start_tool_call(
                        call, step["tool"], kind="execute", raw_input=step.get("input")
                    ),
                )
                await self.conn.session_update(
                    session_id,
                    update_tool_call(
                        call,
                        status="failed" if step.get("failed") else "completed",
                        raw_output={"output": step.get("output", "")},
                    ),
                )
            elif "mcp" in step:
                arguments: dict[str, Any] = step.get("arguments") or {}
                log({"mcp": await self.call_tool(str(step["mcp"]), arguments)})
            elif "shell" in step:
                done = subprocess.run(step["shell"], capture_output=True, text=True, check=False)
                log({"shell": done.returncode, "stdout": done.stdout, "stderr": done.stderr})
            elif "permission" in step and "session" in step:
                try:
                    await self.conn.request_permission(
                        session_id=step["session"],
                        tool_call=ToolCallUpdate(
                            tool_call_id=uuid.uuid4().hex, title=step["permission"]
                        ),
                        options=[PermissionOption(option_id="y", name="Allow", kind="allow_once")],
                    )
                    log({"permission_error": None})
                except RequestError as exc:
                    log({"permission_error": exc.code})
            elif "permission" in step:
                answer = await self.conn.request_permission(
                    session_id=session_id,
                    tool_call=ToolCallUpdate(
                        tool_call_id=uuid.uuid4().hex,
                        title=step["permission"],
                        kind=step.get("kind"),
                    ),
                    options=[
                        PermissionOption(option_id="yes", name="Allow", kind="allow_once"),
                        PermissionOption(option_id="no", name="Reject", kind="reject_once"),
                    ],
                )
                outcome = answer.outcome
                log({"permission": getattr(outcome, "option_id", None) or outcome.outcome})
            elif "wait_cancel" in step:
                await self.cancelled.wait()
                return PromptResponse(stop_reason="cancelled")
            elif "cost" in step:
                await self.conn.session_update(
                    session_id,
                    UsageUpdate(
                        session_update="usage_update",
                        used=1,
                        size=100,
                        cost=Cost(amount=float(step["cost"]), currency="USD"),
                    ),
                )
            elif "tokens" in step:
                tokens = int(step["tokens"])
            elif "close_output" in step:
                log({"closed_output": os.getpid()})
                os.close(1)
                await asyncio.sleep(3600)
            elif "crash" in step:
                os._exit(int(step["crash"]))
            elif "garbage" in step:
                sys.stdout.buffer.write(step["garbage"].encode() + b"\n")
                sys.stdout.buffer.flush()
            elif "huge" in step:
                # whole, before anything else is written: the SDK's writer made stdout
                # non-blocking, and a partial write would glue the next frame to this line
                was_blocking = os.get_blocking(1)
                os.set_blocking(1, True)
                try:
                    sys.stdout.buffer.write(b"x" * int(step["huge"]) + b"\n")
                    sys.stdout.buffer.flush()
                finally:
                    os.set_blocking(1, was_blocking)
        usage = Usage(total_tokens=tokens, input_tokens=tokens, output_tokens=0) if tokens else None
        return PromptResponse(stop_reason="end_turn", usage=usage)


if __name__ == "__main__":
    asyncio.run(run_agent(ScriptedAgent()))  # type: ignore[arg-type]
