"""The child tools an ACP agent gets as an MCP server (``python -m actors.child.acp_tools``,
passed to the agent in ``session/new`` / ``session/load`` as a stdio MCP server named
``shepherd``): ``shepherd_done`` and ``shepherd_message``, so the explicit-done rule holds for
any ACP agent (its turn ending is never a task's completion; calling ``shepherd_done`` is).

Rules:
- Each tool runs the matching child command (``shepherd-child done`` / ``message``, with
  ``--json``) in this server's environment, which the adapter fills with the agent's
  ``SHEPHERD_*`` variables, so the envelope goes out as this agent, checked by the same op
  table as the command line's. The command's answer (or its error) is the tool's result.
- A call may take at most :data:`CALL_TIMEOUT_S`; what it answers is bounded to
  :data:`ANSWER_LIMIT` characters.
"""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Literal

from mcp.server.mcpserver import MCPServer

__all__ = ["ANSWER_LIMIT", "CALL_TIMEOUT_S", "main", "server"]

CALL_TIMEOUT_S = 120.0
ANSWER_LIMIT = 8000

server = MCPServer(
    name="shepherd",
    instructions=(
        "You are an agent supervised by Shepherd. When the task is finished, call shepherd_done "
        "(completed, blocked or failed, with a summary): ending your turn does not finish it. "
        "Use shepherd_message to ask or tell the parent something."
    ),
)


def _run(command: str, options: list[str], words: list[str]) -> str:
    child_bin = os.environ.get("SHEPHERD_CHILD_BIN")
    argv = [child_bin] if child_bin else [sys.executable, "-m", "actors.child.entry"]
    try:
        done = subprocess.run(
            [*argv, command, "--json", *options, *(["--", *words] if words else [])],
            capture_output=True,
            text=True,
            timeout=CALL_TIMEOUT_S,
            check=False,
            stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired:
        return f"error: no answer from the shepherd within {CALL_TIMEOUT_S:g} s"
    answer = (done.stdout or done.stderr).strip()
    if done.returncode != 0:
        answer = f"error: {answer}"
    return answer[:ANSWER_LIMIT]


@server.tool(
    description=(
        "Finish the current task: status completed, blocked or failed, with a summary of what "
        "was done. Ending your turn does not finish the task; this does."
    )
)
def shepherd_done(status: Literal["completed", "blocked", "failed"], summary: str) -> str:
    return _run("done", [f"--status={status}", f"--summary={summary}"], [])


@server.tool(description="Send a message to the parent (target 'shepherd') or to a peer agent.")
def shepherd_message(message: str, target: str = "shepherd", expects_reply: bool = False) -> str:
    return _run("message", ["--expects-reply"] if expects_reply else [], [target, message])


def main() -> None:
    server.run("stdio")


if __name__ == "__main__":
    main()
