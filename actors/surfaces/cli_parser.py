"""The ``shepherd`` argument parser: every command, its arguments and its help.

Rules: the session's operations are generated from the operation table (:mod:`protocol.ops`):
their positional arguments, options and help are never written here; only the commands that
are not operations (``serve``, ``demo``, ``top``, ``notifications``, ``tools``, ``tool``,
``mcp``, ``a2a``; ``watchdog`` from :mod:`actors.surfaces.watchdog_cli`) are. Every command takes
``--json`` and, when it talks to a session, ``--session DIR``. Parsing never prints or exits: a
usage error raises ``invalid_argument``, so :func:`actors.surfaces.cli.main` reports it like
every other error (as JSON under ``--json``). Nothing here touches a session.
"""

from __future__ import annotations

import argparse
import functools
import sys
from collections.abc import Callable
from typing import Any, NoReturn

from actors.runtime import command_wire
from actors.surfaces.cli_table import add_common as _add_common
from actors.surfaces.cli_table import add_operation
from actors.surfaces.listening import add_listen_options
from protocol import ops
from protocol.core.errors import InvalidArgument

__all__ = ["build_parser", "wants_json"]


class _Parser(argparse.ArgumentParser):
    """argparse that raises ``invalid_argument`` instead of printing usage and exiting, so a
    usage error is reported like every other error (as JSON under ``--json``)."""

    def error(self, message: str) -> NoReturn:
        raise InvalidArgument(f"{message} (see '{self.prog} --help')")


def _add_top(sub: Any) -> None:
    p = sub.add_parser("top", help="a live view of the session (refreshes from status snapshots)")
    p.add_argument(
        "--interval", type=float, default=1.0, help="seconds between snapshots (0.1 to 3600)"
    )
    p.add_argument("--once", action="store_true", help="print one frame and exit")
    _add_common(p)


def _add_notifications(sub: Any) -> None:
    p = sub.add_parser("notifications", help="the parent's notifications as JSON lines")
    p.add_argument("--follow", action="store_true", help="keep printing new ones")
    p.add_argument(
        "--format",
        choices=["json", "text", "rendered"],
        default="json",
        help=(
            "json: the lines as stored (default); text: each rendered as a parent model reads "
            "it (call:/return:/details: for completions), a blank line after each; rendered: "
            'the JSON lines, each with a "rendered" field holding that text'
        ),
    )
    _add_common(p)


#: the commands that are not operations, listed after the operation they follow in ``--help``
_AFTER = {"status": ("top", _add_top), "fail": ("notifications", _add_notifications)}


def _add_serve(sub: Any) -> None:
    p = sub.add_parser("serve", help="run a session in the foreground")
    p.add_argument("--session-dir", metavar="DIR", help="where the session's records live")
    p.add_argument(
        "--transport",
        metavar="nats|tls://HOST:PORT[,HOST:PORT...]",
        help="carry the session's envelopes on these NATS JetStream servers (extra "
        "shepherd[nats]; at most 16 servers) instead of the file mailbox; tls://HOST:PORT"
        "[,...] connects to every server over TLS only",
    )
    _add_nats_tls(p)
    p.add_argument(
        "--journal",
        choices=["file", "nats"],
        help="where the journal and the record of delivery live: file (the session directory, "
        "the default) or nats (the --transport servers, so the session can be resumed on "
        "another host)",
    )
    p.add_argument(
        "--resume",
        metavar="SESSION_ID",
        help="resume this session from the NATS servers' records (with --journal nats and "
        "--transport; --session-dir is a directory of this host)",
    )
    p.add_argument(
        "--nats-auth",
        metavar="DIR",
        help="with --transport nats:// or tls://: connect as the NATS users of the authority in "
        "DIR (python -m actors.transports.nats.auth DIR), each agent as its own user, whose "
        "rights the servers enforce",
    )
    p.add_argument("--json", action="store_true", help="notifications as JSON lines")
    p.add_argument("--verbose", action="store_true", help="also print lifecycle changes")
    p.add_argument(
        "--recover",
        action="store_true",
        help="on an existing session: start again the agents whose processes are gone and "
        "hand them their open tasks (marked resumed, with their history)",
    )
    p.add_argument(
        "--otel",
        action="store_true",
        help="send one trace per task with OpenTelemetry (extra shepherd[otel]; OTLP to "
        "OTEL_EXPORTER_OTLP_ENDPOINT, default http://localhost:4318)",
    )
    # budgets: the session's, over every task (the settings' budget_tokens / budget_cost)
    p.add_argument(
        "--budget-tokens", type=int, metavar="N", help="the session's budget of tokens (1-10^12)"
    )
    p.add_argument(
        "--budget-cost",
        type=float,
        metavar="USD",
        help="the session's budget of cost, US dollars (at most 1000000)",
    )
    # admission: how many tasks are handed to agents at once (the settings' max_running)
    p.add_argument(
        "--max-running",
        type=int,
        metavar="N",
        help="hand at most N tasks to agents at once; the rest wait, queued (1-1000000)",
    )
    p.add_argument(
        "--max-running-per-provider",
        action="append",
        metavar="P=N",
        help="at most N running tasks for agents of model provider P (repeat per provider)",
    )


def _add_nats_tls(p: Any) -> None:
    p.add_argument(
        "--nats-ca",
        metavar="FILE",
        help="with --transport tls://: the PEM bundle of the CA that signed the servers' "
        "certificates (default: the system's trust store); host names are always verified",
    )
    p.add_argument(
        "--nats-cert",
        metavar="FILE",
        help="with --transport tls:// and --nats-key: this client's PEM certificate, for "
        "servers that verify their clients (mutual TLS)",
    )
    p.add_argument(
        "--nats-key",
        metavar="FILE",
        help="the private key of --nats-cert (PEM, readable by its owner only)",
    )


def _add_node(sub: Any) -> None:
    p = sub.add_parser("node", help="start the agents sessions place on this host (over NATS)")
    p.add_argument(
        "--transport",
        required=True,
        metavar="nats|tls://HOST:PORT[,HOST:PORT...]",
        help="the NATS servers of the sessions that place agents here (tls://... for TLS)",
    )
    _add_nats_tls(p)
    p.add_argument("--name", required=True, help="this node's name (spawn --node NAME)")
    p.add_argument("--dir", metavar="DIR", help="its agents' files (default: state dir/nodes/NAME)")
    p.add_argument(
        "--nats-creds",
        metavar="FILE",
        help="log in as this node's NATS user (0600; minted by the session's authority: "
        "python -m actors.transports.nats.auth DIR --node NAME)",
    )
    p.add_argument(
        "--max-running",
        metavar="N",
        help="each session hands at most N tasks at once to the agents it placed on this node; "
        "the rest wait in its queue (1-1000000)",
    )
    p.add_argument("--json", action="store_true", help="the ready line as JSON")


def _add_demo(sub: Any) -> None:
    p = sub.add_parser("demo", help="the canonical scout/planner scenario, told as it happens")
    p.add_argument("--json", action="store_true", help="the story as JSON lines")
    p.add_argument("--simulated", action="store_true", help="run it in the simulation instead")
    p.add_argument("--seed", type=int, default=1, help="simulation seed (with --simulated)")
    p.add_argument(
        "--loop",
        action="store_true",
        help="a scripted agent stuck in a loop, caught by the watchdog (simulated)",
    )
    p.add_argument(
        "--agents",
        choices=["scripted", "pi"],
        default="scripted",
        help="pi: two real Pi agents driven by scripted model servers",
    )


def _add_tools(sub: Any) -> None:
    p = sub.add_parser("tools", help="the model-facing tool schemas")
    p.add_argument("--child", action="store_true", help="the child tools instead")
    p.add_argument("--json", action="store_true", help="print the schemas as JSON")


def _add_tool(sub: Any) -> None:
    p = sub.add_parser(
        "tool",
        help="run one parent tool call by name (what the Pi parent extension runs)",
        description=(
            "The arguments are validated against the tool's schema (`shepherd tools --json`), "
            "path fields are made absolute against this directory, and the tool's operation "
            "runs in the session: the same path as the MCP server's tool calls."
        ),
    )
    p.add_argument("name", help="the tool's name, e.g. shepherd_delegate")
    p.add_argument(
        "--args",
        metavar="JSON",
        default="{}",
        help="the arguments as one JSON object ('-' reads it from standard input)",
    )
    _add_common(p)


def _add_mcp(sub: Any) -> None:
    p = sub.add_parser("mcp", help="an MCP server (stdio) for a running session")
    p.add_argument("--session", metavar="DIR", help="the session directory")
    p.add_argument("--json", action="store_true", help="accepted; MCP always speaks JSON")
    p.add_argument(
        "--client",
        metavar="NAME",
        help="whose notifications cursor to continue (default: one per session)",
    )


def _add_a2a(sub: Any) -> None:
    p = sub.add_parser(
        "a2a",
        help="an A2A server (HTTP, JSON-RPC) for a running session",
        description=(
            "Serves the running session over the A2A protocol v1.0 (the a2a extra: pip install "
            "'shepherd[a2a]') until SIGTERM or SIGINT. Prints its URL and a bearer token made "
            "now (also written, mode 0600, to a2a.token in the session directory); every "
            "request needs the token."
        ),
    )
    add_listen_options(p)


def _add_web(sub: Any) -> None:
    p = sub.add_parser(
        "web",
        help="a live board of the session in the browser",
        description=(
            "Serves the running session's board (agents in lanes, what waits on the parent, "
            "the parent's actions) until SIGTERM or SIGINT. Prints the page's URL with a token "
            "made now; every request needs the token."
        ),
    )
    add_listen_options(p)


def _add_watchdog(sub: Any) -> None:
    from actors.surfaces.watchdog_cli import add_watchdog_parser

    add_watchdog_parser(sub)


def _commands() -> list[tuple[str, Callable[[Any], None]]]:
    """Every command and what adds it, in the order ``--help`` lists them."""
    out: list[tuple[str, Callable[[Any], None]]] = [
        ("serve", _add_serve),
        ("node", _add_node),
        ("demo", _add_demo),
    ]
    for op in ops.PARENT:
        if op.help:  # an operation without a command has no help
            out.append((op.command, functools.partial(add_operation, op=op)))
        if op.name in _AFTER:
            out.append(_AFTER[op.name])
    out += [
        ("tools", _add_tools),
        ("tool", _add_tool),
        ("mcp", _add_mcp),
        ("a2a", _add_a2a),
        ("web", _add_web),
    ]
    return [*out, ("watchdog", _add_watchdog)]


def build_parser(argv: list[str] | None = None) -> argparse.ArgumentParser:
    """The ``shepherd`` parser (raises ``invalid_argument`` on a usage error). When ``argv``
    starts with a command's name, only that command is added: a call pays for building its own
    command, not the thirty others (what it parses and prints is the same, since nothing
    reaches the top level but the command's name); otherwise every command is."""
    parser = _Parser(prog="shepherd", description="Supervise a team of agents.")
    sub = parser.add_subparsers(dest="command", required=True)
    commands = _commands()
    words = sys.argv[1:] if argv is None else argv
    chosen = [c for c in commands if words and c[0] == words[0]]
    for _, add in chosen or commands:
        add(sub)
    return parser


def wants_json(argv: list[str] | None) -> bool:
    """Whether ``--json`` was asked for (before any ``--``): a usage error is reported in the
    format asked for even though the parser could not finish."""
    return command_wire.wants_json(sys.argv[1:] if argv is None else argv)
