"""The child tools an ACP agent gets as an MCP server (``python -m actors.child.acp_tools``,
passed to the agent in ``session/new`` / ``session/load`` as a stdio MCP server named
``shepherd``): ``shepherd_done`` and ``shepherd_message``, so the explicit-done rule holds for
any ACP agent (its turn ending is never a task's completion; calling ``shepherd_done`` is).
An agent spawned with ``--role watchdog`` (its options' ``role``) also gets the watchdog
agent's tools, as a Pi agent does: ``watchdog_status``, ``watchdog_read_events``,
``watchdog_detect_stuck`` and ``watchdog_alert_main`` (``shepherd-child watchdog-*``).

Rules:
- Each tool runs the matching child command (``shepherd-child done`` / ``message``, with
  ``--json``) in this server's environment, which the adapter fills with the agent's
  ``SHEPHERD_*`` variables, so the envelope goes out as this agent, checked by the same op
  table as the command line's. The command's answer (or its error) is the tool's result.
- A call may take at most :data:`CALL_TIMEOUT_S`; what it answers is bounded to
  :data:`ANSWER_LIMIT` characters.
"""

from __future__ import annotations

import json
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


def _role() -> str:
    """This agent's role, from its options (the parent checked them)."""
    try:
        options = json.loads(os.environ.get("SHEPHERD_AGENT_OPTIONS") or "{}")
    except ValueError:
        return "worker"
    return str(options.get("role", "worker")) if isinstance(options, dict) else "worker"


def _watchdog_tools() -> None:
    """A watchdog agent's tools (see the module rules); the parent answers them only for one.
    Their bounds (an agent's name or id, a limit of 1-200, an alert of 1-4000 characters) are
    checked by ``shepherd-child``: a value out of them is its typed error, as the result."""

    @server.tool(
        description=(
            "The watchdog's state (enabled, paused, alert mode, alerts sent) and the agents it "
            "watches, the most recently active first (at most 100)."
        )
    )
    def watchdog_status() -> str:
        return _run("watchdog-status", [], [])

    @server.tool(
        description=(
            "An agent's most recent tool events as the watchdog keeps them: normalised command, "
            "output hash and a short preview (never whole outputs). agent: its name or id; "
            "limit: how many of the newest (1-200, default 20)."
        )
    )
    def watchdog_read_events(agent: str, limit: int = 20) -> str:
        return _run("watchdog-events", [f"--limit={limit}"], [agent])

    @server.tool(
        description=(
            "The stuck-loop detector's verdict on an agent (likely_stuck, confidence, reasons, "
            "evidence), or, with agent empty, on every agent: the ones above none. Changes nothing."
        )
    )
    def watchdog_detect_stuck(agent: str = "") -> str:
        return _run("watchdog-stuck", [], [agent] if agent else [])

    @server.tool(
        description=(
            "Send the parent a [Watchdog Alert] about an agent that looks stuck, in your words; "
            "the parent also gets the detector's verdict. Nothing is killed or steered. agent: "
            "its name or id; text: the alert (1-4000 characters)."
        )
    )
    def watchdog_alert_main(agent: str, text: str) -> str:
        return _run("watchdog-alert", [], [agent, text])


if _role() == "watchdog":
    _watchdog_tools()


def main() -> None:
    server.run("stdio")


if __name__ == "__main__":
    main()
