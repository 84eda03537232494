"""The ``shepherd`` commands that are not operations of the session.

``serve`` (run a session in the foreground), ``top`` (a live view from status snapshots),
``notifications`` (the parent's notifications, ``--follow`` to keep printing), ``tool`` (one
parent tool call, validated like the MCP server's), ``tools`` (the tool schemas) and ``demo``.

Rules: each ``run_*`` takes the parsed arguments and returns the exit status; errors are raised
as :class:`~protocol.core.errors.ShepherdError` for :func:`actors.surfaces.cli.main` to report, and
output goes through :mod:`actors.surfaces.cli_output`'s rules (stdout carries the answer).
Heavy imports (the session, rich, the demos) are made inside the command that needs them, so
every other command starts without them.
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
from typing import Any

import msgspec

from actors.surfaces.cli_ops import absolute
from actors.surfaces.cli_output import emit, session_of
from protocol.core.errors import InvalidArgument, ShepherdError
from protocol.core.transport_url import TlsFiles
from protocol.records.settings import Settings, check_settings
from protocol.session.admission import parse_caps

__all__ = [
    "TOP_INTERVAL_S",
    "check_interval",
    "run_demo",
    "run_node",
    "run_notifications",
    "run_serve",
    "run_tool",
    "run_tools",
    "run_top",
]

#: ``top --interval`` bounds, in seconds
TOP_INTERVAL_S = (0.1, 3600.0)


def run_serve(args: argparse.Namespace) -> int:
    """``shepherd serve``: a session in the foreground until SIGTERM/SIGINT or a remote
    shutdown."""
    from actors.session.sinks import StreamSink
    from actors.session.supervisor import Supervisor
    from actors.surfaces.forwarded import run_forwarded

    _log_to_stderr()
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
    if args.otel:  # in the environment: the agents' bridges inherit it and trace too
        from actors.tracing import ENV_OTEL

        os.environ[ENV_OTEL] = "1"
    settings = session_settings(
        settings,
        budget_tokens=args.budget_tokens,
        budget_cost=args.budget_cost,
        max_running=args.max_running,
        max_running_per_provider=(
            parse_caps(args.max_running_per_provider) if args.max_running_per_provider else None
        ),
    )
    if args.nats_auth is not None:  # refused before anything is made
        from actors.transports.nats.auth import Authority

        Authority.load(args.nats_auth)
    sup = Supervisor(
        args.session_dir,
        settings=settings,
        sinks=[StreamSink(sys.stdout, json=args.json)],
        tap=tap,
        recover=args.recover,
        transport=args.transport,
        journal=args.journal,
        resume=args.resume,
        nats_auth=args.nats_auth,
        nats_tls=_tls_files(args),
        commands=run_forwarded,  # `shepherd` calls run here, without the CLI's start-up
    )
    for line in sup.limits_changed:  # a restart that gave other limits says so
        sys.stderr.write(f"shepherd: warning: {line}\n")
    sys.stderr.flush()
    # before the header: whoever reads it may stop serve at once, and must get a clean stop
    stop = _stop_on_signals()
    header = {"session_dir": str(sup.session_dir), "session_id": sup.session_id}
    if args.json:
        sys.stdout.write(msgspec.json.encode({"session": header}).decode() + "\n")
    else:
        sys.stdout.write(f"session {sup.session_id}\ndirectory {sup.session_dir}\n")
    sys.stdout.flush()

    def wait_for_remote_shutdown() -> None:
        sup.wait()
        stop.set()

    threading.Thread(target=wait_for_remote_shutdown, daemon=True).start()
    stop.wait()
    sup.shutdown()
    return 0


def _tls_files(args: argparse.Namespace) -> TlsFiles | None:
    """``--nats-ca``, ``--nats-cert``, ``--nats-key`` as given (checked by who takes them)."""
    return TlsFiles(ca=args.nats_ca, cert=args.nats_cert, key=args.nats_key).given()


def _log_to_stderr() -> None:
    """A long-running process's log: warnings and worse on stderr (``SHEPHERD_LOG_LEVEL``)."""
    from actors.runtime.log import logger

    logger.enable("actors")
    logger.remove()
    logger.add(sys.stderr, level=os.environ.get("SHEPHERD_LOG_LEVEL", "WARNING"))


def _stop_on_signals() -> threading.Event:
    """An event set by SIGTERM or SIGINT: how ``serve`` and ``node`` are asked to stop."""
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    return stop


def run_node(args: argparse.Namespace) -> int:
    """``shepherd node``: start the bridges of agents placed on this host, until SIGTERM/SIGINT
    (:mod:`actors.nodes.node`)."""
    from actors.nodes.node import NodeServer
    from actors.records.live import state_dir
    from actors.transports.nats.node_login import load_node_login
    from actors.transports.nats.permissions import check_node_name
    from actors.transports.wire import NATS_TIMEOUT_S
    from protocol.core.limits import running_cap
    from protocol.core.transport_url import parse_transport

    _log_to_stderr()
    name = check_node_name(args.name)
    cap = None if args.max_running is None else running_cap(args.max_running, "--max-running")
    servers = parse_transport(args.transport).server_urls
    login = None if args.nats_creds is None else load_node_login(args.nats_creds, name)
    tls = None
    if _tls_files(args) is not None:  # refused before anything is made
        from actors.transports.nats.tls import load_tls

        tls = load_tls(args.transport.strip(), args.nats_ca, args.nats_cert, args.nats_key)
    root = Path(args.dir).absolute() if args.dir else state_dir() / "nodes" / name
    node = NodeServer(
        servers, name, root, timeout_s=NATS_TIMEOUT_S, login=login, tls=tls, max_running=cap
    )
    stop = _stop_on_signals()  # before the ready line, as serve's header
    ready = {"name": name, "pid": os.getpid(), "dir": str(root), "max_running": cap}
    if args.json:
        sys.stdout.write(msgspec.json.encode({"node": ready}).decode() + "\n")
    else:
        sys.stdout.write(f"node {name} ready (pid {os.getpid()}), files in {root}\n")
    sys.stdout.flush()
    stop.wait()
    node.close()
    return 0


def session_settings(settings: Settings, **flags: Any) -> Settings:
    """``serve``'s setting flags (``--budget-tokens``, ``--max-running``, ...) over the
    settings files, checked against the same bounds (``invalid_argument`` naming the flag's
    setting); a flag not given leaves the files' value."""
    given = {k: v for k, v in flags.items() if v is not None}
    if not given:
        return settings
    return check_settings(msgspec.structs.replace(settings, **given))


def run_top(args: argparse.Namespace) -> int:
    """Refresh from a status snapshot every ``--interval`` seconds: one call per frame to the
    broker's snapshot, never a scan of the mailbox."""
    from rich.console import Console
    from rich.live import Live

    from actors.surfaces.client import Client
    from actors.surfaces.views import status_table

    client = Client(session_of(args))
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
    from protocol.calls.render import render_notification
    from protocol.records.notifications import AnyNotification

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


def run_notifications(args: argparse.Namespace) -> int:
    """Print the session's notifications; ``--follow`` keeps printing new ones until the
    session ends (its supervisor is gone). Only whole lines are printed: a line still being
    written (no newline yet) waits for the next read. The file is read in chunks, so memory
    stays bounded however long it is.

    Following polls the file's size every :data:`FOLLOW_POLL_S` rather than watching it: no
    inotify instance is needed, so it works when the user's instances are used up (an
    inotify watch failed with "Too many open files" then), and a stat 40 times a second costs
    less than the watchfiles loop it replaces (awake every 5 ms)."""
    from actors.records.session_info import is_live

    info = session_of(args)
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
            if not is_live(info):
                drain()  # what the session wrote before it went
                return 0


def run_tool(args: argparse.Namespace) -> int:
    """``shepherd tool NAME --args JSON``: one parent tool call, validated like the MCP
    server's (``protocol.ops.tools.args_from_tool_call``), so no per-tool flags can drift."""
    from actors.surfaces.client import Client
    from protocol.ops.tools import args_from_tool_call, tool_by_name

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
            fields[name] = absolute(fields[name])
    data = Client(session_of(args)).call(spec.op, fields)
    emit(args, data, msgspec.json.encode(data).decode())
    return 0


def check_interval(value: float) -> float:
    """``top --interval``, refused outside :data:`TOP_INTERVAL_S`."""
    low, high = TOP_INTERVAL_S
    if not (math.isfinite(value) and low <= value <= high):
        raise InvalidArgument(f"top: --interval must be {low:g} to {high:g} seconds, got {value}")
    return value


def run_demo(args: argparse.Namespace) -> int:
    """``shepherd demo``: the canonical scenario (``--loop``: the watchdog's loop demo)."""
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


def run_tools(args: argparse.Namespace) -> int:
    """``shepherd tools``: the parent's (``--child``: the child's) tools, or their schemas."""
    from protocol.ops.tools import child_tools, parent_tools, to_json

    specs = child_tools() if args.child else parent_tools()
    if args.json:
        sys.stdout.write(msgspec.json.encode([to_json(s) for s in specs]).decode() + "\n")
    else:
        width = max(len(s.name) for s in specs)
        for spec in specs:
            sys.stdout.write(f"{spec.name:<{width}}  {spec.prompt_snippet}\n")
        sys.stdout.write("(--json prints every tool's schema)\n")
    return 0
