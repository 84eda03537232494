"""TLS to the NATS servers (``--transport tls://...``, ``--nats-ca FILE``, ``--nats-cert FILE
--nats-key FILE``): the one place that checks the TLS files and builds the client's SSL
context, and the client that holds a connection to what its scheme says.

Rules:
- The setting is one recorded value (:class:`~protocol.core.transport_url.TlsFiles`: the CA
  bundle's absolute path, or none for the system's trust store; and, for servers that verify
  their clients, this client's certificate and key), with the transport's scheme:
  ``session.json`` (``nats_tls``) for the CLI, the agents'
  ``SHEPHERD_NATS_CA``/``_CERT``/``_KEY`` beside ``SHEPHERD_MAILBOX``, ``shepherd node
  --nats-ca ...`` on another host. Every process builds its context from it here
  (:func:`client_context`).
- Verification is always on: the server's certificate must chain to the bundle and name the
  host the client dialled (an IP address must be in its IP SANs). Nothing here can turn that
  off; TLS 1.2 at least.
- Each file option is refused with ``invalid_argument`` naming it, before anything is made:
  empty, longer than :data:`~protocol.core.limits.MAX_OPTION_CHARS`, a NUL, a path that does not
  exist, a directory (or anything but a regular file), unreadable, over 4 MiB, or a file
  holding no PEM certificate (the CA, the client's certificate) or no PEM private key (the
  key, which must also be readable by its owner only); a certificate without its key or the
  other way round, or a key that is not the certificate's; and any of them with a ``nats://``
  transport (there is nothing to verify).
- The scheme is held to, on every connection and reconnection: a ``tls://`` client refuses a
  server that does not offer TLS before it sends anything (nats-py alone would go on in clear
  text), and a ``nats://`` client refuses a server that requires TLS (nats-py alone would
  upgrade against the system's trust store, whatever the session asked for). Both are
  :func:`tls_mismatch` errors, told in the connection's error callback like a failed handshake.
"""

from __future__ import annotations

import functools
import logging
import os
import ssl
import stat
from pathlib import Path
from typing import Any

from protocol.core.errors import InvalidArgument
from protocol.core.transport_url import TlsFiles, check_tls_file, is_tls

__all__ = [
    "CA_OPTION",
    "CERT_OPTION",
    "KEY_OPTION",
    "client_class",
    "client_context",
    "is_tls_failure",
    "load_ca",
    "load_tls",
    "tls_cause",
    "tls_mismatch",
]

CA_OPTION = "--nats-ca"
CERT_OPTION = "--nats-cert"
KEY_OPTION = "--nats-key"
#: a CA bundle is a few certificates, a key one block; a file larger than this is neither
_MAX_PEM_BYTES = 4 * 1024 * 1024
_PEM_CERT = b"-----BEGIN CERTIFICATE-----"
#: "-----BEGIN PRIVATE KEY-----", "-----BEGIN EC PRIVATE KEY-----", "... RSA PRIVATE KEY-----"
_PEM_KEY = b"PRIVATE KEY-----"


def load_tls(
    descriptor: str, ca: str | None, cert: str | None = None, key: str | None = None
) -> TlsFiles | None:
    """``--nats-ca``, ``--nats-cert`` and ``--nats-key`` checked (module rules) for a session
    over ``descriptor``: their absolute paths, or None when none is given; raises
    ``invalid_argument`` naming the option."""
    options = ((CA_OPTION, ca), (CERT_OPTION, cert), (KEY_OPTION, key))
    named = [option for option, raw in options if raw is not None]
    if not named:
        return None
    for option, raw in options:
        if raw is not None:
            check_tls_file(raw, option)
    if not is_tls(descriptor):
        raise InvalidArgument(
            f"{' and '.join(named)} {'needs' if len(named) == 1 else 'need'} --transport "
            "tls://HOST:PORT[,...] (a nats:// "
            "transport is clear text: there is no server certificate to verify)"
        )
    if (cert is None) != (key is None):
        raise InvalidArgument(
            f"{CERT_OPTION} and {KEY_OPTION} go together (the client's certificate and its key)"
        )
    checked = TlsFiles(
        ca=_pem(ca, CA_OPTION) if ca is not None else None,
        cert=_pem(cert, CERT_OPTION) if cert is not None else None,
        key=_pem(key, KEY_OPTION) if key is not None else None,
    )
    if checked.cert is not None:
        try:
            client_context(checked)
        except (ssl.SSLError, OSError, ValueError) as exc:
            raise InvalidArgument(
                f"{CERT_OPTION}/{KEY_OPTION}: not a certificate and its key (an encrypted key "
                f"is not supported): {exc}"[:400]
            ) from None
    return checked


def load_ca(raw: str, descriptor: str) -> str:
    """``--nats-ca`` alone, checked (:func:`load_tls`): its absolute path."""
    files = load_tls(descriptor, raw)
    assert files is not None
    assert files.ca is not None
    return files.ca


def _pem(raw: str, option: str) -> str:
    """The file ``raw`` names, checked for ``option`` (module rules): its absolute path."""
    path = Path(raw).absolute()
    private = option == KEY_OPTION
    try:
        st = os.stat(path)
    except OSError as exc:
        raise InvalidArgument(f"{option}: {path} cannot be read: {exc.strerror}") from None
    if not stat.S_ISREG(st.st_mode):
        raise InvalidArgument(f"{option}: {path} is not a file (give a PEM file)")
    if st.st_size > _MAX_PEM_BYTES:
        raise InvalidArgument(f"{option}: {path} is over {_MAX_PEM_BYTES} bytes")
    if private and st.st_mode & 0o077:
        raise InvalidArgument(
            f"{option}: {path} is readable by others (mode {stat.S_IMODE(st.st_mode):o}): "
            "a private key must be 0600"
        )
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise InvalidArgument(f"{option}: {path} cannot be read: {exc.strerror}") from None
    marker, what = (_PEM_KEY, "private key") if private else (_PEM_CERT, "certificate")
    if marker not in data:
        raise InvalidArgument(f"{option}: {path} holds no PEM {what}")
    if option == CA_OPTION:
        try:
            ssl.create_default_context().load_verify_locations(cadata=data.decode("ascii"))
        except (ssl.SSLError, ValueError) as exc:
            raise InvalidArgument(
                f"{option}: {path} is not a PEM certificate bundle: {exc}"[:400]
            ) from None
    return str(path)


class _QuietEof(logging.Filter):
    """asyncio warns at every close of a TLS connection whose stream protocol (nats-py's) asks
    to stay half open, which TLS cannot: nothing is wrong, and a warning per connection on
    every process's stderr would bury the ones that matter."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "eof_received() has no effect when using ssl" not in record.getMessage()


@functools.cache
def _quiet_asyncio() -> None:
    logging.getLogger("asyncio").addFilter(_QuietEof())


def client_context(files: TlsFiles | None) -> ssl.SSLContext:
    """The client's context: the CA bundle of ``files`` (none: the system's trust store), the
    server's certificate and host name verified; its certificate and key, if given, shown to
    servers that verify their clients."""
    _quiet_asyncio()
    files = files or TlsFiles()
    context = ssl.create_default_context(cafile=files.ca)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    if files.cert is not None:
        # an encrypted key would make OpenSSL prompt on the terminal, and a session's
        # processes have none to answer: no password, so such a key is refused instead
        context.load_cert_chain(files.cert, files.key, password=lambda: b"")
    assert context.check_hostname  # never turned off (module rules)
    assert context.verify_mode == ssl.CERT_REQUIRED
    return context


@functools.cache
def tls_mismatch() -> type[Exception]:
    """The type of a scheme mismatch (module rules): a nats-py error, so that the client's
    connect loop counts it as a failed attempt (made on first use: nats-py is imported only
    when a connection is)."""
    from nats.errors import Error

    return type("TlsMismatch", (Error,), {"__doc__": "A server that does not match the scheme."})


def is_tls_failure(exc: BaseException) -> bool:
    """A connection refused for TLS: a failed handshake or verification, or a scheme mismatch
    (a later try is unlikely to fare better)."""
    return isinstance(exc, (ssl.SSLError, tls_mismatch()))


def tls_cause(exc: BaseException) -> str:
    """One line saying why TLS failed (the verification's reason when there is one)."""
    if isinstance(exc, ssl.SSLCertVerificationError):
        return f"TLS: certificate verify failed: {exc.verify_message}"
    if isinstance(exc, ssl.SSLError):
        return f"TLS: {exc.reason or exc}"
    return f"TLS: {exc}"


@functools.cache
def client_class(tls: bool) -> type[Any]:
    """A nats-py client that holds a connection to its scheme (module rules)."""
    from nats.aio.client import Client

    mismatch = tls_mismatch()

    class SchemeClient(Client):
        async def _process_info(
            self, info: dict[str, Any], initial_connection: bool = False
        ) -> None:
            # called with the server's first INFO, before the client upgrades or sends CONNECT
            if initial_connection:
                required = bool(info.get("tls_required"))
                if tls and not required:
                    if not info.get("tls_available"):
                        raise mismatch("the server does not offer TLS (tls:// requires it)")
                    info["tls_required"] = True  # offered, not required: upgrade all the same
                if not tls and required:
                    raise mismatch(
                        "the server requires TLS: give --transport tls://... (and --nats-ca)"
                    )
            await super()._process_info(info, initial_connection)

    return SchemeClient
