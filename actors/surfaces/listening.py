"""Where a session's HTTP front doors listen (``shepherd a2a``, ``shepherd web``): the
``--listen`` and ``--allow-remote`` options, their check (the one place), the listening socket
and the live session they serve.

Rules: ``--listen HOST:PORT`` is a loopback address (IPv4, ``[IPv6]`` or ``localhost``) unless
``--allow-remote``; port 0 picks a free one. A bad value is ``invalid_argument`` naming the
command and what is wrong; a session that has ended is ``session_unavailable``.
"""

from __future__ import annotations

import argparse
import ipaddress
import socket
import sys

from actors.records.session_info import SessionInfo
from protocol.core.errors import InvalidArgument, SessionUnavailable

__all__ = ["add_listen_options", "check_listen", "listening_socket", "live_session"]


def add_listen_options(p: argparse.ArgumentParser) -> None:
    """``--listen``, ``--allow-remote``, ``--session`` and ``--json`` of a front door."""
    p.add_argument(
        "--listen",
        metavar="HOST:PORT",
        default="127.0.0.1:0",
        help="where to listen (default 127.0.0.1:0: a free port); a loopback address only, "
        "unless --allow-remote",
    )
    p.add_argument(
        "--allow-remote",
        action="store_true",
        help="allow a --listen address that is not a loopback one",
    )
    p.add_argument(
        "--session", "--session-dir", dest="session", metavar="DIR", help="the session directory"
    )
    p.add_argument("--json", action="store_true", help="print the URL and token as one JSON object")


def check_listen(listen: str, *, allow_remote: bool, what: str = "listen") -> tuple[str, int]:
    """``--listen HOST:PORT``, checked (module rules); ``what`` names the command."""
    host, sep, port_text = listen.rpartition(":")
    if not sep or not host or not port_text.isdigit() or int(port_text) > 65535:
        raise InvalidArgument(
            f"{what}: --listen must be HOST:PORT (port 0-65535), got {listen[:80]!r}"
        )
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    if host == "localhost":
        loopback = True
    else:
        try:
            loopback = ipaddress.ip_address(host).is_loopback
        except ValueError:
            if not allow_remote:
                raise InvalidArgument(
                    f"{what}: --listen {host[:80]!r} is not an IP address: give a loopback one "
                    "(127.0.0.1), or --allow-remote to listen elsewhere"
                ) from None
            loopback = False
    if not loopback and not allow_remote:
        raise InvalidArgument(
            f"{what}: --listen {host} is not a loopback address: only this host could reach the "
            "session safely; --allow-remote listens there anyway (the token still guards it)"
        )
    return host, int(port_text)


def live_session(session: str | None) -> SessionInfo:
    """The session to serve (found as every command finds it, named on stderr when it was not
    given), or ``session_unavailable`` if it has ended."""
    from actors.surfaces.client import find_session, session_alive

    def announce(text: str) -> None:
        sys.stderr.write(f"shepherd: {text}\n")

    info = find_session(session, announce=announce)
    if not session_alive(info):
        raise SessionUnavailable(f"the session at {info.session_dir} has ended")
    return info


def listening_socket(what: str, listen: str, host: str, port: int) -> tuple[socket.socket, str]:
    """A socket listening on ``host:port`` (checked by :func:`check_listen`) and its URL."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise InvalidArgument(f"{what}: cannot listen on {listen}: {exc.strerror or exc}") from None
    sock.listen(128)
    bound = sock.getsockname()[1]
    return sock, f"http://{f'[{host}]' if family == socket.AF_INET6 else host}:{bound}/"
