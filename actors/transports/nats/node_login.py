"""``shepherd node --nats-creds FILE``: the node's own NATS user, minted by the authority's
owner (``python -m actors.transports.nats.auth DIR --node HOST``; its rights:
:mod:`actors.transports.nats.permissions`).

Rules:
- The file is checked before anything connects, each refusal ``invalid_argument`` naming
  ``--nats-creds``: an empty, over-long or NUL-holding value; a file that is missing, a symbolic
  link, a directory, another user's or readable by others (it must be 0600: whoever reads it
  is the node); more than :data:`~protocol.core.limits.MAX_NATS_CREDS_CHARS`; not a ``.creds`` text
  (a user JWT and its seed, the seed's key being the JWT's subject); the user of another node
  or a child's, not this node's (a child's user could not serve a node, and a node's name is
  what the servers let it read).
- It is read once: the node logs in with the text it checked (a file changed afterwards changes
  nothing until the node is started again). Whether the servers trust its signer is theirs to
  say, at connect (:class:`actors.nodes.node.NodeServer`).
"""

from __future__ import annotations

import base64
import json
import os
import re
from pathlib import Path
from typing import Any

from actors.transports.nats.auth import NatsLogin, private_stat
from actors.transports.nats.permissions import NODE_USER, node_inbox_prefix
from protocol.core.errors import InvalidArgument
from protocol.core.limits import MAX_NATS_CREDS_CHARS, MAX_OPTION_CHARS

__all__ = ["OPTION", "load_node_login"]

OPTION = "--nats-creds"
_JWT = re.compile(r"-----BEGIN NATS USER JWT-----\s*\n\s*([A-Za-z0-9_.=-]+)\s*\n")
_SEED = re.compile(r"-----BEGIN USER NKEY SEED-----\s*\n\s*(SU[A-Z2-7]+)\s*\n")


def _refuse(why: str) -> InvalidArgument:
    return InvalidArgument(f"{OPTION}: {why}")


def _read_private(raw: str) -> str:
    if not raw or not raw.strip():
        raise _refuse(
            "is empty: name the node's .creds file "
            "(python -m actors.transports.nats.auth DIR --node HOST)"
        )
    if len(raw) > MAX_OPTION_CHARS:
        raise _refuse(f"is longer than {MAX_OPTION_CHARS} characters")
    if "\0" in raw:
        raise _refuse("contains a NUL character")
    path = Path(raw).absolute()
    info = private_stat(path, f"{OPTION}: ", "0600", file_only=True)
    if info.st_size > MAX_NATS_CREDS_CHARS:
        raise _refuse(f"{path} is larger than {MAX_NATS_CREDS_CHARS} bytes: not a .creds file")
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
        try:
            data = os.read(fd, MAX_NATS_CREDS_CHARS + 1)
        finally:
            os.close(fd)
        return data.decode()
    except (OSError, UnicodeDecodeError) as exc:
        raise _refuse(f"{path} cannot be read as text: {type(exc).__name__}") from None


def _claims(jwt: str) -> dict[str, Any]:
    parts = jwt.split(".")
    if len(parts) != 3:
        raise ValueError("the JWT has not three parts")
    payload = parts[1]
    claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    if not isinstance(claims, dict) or not isinstance(claims.get("nats"), dict):
        raise ValueError("the JWT's claims are not a NATS user's")
    return claims


def load_node_login(raw: str, name: str) -> NatsLogin:
    """Node ``name``'s login from the file ``raw`` names, checked (module rules)."""
    text = _read_private(raw)
    jwt, seed = _JWT.search(text), _SEED.search(text)
    if jwt is None or seed is None:
        raise _refuse("is not a NATS .creds file (a user JWT and its nkey seed)")
    try:
        import nkeys

        claims = _claims(jwt.group(1))
        public = bytes(nkeys.from_seed(bytearray(seed.group(1).encode())).public_key).decode()
    except ImportError:  # pragma: no cover - the extra is missing
        raise _refuse("needs nkeys: pip install 'shepherd[nats]'") from None
    except Exception as exc:
        raise _refuse(f"is not a readable NATS .creds file ({type(exc).__name__})") from None
    if claims.get("nats", {}).get("type") != "user" or claims.get("sub") != public:
        raise _refuse("is not a NATS user's .creds file (its seed is not its JWT's key)")
    user = str(claims.get("name", ""))[:80]
    if user != f"{NODE_USER} {name}":
        whose = "a child's" if user.startswith("shepherd-child") else f"{user!r}'s"
        raise _refuse(
            f"these are {whose} credentials, not node {name}'s "
            f"(python -m actors.transports.nats.auth DIR --node {name})"
        )
    return NatsLogin(text, in_memory=True, inbox_prefix=node_inbox_prefix(name))
