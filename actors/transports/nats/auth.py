"""Identity on the wire: NATS credentials per process, so that the *server* refuses a child
that publishes into another child's inbox, reads another's consumer, or manages the streams.

NATS decentralized authentication (operator mode) with a memory resolver: the servers trust one
operator and preload its accounts from their configuration; a user is a JWT signed by its
account's key, checked by the server at connect without asking anyone. So the parent, which
holds the account's seed, mints a user per child when it spawns it: no server restart and no
server change per child.

``python -m actors.transports.nats.auth DIR`` makes an authority in ``DIR`` (0700, which must not
exist or be empty): an operator, a system account and the session account, and writes

- ``DIR/server.conf``: the block to include in every server's configuration (``include``), with
  the operator's JWT and the two accounts' JWTs (public: no secret in it);
- ``DIR/account.nk`` (0600): the account's seed, the parent's secret. Whoever holds it is
  anyone in the account; the operator's and the system account's seeds are not kept (nothing
  needs them once the JWTs are signed; make a new authority to change them).

``serve --transport nats://... --nats-auth DIR`` loads it (:meth:`Authority.load`: a missing
or empty value, a directory or seed readable by others, a seed that is not an account's are
``invalid_argument`` naming ``--nats-auth``). The parent and its CLI clients connect as a user
with every right in the account, minted in memory. Each child gets
:meth:`Authority.child_credentials`, written 0600 in its private directory (on a node's host:
the parent sends them in the spawn request to that node only). What each user may do is
:mod:`actors.transports.nats.permissions`.

``python -m actors.transports.nats.auth DIR --node HOST [--out FILE]`` mints the user of the node
named ``HOST`` (``shepherd node --name HOST --nats-creds FILE``; default ``DIR/nodes/HOST.creds``,
0600, never overwritten): the authority's owner copies it to that host. A node's user can be
withdrawn only by making a new authority (the account's JWT lists no revocations).
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import stat
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from actors.transports.nats.permissions import (
    CHILD_USER,
    NODE_USER,
    check_node_name,
    child_inbox_prefix,
    child_permissions,
    node_permissions,
    reply_stream,
)
from protocol.core.errors import InvalidArgument, ShepherdError
from protocol.core.limits import MAX_OPTION_CHARS

__all__ = [
    "ACCOUNT_SEED",
    "SERVER_CONF",
    "Authority",
    "NatsLogin",
    "child_inbox_prefix",
    "creds_text",
    "make_authority",
    "reply_stream",
    "reply_subject",
    "write_private",
]

SERVER_CONF = "server.conf"
ACCOUNT_SEED = "account.nk"
#: the field every refusal names
OPTION = "--nats-auth"
_HEADER = {"typ": "JWT", "alg": "ed25519-nkey"}
#: an account's limits: unlimited, with JetStream (enabled by giving it storage)
_UNLIMITED = {
    "subs": -1,
    "data": -1,
    "payload": -1,
    "imports": -1,
    "exports": -1,
    "wildcards": True,
    "conn": -1,
    "leaf": -1,
}
_JETSTREAM = {"mem_storage": -1, "disk_storage": -1, "streams": -1, "consumer": -1}


def reply_subject(session_id: str, agent_id: str, inbox: str) -> str:
    return f"shepherd.{session_id}.reply.{agent_id}.{inbox}"


@dataclass(frozen=True)
class NatsLogin:
    """Who a process is on the servers: its ``.creds`` (a child: the path of its file; the
    parent: the text, minted in memory) and, for a child, its agent id (its inbox prefix, and
    where its one-shot inboxes are: :class:`actors.transports.nats.replies.Places`)."""

    credentials: str
    in_memory: bool = False
    owner: str | None = None
    #: its reply prefix when it is not a child's (a node's)
    inbox_prefix: str | None = None

    def __repr__(self) -> str:  # never the credentials' text
        return f"NatsLogin(owner={self.owner!r}, inbox_prefix={self.inbox_prefix!r})"

    def connect_options(self) -> dict[str, Any]:
        from nats.aio.client import RawCredentials

        creds = RawCredentials(self.credentials) if self.in_memory else self.credentials
        options: dict[str, Any] = {"user_credentials": creds}
        if self.owner is not None:
            options["inbox_prefix"] = child_inbox_prefix(self.owner)
        elif self.inbox_prefix is not None:
            options["inbox_prefix"] = self.inbox_prefix
        return options


# ---------------------------------------------------------------------------- keys and JWTs


def _nkeys() -> Any:
    try:
        import nkeys
    except ImportError as exc:  # pragma: no cover - the extra is missing
        raise InvalidArgument(f"{OPTION} needs nkeys: pip install 'shepherd[nats]'") from exc
    return nkeys


def _new_key(prefix_name: str) -> Any:
    nkeys = _nkeys()
    seed = nkeys.encode_seed(os.urandom(32), getattr(nkeys, prefix_name))
    return nkeys.from_seed(bytearray(seed))


def _public(key: Any) -> str:
    return bytes(key.public_key).decode()


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _json(value: object) -> bytes:
    return json.dumps(value, separators=(",", ":"), sort_keys=True).encode()


def encode_jwt(issuer: Any, subject: str, name: str, nats: dict[str, Any]) -> str:
    """A NATS JWT (version 2): header.claims.signature, base64url without padding, signed by
    ``issuer``'s nkey (ed25519). ``jti`` is a unique id: the claims' SHA-512/256 in base32 (the
    server does not check how it was made). Written here because the one Python library for
    NATS JWTs (``nats-jwt``) says of itself that it is not well tested."""
    claims: dict[str, Any] = {
        "iat": int(time.time()),
        "iss": _public(issuer),
        "name": name,
        "sub": subject,
        "nats": nats,
    }
    digest = hashlib.new("sha512_256", _json(claims)).digest()
    claims["jti"] = base64.b32encode(digest).rstrip(b"=").decode()
    signed = f"{_b64(_json(_HEADER))}.{_b64(_json(claims))}"
    return f"{signed}.{_b64(bytes(issuer.sign(signed.encode())))}"


def creds_text(user_jwt: str, seed: str) -> str:
    """A ``.creds`` file as nsc writes it (what nats-py's ``user_credentials`` reads)."""
    return (
        "-----BEGIN NATS USER JWT-----\n"
        f"{user_jwt}\n"
        "------END NATS USER JWT------\n\n"
        "************************* IMPORTANT *************************\n"
        "NKEY Seed printed below can be used to sign and prove identity.\n"
        "NKEYs are sensitive and should be treated as secrets.\n\n"
        "-----BEGIN USER NKEY SEED-----\n"
        f"{seed}\n"
        "------END USER NKEY SEED------\n\n"
        "*************************************************************\n"
    )


def write_private(path: Path, data: str) -> None:
    """Write ``data`` to a new file only this user can read (0600; never through a link)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        os.fchmod(fd, 0o600)
        os.write(fd, data.encode())
        os.fsync(fd)
    finally:
        os.close(fd)


# ---------------------------------------------------------------------------- the authority


def make_authority(directory: Path) -> Path:
    """Make an operator, a system account and the session account in ``directory`` (see the
    module rules); returns the path of the server's configuration block."""
    directory = Path(directory)
    if directory.exists() and (not directory.is_dir() or any(directory.iterdir())):
        raise InvalidArgument(
            f"{directory} exists and is not an empty directory: an authority is never "
            "overwritten (servers may trust it); name a new directory"
        )
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(directory, 0o700)
    operator = _new_key("PREFIX_BYTE_OPERATOR")
    system = _new_key("PREFIX_BYTE_ACCOUNT")
    account = _new_key("PREFIX_BYTE_ACCOUNT")
    operator_jwt = encode_jwt(
        operator,
        _public(operator),
        "shepherd",
        {"type": "operator", "version": 2, "system_account": _public(system)},
    )

    def account_jwt(key: Any, name: str, limits: dict[str, Any]) -> str:
        nats = {"limits": limits, "default_permissions": {"pub": {}, "sub": {}}}
        return encode_jwt(operator, _public(key), name, {**nats, "type": "account", "version": 2})

    conf = (
        "# Shepherd's NATS authority (python -m actors.transports.nats.auth): include it in each "
        "server's\n# configuration. Public keys and signed JWTs only; the account's seed is "
        "account.nk.\n"
        f"operator: {operator_jwt}\n"
        f"system_account: {_public(system)}\n"
        "resolver: MEMORY\n"
        "resolver_preload: {\n"
        f"  {_public(system)}: {account_jwt(system, 'SYS', _UNLIMITED)}\n"
        f"  {_public(account)}: {account_jwt(account, 'shepherd', _UNLIMITED | _JETSTREAM)}\n"
        "}\n"
    )
    write_private(directory / SERVER_CONF, conf)
    write_private(directory / ACCOUNT_SEED, bytes(account.seed).decode() + "\n")
    return directory / SERVER_CONF


def private_stat(path: Path, prefix: str, must: str, *, file_only: bool = False) -> os.stat_result:
    """``path``'s own status if it is this user's and nobody else's (never through a symbolic
    link; ``file_only``: a regular file), else ``invalid_argument`` starting with ``prefix``
    and saying the mode it ``must`` have."""
    try:
        info = path.lstat()
    except FileNotFoundError:
        raise InvalidArgument(f"{prefix}{path} does not exist") from None
    except OSError as exc:
        raise InvalidArgument(f"{prefix}{path} cannot be read: {exc.strerror or exc}") from None
    if stat.S_ISLNK(info.st_mode):
        raise InvalidArgument(f"{prefix}{path} is a symbolic link")
    if file_only and not stat.S_ISREG(info.st_mode):
        raise InvalidArgument(f"{prefix}{path} is not a file")
    if info.st_uid != os.getuid():
        raise InvalidArgument(f"{prefix}{path} belongs to another user")
    if info.st_mode & 0o077:
        mode = stat.S_IMODE(info.st_mode)
        raise InvalidArgument(
            f"{prefix}{path} is readable by others (mode {mode:o}; it must be {must})"
        )
    return info


def _private(path: Path, what: str) -> os.stat_result:
    return private_stat(path, f"{OPTION}: {what} ", "0700 for the directory, 0600 for the seed")


class Authority:
    """The parent's side: the account's key, which mints users."""

    def __init__(self, account: Any, directory: Path) -> None:
        self._account = account
        self.directory = directory

    @classmethod
    def load(cls, raw: str) -> Authority:
        """The authority in directory ``raw`` (``--nats-auth``), checked (module rules)."""
        if not raw or not raw.strip():
            raise InvalidArgument(f"{OPTION} is empty: name the directory of the authority")
        if len(raw) > MAX_OPTION_CHARS:
            raise InvalidArgument(f"{OPTION} is longer than {MAX_OPTION_CHARS} characters")
        if "\0" in raw:
            raise InvalidArgument(f"{OPTION} contains a NUL character")
        directory = Path(raw).absolute()
        if not stat.S_ISDIR(_private(directory, "directory").st_mode):
            raise InvalidArgument(f"{OPTION}: {directory} is not a directory")
        seed_path = directory / ACCOUNT_SEED
        if not stat.S_ISREG(_private(seed_path, "the account seed").st_mode):
            raise InvalidArgument(f"{OPTION}: {seed_path} is not a file")
        raw_seed = seed_path.read_bytes()[:4096].strip()
        nkeys = _nkeys()
        try:
            if not raw_seed.startswith(b"SA"):
                raise ValueError("not an account seed (an account's seed starts with SA)")
            account = nkeys.from_seed(bytearray(raw_seed))
        except Exception as exc:
            raise InvalidArgument(
                f"{OPTION}: {seed_path} does not hold an account's nkey seed: {exc!r:.200}"
            ) from None
        return cls(account, directory)

    @property
    def account(self) -> str:
        return _public(self._account)

    def _user(self, name: str, permissions: dict[str, Any]) -> str:
        user = _new_key("PREFIX_BYTE_USER")
        nats = {"subs": -1, "data": -1, "payload": -1, **permissions, "type": "user"}
        user_jwt = encode_jwt(self._account, _public(user), name, {**nats, "version": 2})
        return creds_text(user_jwt, bytes(user.seed).decode())

    def parent_credentials(self) -> str:
        """A user with every right in the account (the parent, its CLI clients)."""
        return self._user("shepherd-parent", {"pub": {}, "sub": {}})

    def parent_login(self) -> NatsLogin:
        return NatsLogin(self.parent_credentials(), in_memory=True)

    def child_credentials(self, session_id: str, agent_id: str, parent_inbox: str) -> str:
        """``agent_id``'s user, allowed only what it needs
        (:mod:`actors.transports.nats.permissions`)."""
        permissions = child_permissions(session_id, agent_id, parent_inbox)
        return self._user(f"{CHILD_USER} {agent_id}", permissions)

    def node_credentials(self, name: str) -> str:
        """The user of the node named ``name`` (:mod:`actors.transports.nats.permissions`)."""
        return self._user(f"{NODE_USER} {name}", node_permissions(name))

    def write_child(self, path: Path, session_id: str, agent_id: str, parent_inbox: str) -> None:
        """A new user for ``agent_id`` in ``path`` (0600; replacing the one a bridge of it had
        before)."""
        path.unlink(missing_ok=True)
        write_private(path, self.child_credentials(session_id, agent_id, parent_inbox))


_USAGE = """usage: python -m actors.transports.nats.auth DIR
  makes a NATS authority for Shepherd in DIR (new or empty): include
  DIR/server.conf in each server's configuration, then
  shepherd serve --transport nats://... --nats-auth DIR
usage: python -m actors.transports.nats.auth DIR --node HOST [--out FILE]
  mints the NATS user of the node named HOST (FILE, 0600, default DIR/nodes/HOST.creds):
  copy it to that host, then shepherd node --name HOST --nats-creds FILE ...
"""


def write_node(raw_dir: str, name: str, out: str | None) -> Path:
    """Mint node ``name``'s user into ``out`` (never overwriting a file)."""
    authority = Authority.load(raw_dir)
    check_node_name(name, "--node")
    if out is None:
        (authority.directory / "nodes").mkdir(mode=0o700, exist_ok=True)
        path = authority.directory / "nodes" / f"{name}.creds"
    else:
        path = Path(out).absolute()
    try:
        write_private(path, authority.node_credentials(name))
    except FileExistsError:
        raise InvalidArgument(
            f"--out: {path} exists (a node's credentials are never overwritten)"
        ) from None
    return path


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    try:
        if len(args) == 1 and not args[0].startswith("-"):
            made = make_authority(Path(args[0]).absolute())
        elif len(args) in (3, 5) and args[1] == "--node" and args[3:4] in ([], ["--out"]):
            made = write_node(args[0], args[2], args[4] if len(args) == 5 else None)
        else:
            sys.stderr.write(_USAGE)
            return 2
    except (ShepherdError, OSError) as exc:
        sys.stderr.write(f"error: {exc}\n")
        return 2
    sys.stdout.write(f"{made}\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
