"""The ``shepherd`` command line: the parent's operations from any shell.

Every command takes ``--json`` (one JSON object on stdout) and ``--session DIR`` (else
``$SHEPHERD_SESSION``, else the one live session of this user: several live ones are refused
with their list, see :func:`actors.surfaces.client.find_session`). Errors exit with status 2 and,
with ``--json``, print ``{"error": {"code", "message"}}`` — usage errors included. ``wait`` exits
:data:`WAIT_TIMED_OUT` (124, as ``timeout(1)`` does) when its timeout passed with ids still
pending.

A session found without ``--session`` or ``$SHEPHERD_SESSION`` is named on stderr, with and
without ``--json``: stdout keeps exactly the documented JSON object (a field added to every
answer would change the shape every ``--json`` consumer parses), and a person still sees which
session answered.

The session's operations (``spawn``, ``delegate``, ``message`` ...) are generated from the
operation table (:mod:`protocol.ops`): each one's positional arguments, options, help, the
flags-to-arguments mapping, its paging and its human view; only the commands that are not
operations of the session (``serve``, ``demo``, ``top``, ``notifications``, ``tools``,
``tool``, ``mcp``, ``watchdog``) are written here. An operation's arguments are checked against
its Args Struct (types and bounds) before anything is sent: a value JSON cannot carry
faithfully (NaN, an infinity) is refused, never sent as ``null``. Answers that are paged
(``status``, ``read``) are fetched page by page until complete.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import signal
import sys
import threading
from pathlib import Path
from typing import Any, NoReturn

import msgspec

from protocol import ops
from protocol.errors import InvalidArgument, ShepherdError
from protocol.ops import WAIT_TIMED_OUT

__all__ = ["WAIT_TIMED_OUT", "main"]
#: ``top --interval`` bounds, in seconds
TOP_INTERVAL_S = (0.1, 3600.0)
#: pages one paged command fetches at most (a session cannot outgrow it: 1000 agents per page
#: is far more than a frame holds, and read lines are bounded by the agent's buffer)
MAX_PAGES = 10_000
#: how long the CLI waits for an answer; an operation that blocks (``wait``) waits for its
#: ``timeout_s`` and this much more, or, without one, a year
ANSWER_TIMEOUT_S = 30.0
BLOCKING_TIMEOUT_S = 365 * 86_400.0


class _Parser(argparse.ArgumentParser):
    """argparse that raises ``invalid_argument`` instead of printing usage and exiting, so a
    usage error is reported like every other error (as JSON under ``--json``)."""

    def error(self, message: str) -> NoReturn:
        raise InvalidArgument(f"{message} (see '{self.prog} --help')")


def _add_common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--session", metavar="DIR", help="the session directory")


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
_AFTER = {"status": _add_top, "fail": _add_notifications}


def _add_operation(sub: Any, op: ops.Op[Any]) -> None:
    extra = {"description": op.description} if op.description else {}
    p = sub.add_parser(op.name, help=op.help, **extra)
    for name, spec in op.arguments():
        p.add_argument(name, **spec)
    _add_common(p)


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="shepherd", description="Supervise a team of agents.")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("serve", help="run a session in the foreground")
    p.add_argument("--session-dir", metavar="DIR", help="where the session's records live")
    p.add_argument("--json", action="store_true", help="notifications as JSON lines")
    p.add_argument("--verbose", action="store_true", help="also print lifecycle changes")

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

    for op in ops.PARENT:
        if op.help:  # an operation without a command has no help
            _add_operation(sub, op)
        if op.name in _AFTER:
            _AFTER[op.name](sub)

    p = sub.add_parser("tools", help="the model-facing tool schemas")
    p.add_argument("--child", action="store_true", help="the child tools instead")
    p.add_argument("--json", action="store_true", help="print the schemas as JSON")

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
    p.add_argument("--json", action="store_true", help="accepted; MCP always speaks JSON")
    p.add_argument(
        "--client",
        metavar="NAME",
        help="whose notifications cursor to continue (default: one per session)",
    )

    from actors.surfaces.watchdog_cli import add_watchdog_parser

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


def _say(text: str) -> None:
    sys.stderr.write(f"shepherd: {text}\n")
    sys.stderr.flush()


def _session(args: argparse.Namespace) -> Any:
    """The session for this command (:func:`actors.surfaces.client.find_session`), named on stderr
    when it was not chosen explicitly."""
    from actors.surfaces.client import find_session

    return find_session(args.session, announce=_say)


def _abs(path: str | None) -> str | None:
    return str(Path(path).expanduser().absolute()) if path else None


def _serve(args: argparse.Namespace) -> int:
    from loguru import logger

    from actors.session.sinks import StreamSink
    from actors.session.supervisor import Supervisor

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

    from actors.surfaces.config import load_settings

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

    from actors.surfaces.client import Client
    from actors.surfaces.views import status_table

    client = Client(_session(args))
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


#: how often ``notifications --follow`` looks at the file's size
FOLLOW_POLL_S = 0.025


def _notifications(args: argparse.Namespace) -> int:
    """Print the session's notifications; ``--follow`` keeps printing new ones until the
    session ends (its supervisor is gone). Only whole lines are printed: a line still being
    written (no newline yet) waits for the next read. The file is read in chunks, so memory
    stays bounded however long it is.

    Following polls the file's size every :data:`FOLLOW_POLL_S` rather than watching it: no
    inotify instance is needed, so it works when the user's instances are used up (an
    inotify watch failed with "Too many open files" then), and a stat 40 times a second costs
    less than the watchfiles loop it replaces (awake every 5 ms)."""
    from actors.surfaces.client import pid_alive

    info = _session(args)
    path = Path(info.notifications)
    render = (lambda line: line.decode()) if args.format == "json" else _line_renderer(args.format)
    with open(path, "rb") as f:
        partial = b""

        def drain() -> None:
            nonlocal partial
            while chunk := f.read(64 * 1024):
                data = partial + chunk
                end = data.rfind(b"\n") + 1
                partial = data[end:]
                for line in data[:end].splitlines(keepends=True):
                    if line.strip():
                        sys.stdout.write(render(line))
            sys.stdout.flush()

        drain()
        if not args.follow:
            return 0
        pause = threading.Event()  # never set: a bounded pause between looks
        size = os.fstat(f.fileno()).st_size
        while True:
            pause.wait(FOLLOW_POLL_S)
            with contextlib.suppress(OSError):
                grown = os.stat(path).st_size != size
                if grown:
                    drain()
                    size = f.tell()
            if not pid_alive(info.parent_pid):
                drain()  # what the session wrote before it went
                return 0


def _tool(args: argparse.Namespace) -> int:
    """``shepherd tool NAME --args JSON``: one parent tool call, validated like the MCP
    server's (``protocol.tools.args_from_tool_call``), so no per-tool flags can drift."""
    from actors.surfaces.client import Client
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
    data = Client(_session(args)).call(spec.op, fields)
    _emit(args, data, msgspec.json.encode(data).decode())
    return 0


def _fetch(client: Any, op: ops.Op[Any], call_args: dict[str, Any], timeout: float) -> Any:
    """The answer; a paged one (``status``, ``read``) page by page, joined."""
    pages = [client.call(op.name, call_args, timeout=timeout)]
    if op.pager is None:
        return pages[0]
    while len(pages) < MAX_PAGES and (more := op.pager.following(call_args, pages)) is not None:
        pages.append(client.call(op.name, more, timeout=timeout))
    return op.pager.joined(call_args, pages)


def _check_interval(value: float) -> float:
    low, high = TOP_INTERVAL_S
    if not (math.isfinite(value) and low <= value <= high):
        raise InvalidArgument(f"top: --interval must be {low:g} to {high:g} seconds, got {value}")
    return value


def _wants_json(argv: list[str] | None) -> bool:
    words = sys.argv[1:] if argv is None else argv
    return "--json" in words[: words.index("--")] if "--" in words else "--json" in words


def main(argv: list[str] | None = None) -> int:
    try:
        args = _parser().parse_args(argv)
    except InvalidArgument as exc:  # a usage error: reported like any other error
        return _fail(argparse.Namespace(json=_wants_json(argv)), exc.code, exc.message)
    try:
        if args.command == "serve":
            return _serve(args)
        if args.command == "demo":
            return _demo(args)
        if args.command == "notifications":
            return _notifications(args)
        if args.command == "top":
            _check_interval(args.interval)
            return _top(args)
        if args.command == "watchdog":
            from actors.surfaces.watchdog_cli import client_call, run_watchdog

            return run_watchdog(args, client_call(args.session, announce=_say))
        if args.command == "tools":
            return _tools(args)
        if args.command == "tool":
            return _tool(args)
        if args.command == "mcp":
            from actors.surfaces.mcp_server import serve_stdio

            return serve_stdio(args.session, args.client)
        from actors.surfaces.client import Client

        op = ops.parent_op(args.command)
        call_args = op.given(vars(args), _abs)
        timeout = ANSWER_TIMEOUT_S
        if op.blocks:
            limit = call_args.get("timeout_s")
            timeout = BLOCKING_TIMEOUT_S if limit is None else limit + ANSWER_TIMEOUT_S
        data = _fetch(Client(_session(args)), op, call_args, timeout)
        _emit(args, data, op.view(data))
        return op.exit_status(data) if op.exit_status is not None else 0
    except ShepherdError as exc:
        return _fail(args, exc.code, exc.message)
    except KeyboardInterrupt:
        return 130


def _demo(args: argparse.Namespace) -> int:
    out: Any = _JsonLines(sys.stdout) if args.json else sys.stdout
    if args.loop:
        from actors.surfaces.loop_demo import run_loop_demo

        return run_loop_demo(out, seed=args.seed)
    if args.agents == "pi":
        from actors.surfaces.demo import run_pi_demo

        return run_pi_demo(out)
    from actors.surfaces.demo import run_process_demo, run_simulated_demo

    return run_simulated_demo(args.seed, out) if args.simulated else run_process_demo(out)


class _JsonLines:
    """``demo --json``: each line of the story as one JSON object ``{"line": ...}``."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream
        self._partial = ""

    def write(self, text: str) -> int:
        self._partial += text
        *whole, self._partial = self._partial.split("\n")
        for line in whole:
            self._stream.write(msgspec.json.encode({"line": line}).decode() + "\n")
        return len(text)

    def flush(self) -> None:
        self._stream.flush()


def _tools(args: argparse.Namespace) -> int:
    from protocol.tools import child_tools, parent_tools, to_json

    specs = child_tools() if args.child else parent_tools()
    if args.json:
        sys.stdout.write(msgspec.json.encode([to_json(s) for s in specs]).decode() + "\n")
    else:
        width = max(len(s.name) for s in specs)
        for spec in specs:
            sys.stdout.write(f"{spec.name:<{width}}  {spec.prompt_snippet}\n")
        sys.stdout.write("(--json prints every tool's schema)\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
