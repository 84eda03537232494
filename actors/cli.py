"""The ``shepherd`` command line: the parent's operations from any shell.

Every command takes ``--json`` (one JSON object on stdout) and ``--session DIR`` (else
``$SHEPHERD_SESSION``, else the newest live session of this user). Errors exit with status 2
and, with ``--json``, print ``{"error": {"code", "message"}}``.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
from pathlib import Path
from typing import Any

import msgspec

from protocol.errors import ShepherdError

__all__ = ["main"]


def _add_common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--session", metavar="DIR", help="the session directory")


def _parser() -> argparse.ArgumentParser:  # noqa: PLR0915 - one block per command
    parser = argparse.ArgumentParser(prog="shepherd", description="Supervise a team of agents.")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("serve", help="run a session in the foreground")
    p.add_argument("--session-dir", metavar="DIR", help="where the session's records live")
    p.add_argument("--json", action="store_true", help="notifications as JSON lines")
    p.add_argument("--verbose", action="store_true", help="also print lifecycle changes")

    p = sub.add_parser("demo", help="the canonical scout/planner scenario, told as it happens")
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

    p = sub.add_parser("spawn", help="start an agent")
    p.add_argument("name")
    p.add_argument("--adapter", default="scripted", choices=["scripted", "command", "pi-rpc"])
    p.add_argument("--script", metavar="FILE", help="script file (scripted adapter)")
    p.add_argument("--cmd", metavar="TEMPLATE", help="command template with {message}")
    p.add_argument("--resume-cmd", metavar="TEMPLATE", help="template for later turns")
    p.add_argument("--cwd", metavar="DIR", help="the agent's working directory")
    p.add_argument("--description", help="what this agent is for")
    p.add_argument("--pi", metavar="PATH", help="the Pi binary (pi-rpc adapter)")
    p.add_argument(
        "--models-json", metavar="FILE", help="a Pi models.json with the provider (pi-rpc)"
    )
    p.add_argument("--provider", metavar="NAME", help="the Pi provider name (pi-rpc)")
    p.add_argument("--model", metavar="ID", help="the Pi model id (pi-rpc)")
    _add_common(p)

    p = sub.add_parser("delegate", help="give an agent a tracked task")
    p.add_argument("agent")
    p.add_argument("text")
    p.add_argument("--timeout", type=float, metavar="MINUTES", help="task deadline")
    _add_common(p)

    p = sub.add_parser("message", help="send a message (follow-up, or --steer)")
    p.add_argument("target")
    p.add_argument("text")
    p.add_argument("--task", metavar="ID")
    p.add_argument("--thread", metavar="ID")
    p.add_argument("--reply-to", metavar="ID")
    p.add_argument("--expects-reply", action="store_true")
    p.add_argument("--steer", action="store_true")
    _add_common(p)

    p = sub.add_parser("watch", help="register a watcher for task ids")
    p.add_argument("ids", nargs="+", metavar="ID")
    _add_common(p)

    p = sub.add_parser("status", help="agents, their process state and their task")
    p.add_argument("agent", nargs="?")
    _add_common(p)

    p = sub.add_parser("top", help="a live view of the session (refreshes from status snapshots)")
    p.add_argument("--interval", type=float, default=1.0, help="seconds between snapshots")
    p.add_argument("--once", action="store_true", help="print one frame and exit")
    _add_common(p)

    p = sub.add_parser("close", help="close an agent (cancels its task)")
    p.add_argument("agent")
    _add_common(p)

    p = sub.add_parser("read", help="an agent's recent output")
    p.add_argument("agent")
    p.add_argument("--lines", type=int, default=50)
    _add_common(p)

    p = sub.add_parser("cancel", help="cancel a task (130)")
    p.add_argument("task_id")
    p.add_argument("--reason")
    _add_common(p)

    p = sub.add_parser("fail", help="fail a task (1)")
    p.add_argument("task_id")
    p.add_argument("--error", required=True)
    _add_common(p)

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

    p = sub.add_parser("shutdown", help="stop the session (closes every agent)")
    _add_common(p)

    p = sub.add_parser("prompt", help="compatibility: submit a prompt (mapped onto a task)")
    p.add_argument("agent")
    p.add_argument("text")
    p.add_argument("--timeout", type=float, metavar="MINUTES")
    _add_common(p)

    p = sub.add_parser("wait", help="block until tasks (or prompt ids) settle")
    p.add_argument("ids", nargs="+", metavar="ID")
    p.add_argument("--timeout", type=float, metavar="SECONDS")
    _add_common(p)

    p = sub.add_parser("tools", help="the model-facing tool schemas")
    p.add_argument("--child", action="store_true", help="the child tools instead")
    p.add_argument("--json", action="store_true", help="print JSON (the default)")

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

    p = sub.add_parser("mcp", help="an MCP server (stdio) for a running session")
    p.add_argument("--session", metavar="DIR", help="the session directory")

    from actors.watchdog_cli import add_watchdog_parser

    add_watchdog_parser(sub)
    return parser


def _emit(args: argparse.Namespace, data: Any, human: str) -> None:
    if args.json:
        sys.stdout.write(msgspec.json.encode(data).decode() + "\n")
    else:
        sys.stdout.write(human + "\n")
    sys.stdout.flush()


def _fail(args: argparse.Namespace, code: str, message: str) -> int:
    if getattr(args, "json", False):
        sys.stdout.write(
            msgspec.json.encode({"error": {"code": code, "message": message}}).decode() + "\n"
        )
    else:
        sys.stderr.write(f"shepherd: {code}: {message}\n")
    return 2


def _abs(path: str | None) -> str | None:
    return str(Path(path).expanduser().absolute()) if path else None


def _call_args(args: argparse.Namespace) -> tuple[str, dict[str, Any]]:
    match args.command:
        case "spawn":
            return "spawn", {
                "name": args.name,
                "adapter": args.adapter,
                "script": _abs(args.script),
                "cmd": args.cmd,
                "resume_cmd": args.resume_cmd,
                "cwd": _abs(args.cwd),
                "description": args.description,
                "pi": _abs(args.pi),
                "models_json": _abs(args.models_json),
                "provider": args.provider,
                "model": args.model,
            }
        case "delegate":
            return "delegate", {
                "target": args.agent,
                "task": args.text,
                "timeout_minutes": args.timeout,
            }
        case "message":
            return "message", {
                "target": args.target,
                "message": args.text,
                "task_id": args.task,
                "thread_id": args.thread,
                "reply_to": args.reply_to,
                "expects_reply": args.expects_reply,
                "steer": args.steer,
            }
        case "watch":
            return "watch", {"ids": list(args.ids)}
        case "status":
            return "status", {"agent": args.agent}
        case "close":
            return "close", {"agent": args.agent}
        case "read":
            return "read", {"agent": args.agent, "lines": args.lines}
        case "cancel":
            return "cancel", {"task_id": args.task_id, "reason": args.reason}
        case "fail":
            return "fail", {"task_id": args.task_id, "error": args.error}
        case "shutdown":
            return "shutdown", {}
        case "prompt":
            return "prompt", {
                "target": args.agent,
                "prompt": args.text,
                "timeout_minutes": args.timeout,
            }
        case "wait":
            return "wait", {"ids": list(args.ids), "timeout_s": args.timeout}
    raise AssertionError(args.command)  # pragma: no cover


def _human(command: str, data: Any) -> str:
    from actors.views import render_status

    match command:
        case "spawn":
            return f"{data['name']} {data['agent_id']} ({data['adapter']}, {data['process_state']})"
        case "delegate":
            return f"{data['task_id']} delegated to {data['agent_id']}"
        case "message":
            extra = f" (request {data['request_id']})" if data.get("request_id") else ""
            return f"{data['message_id']} accepted{extra}"
        case "watch":
            lines = [f"watcher {data['watcher_id']}: {len(data['pending'])} pending"]
            for r in data["completed"]:
                body = r.get("text") or r.get("error") or ""
                lines.append(f"  {r['task_id']} {r['status']} (rc {r['return_code']}) {body}")
            return "\n".join(lines)
        case "status":
            return render_status(data)
        case "read":
            return "\n".join(data["lines"])
        case "close":
            cancelled = data.get("cancelled_task_id")
            return f"closed {data['agent_id']}" + (f"; cancelled {cancelled}" if cancelled else "")
        case "cancel" | "fail":
            line = f"{data['task_id']} {data['status']} (rc {data['return_code']})"
            if data.get("already_settled"):
                line += f": it had already settled; the {command} changed nothing"
            return line
        case "prompt":
            return f"{data['prompt_id']} (task {data['task_id']}) delegated to {data['agent_id']}"
        case "shutdown":
            return "shutting down: every agent is closed, the records are kept"
        case "wait":
            lines = [
                f"{r['task_id']} {r['status']} (rc {r['return_code']}) "
                f"{r.get('text') or r.get('error') or ''}"
                for r in data["completed"]
            ]
            lines += [f"{t} still pending" for t in data["pending"]]
            return "\n".join(lines)
    return msgspec.json.encode(data).decode()


def _serve(args: argparse.Namespace) -> int:
    from loguru import logger

    from actors.sinks import StreamSink
    from actors.supervisor import Supervisor

    logger.enable("actors")
    logger.remove()
    logger.add(sys.stderr, level=os.environ.get("SHEPHERD_LOG_LEVEL", "WARNING"))
    tap = None
    if args.verbose:

        def tap(text: str) -> None:
            if args.json:
                sys.stdout.write(msgspec.json.encode({"story": text}).decode() + "\n")
            else:
                sys.stdout.write("· " + text + "\n")
            sys.stdout.flush()

    from actors.config import load_settings

    settings, warnings = load_settings()
    for warning in warnings:
        sys.stderr.write(f"shepherd: warning: {warning}\n")
    sup = Supervisor(
        args.session_dir,
        settings=settings,
        sinks=[StreamSink(sys.stdout, json=args.json)],
        tap=tap,
    )
    header = {"session_dir": str(sup.session_dir), "session_id": sup.session_id}
    if args.json:
        sys.stdout.write(msgspec.json.encode({"session": header}).decode() + "\n")
    else:
        sys.stdout.write(f"session {sup.session_id}\ndirectory {sup.session_dir}\n")
    sys.stdout.flush()
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())

    def wait_for_remote_shutdown() -> None:
        sup.wait()
        stop.set()

    threading.Thread(target=wait_for_remote_shutdown, daemon=True).start()
    stop.wait()
    sup.shutdown()
    return 0


def _top(args: argparse.Namespace) -> int:
    """Refresh from a status snapshot every ``--interval`` seconds: one call per frame to the
    broker's snapshot, never a scan of the mailbox."""
    from rich.console import Console
    from rich.live import Live

    from actors.client import Client, find_session
    from actors.views import status_table

    client = Client(find_session(args.session))
    console = Console()
    snapshot = client.call("status", {})
    if args.once:
        if args.json:
            sys.stdout.write(msgspec.json.encode(snapshot).decode() + "\n")
        else:
            console.print(status_table(snapshot))
        return 0
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    with Live(status_table(snapshot), console=console, refresh_per_second=4) as live:
        while not stop.wait(max(0.1, args.interval)):
            try:
                snapshot = client.call("status", {})
            except ShepherdError:
                break  # the session ended
            live.update(status_table(snapshot))
    return 0


def _line_renderer(fmt: str) -> Any:
    """``--format``: what one complete stored line (bytes, ending in a newline) prints as."""
    from protocol.notifications import AnyNotification
    from protocol.render import render_notification

    decoder = msgspec.json.Decoder(AnyNotification)

    def rendered(line: bytes) -> str:
        try:
            return render_notification(decoder.decode(line))
        except (msgspec.DecodeError, msgspec.ValidationError):
            # a kind this version does not know: still shown, never dropped
            return "[Shepherd notification]\n" + line.decode().strip()

    if fmt == "text":
        return lambda line: rendered(line) + "\n\n"

    def with_rendered(line: bytes) -> str:
        try:
            obj = msgspec.json.decode(line)
        except msgspec.DecodeError:
            return ""  # not JSON at all: nothing a reader could use
        if not isinstance(obj, dict):
            return ""
        obj["rendered"] = rendered(line)
        return msgspec.json.encode(obj).decode() + "\n"

    return with_rendered


def _notifications(args: argparse.Namespace) -> int:
    """Print the session's notifications; ``--follow`` keeps printing new ones until the
    session ends (its supervisor is gone). Only whole lines are printed: a line still being
    written (no newline yet) waits for the next read."""
    from actors.client import find_session, pid_alive

    info = find_session(args.session)
    path = Path(info.notifications)
    render = (lambda line: line.decode()) if args.format == "json" else _line_renderer(args.format)
    with open(path, "rb") as f:
        partial = b""

        def drain() -> None:
            nonlocal partial
            data = partial + f.read()
            end = data.rfind(b"\n") + 1
            partial = data[end:]
            for line in data[:end].splitlines(keepends=True):
                if line.strip():
                    sys.stdout.write(render(line))
            sys.stdout.flush()

        drain()
        if not args.follow:
            return 0
        import watchfiles

        for _ in watchfiles.watch(
            path, debounce=10, step=5, rust_timeout=1000, yield_on_timeout=True
        ):
            drain()
            if not pid_alive(info.parent_pid):
                drain()
                return 0
    return 0


def _tool(args: argparse.Namespace) -> int:
    """``shepherd tool NAME --args JSON``: one parent tool call, validated like the MCP
    server's (``protocol.tools.args_from_tool_call``), so no per-tool flags can drift."""
    from actors.client import Client, find_session
    from protocol.errors import InvalidArgument
    from protocol.tools import args_from_tool_call, tool_by_name

    spec = tool_by_name("parent", args.name)
    raw = sys.stdin.read() if args.args == "-" else args.args
    try:
        arguments = msgspec.json.decode(raw.strip() or "{}")
    except msgspec.DecodeError as exc:
        raise InvalidArgument(f"{spec.name}: the arguments are not JSON: {exc}") from None
    if not isinstance(arguments, dict):
        raise InvalidArgument(f"{spec.name}: the arguments must be one JSON object")
    fields: dict[str, Any] = msgspec.to_builtins(args_from_tool_call(spec, arguments))
    for name in spec.path_fields:
        if isinstance(fields.get(name), str):
            fields[name] = _abs(fields[name])
    data = Client(find_session(args.session)).call(spec.op, fields)
    _emit(args, data, msgspec.json.encode(data).decode())
    return 0


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        if args.command == "serve":
            return _serve(args)
        if args.command == "demo":
            if args.loop:
                from actors.watchdog_cli import run_loop_demo

                return run_loop_demo(sys.stdout, seed=args.seed)
            if args.agents == "pi":
                from actors.demo import run_pi_demo

                return run_pi_demo()
            from actors.demo import run_process_demo, run_simulated_demo

            return run_simulated_demo(args.seed) if args.simulated else run_process_demo()
        if args.command == "notifications":
            return _notifications(args)
        if args.command == "top":
            return _top(args)
        if args.command == "watchdog":
            from actors.watchdog_cli import client_call, run_watchdog

            return run_watchdog(args, client_call(args.session))
        if args.command == "tools":
            from protocol.tools import child_tools, parent_tools, to_json

            specs = child_tools() if args.child else parent_tools()
            sys.stdout.write(msgspec.json.encode([to_json(s) for s in specs]).decode() + "\n")
            return 0
        if args.command == "tool":
            return _tool(args)
        if args.command == "mcp":
            from actors.mcp_server import serve_stdio

            return serve_stdio(args.session)
        from actors.client import Client, find_session

        op, call_args = _call_args(args)
        timeout = 30.0
        if args.command == "wait" and args.timeout is not None:
            timeout = args.timeout + 30.0
        elif args.command == "wait":
            timeout = 365 * 86_400.0
        data = Client(find_session(args.session)).call(op, call_args, timeout=timeout)
        _emit(args, data, _human(args.command, data))
        return 0
    except ShepherdError as exc:
        return _fail(args, exc.code, exc.message)
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
