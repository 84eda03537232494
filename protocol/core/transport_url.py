"""What ``shepherd serve --transport`` names: the session's transport, parsed and bounded.

Rules:
- The file mailbox is the default: no ``--transport`` (or an empty one from a settings
  layer) means it, and nothing changes for a user on one machine.
- ``nats://HOST:PORT[,HOST:PORT...]`` names the NATS servers of one cluster (a later item may
  repeat ``nats://``); ``tls://`` instead says that every connection to every server is TLS
  (verified against the session's CA bundle, ``--nats-ca``, or the system's trust store, with
  the host name checked). One scheme for the whole list: mixing them is ``invalid_argument``.
  At most :data:`~protocol.core.limits.MAX_TRANSPORT_SERVERS` servers and
  :data:`~protocol.core.limits.MAX_TRANSPORT_CHARS` characters (``limit_exceeded``); anything
  else - another scheme, a path, a user or password in the URL, a missing or out-of-range
  port, a query - is ``invalid_argument`` naming ``--transport`` and what was wrong.
- The canonical form (:meth:`TransportSpec.url`) is what the session records (session.json,
  the agents' environment): one scheme and the servers in the order given, without repeats.
- A file option of the TLS settings (``--nats-ca``, ``--nats-cert``, ``--nats-key``:
  :class:`TlsFiles`) is bounded here before any file is opened (:func:`check_tls_file`): not
  empty, at most :data:`~protocol.core.limits.MAX_OPTION_CHARS` characters, no NUL
  (``invalid_argument`` naming the option); what the file holds is the opener's check.

Sans-IO: parsing only; whether a server answers is the transport's business.
"""

from __future__ import annotations

import re

import msgspec

from protocol.core.errors import InvalidArgument, LimitExceeded
from protocol.core.limits import MAX_OPTION_CHARS, MAX_TRANSPORT_CHARS, MAX_TRANSPORT_SERVERS

__all__ = [
    "NATS_SCHEME",
    "TLS_SCHEME",
    "TlsFiles",
    "TransportSpec",
    "check_tls_file",
    "is_nats",
    "is_tls",
    "parse_transport",
]

NATS_SCHEME = "nats://"
TLS_SCHEME = "tls://"
_SCHEMES = (NATS_SCHEME, TLS_SCHEME)
_FORM = "nats://HOST:PORT[,HOST:PORT...] or tls://HOST:PORT[,HOST:PORT...]"
_OPTION = "--transport"
#: an RFC 1123 host name (labels of letters, digits and inner hyphens), or an IPv4 address
_LABEL = r"[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
_HOSTNAME = re.compile(rf"(?=.{{1,253}}$){_LABEL}(\.{_LABEL})*")
_PORT = re.compile(r"[0-9]{1,5}")
_HEXTET = re.compile(r"[0-9A-Fa-f]{1,4}")
_IPV4 = re.compile(r"((25[0-5]|2[0-4][0-9]|1?[0-9]?[0-9])\.){3}(25[0-5]|2[0-4][0-9]|1?[0-9]?[0-9])")


class TransportSpec(msgspec.Struct, frozen=True):
    """A NATS transport: its servers as ``host:port`` (IPv6 hosts in brackets), and whether
    every connection to them must be TLS (``tls://``)."""

    servers: tuple[str, ...]
    tls: bool = False

    @property
    def scheme(self) -> str:
        return TLS_SCHEME if self.tls else NATS_SCHEME

    @property
    def url(self) -> str:
        return self.scheme + ",".join(self.servers)

    @property
    def server_urls(self) -> list[str]:
        return [self.scheme + server for server in self.servers]


class TlsFiles(msgspec.Struct, frozen=True, kw_only=True):
    """A session's TLS setting for ``tls://`` servers, as absolute paths (checked by
    :func:`actors.transports.nats.tls.load_tls`): the CA bundle that verifies the servers (None: the
    system's trust store), and this client's certificate and key for servers that verify
    their clients (mutual TLS: both or neither)."""

    ca: str | None = None
    cert: str | None = None
    key: str | None = None

    def given(self) -> TlsFiles | None:
        """None when nothing is set (a plain ``tls://`` on the system's trust store)."""
        return self if (self.ca, self.cert, self.key) != (None, None, None) else None


def is_nats(descriptor: str) -> bool:
    """Does a recorded transport (session.json's ``mailbox``, ``SHEPHERD_MAILBOX``) name NATS
    servers (``nats://`` or ``tls://``) rather than a mailbox directory?"""
    return descriptor.startswith(_SCHEMES)


def is_tls(descriptor: str) -> bool:
    """Does a recorded transport require TLS to its NATS servers?"""
    return descriptor.startswith(TLS_SCHEME)


def check_tls_file(raw: str, option: str) -> str:
    """``raw`` as given to a TLS file option (``--nats-ca``), bounded (module rules); raises
    ``invalid_argument`` naming ``option``."""
    if not raw or not raw.strip():
        raise InvalidArgument(f"{option} is empty: name a PEM file")
    if len(raw) > MAX_OPTION_CHARS:
        raise InvalidArgument(f"{option} is {len(raw)} characters; at most {MAX_OPTION_CHARS}")
    if "\0" in raw:
        raise InvalidArgument(f"{option} contains a NUL character")
    return raw


def parse_transport(raw: str) -> TransportSpec:
    """``raw`` as given to ``--transport`` (see the module rules); raises the typed error."""
    if len(raw) > MAX_TRANSPORT_CHARS:
        raise LimitExceeded(
            f"{_OPTION} is {len(raw)} characters; at most {MAX_TRANSPORT_CHARS} are accepted"
        )
    text = raw.strip()
    if not text:
        raise InvalidArgument(f"{_OPTION} is empty: give {_FORM}")
    scheme = next((s for s in _SCHEMES if text.lower().startswith(s)), None)
    if scheme is None:
        named = text.split("://", 1)[0] if "://" in text else None
        what = f"scheme {named!r:.40}" if named is not None else f"{text!r:.80}"
        raise InvalidArgument(
            f"{_OPTION} {what} is not supported: give {_FORM} "
            "(without --transport the session uses its file mailbox)"
        )
    items = text[len(scheme) :].split(",")
    if len(items) > MAX_TRANSPORT_SERVERS:
        raise LimitExceeded(
            f"{_OPTION} names {len(items)} servers; at most {MAX_TRANSPORT_SERVERS} are accepted"
        )
    servers: list[str] = []
    for item in items:
        server = _server(item.strip(), scheme)
        if server not in servers:
            servers.append(server)
    return TransportSpec(tuple(servers), tls=scheme == TLS_SCHEME)


def _server(item: str, scheme: str) -> str:
    if "://" in item:
        # every server of the list is reached the same way: TLS for all, or for none
        if not item.lower().startswith(scheme):
            named = item.split("://", 1)[0]
            raise InvalidArgument(
                f"{_OPTION} mixes schemes ({scheme} and {named!r:.40}://): give one for "
                "every server"
            )
        item = item[len(scheme) :]
    if not item:
        raise InvalidArgument(f"{_OPTION} has an empty server: give HOST:PORT for each")
    if "@" in item:
        raise InvalidArgument(
            f"{_OPTION}: credentials in the URL are not accepted (they would be written to "
            "session.json and every agent's environment)"
        )
    if any(c in item for c in "/?#") or any(c.isspace() or not c.isprintable() for c in item):
        raise InvalidArgument(f"{_OPTION}: {item!r:.80} is not HOST:PORT")
    host, sep, port_text = item.rpartition(":")
    if not sep or not host:
        raise InvalidArgument(f"{_OPTION}: {item!r:.80} has no port: give HOST:PORT")
    if not _PORT.fullmatch(port_text) or not 1 <= int(port_text) <= 65535:
        raise InvalidArgument(f"{_OPTION}: port {port_text!r:.20} is not in 1..65535")
    if host.startswith("[") and host.endswith("]"):
        if not _ipv6(host[1:-1]):
            raise InvalidArgument(f"{_OPTION}: {host!r:.80} is not an IPv6 address")
    elif not _HOSTNAME.fullmatch(host):
        raise InvalidArgument(f"{_OPTION}: {host!r:.80} is not a host name or address")
    return f"{host.lower()}:{int(port_text)}"


def _ipv6(text: str) -> bool:
    """An IPv6 address in RFC 4291 text form (hextets, one ``::`` at most, an IPv4 tail)."""
    if text.count("::") > 1:
        return False
    head, gap, tail = text.partition("::")
    parts = (head.split(":") if head else []) + (tail.split(":") if tail else [])
    groups = len(parts)
    if parts and "." in parts[-1]:
        if not _IPV4.fullmatch(parts.pop()):
            return False
        groups += 1  # four bytes: two hextets
    if not all(_HEXTET.fullmatch(part) for part in parts):
        return False
    return groups < 8 if gap else groups == 8
