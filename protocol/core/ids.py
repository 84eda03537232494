"""Opaque, session-scoped identifiers.

An id is ``shepherd-<kind>-<hex>``: the kind makes a misdirected id fail loudly (an agent id
given to ``watch`` is refused, not guessed at), the hex part is random and means nothing.
Ids are only ever valid inside the session that made them; the registries there are the
authority. Ids are also used as file names in the mailbox, so the grammar is strict: a
path-like or otherwise odd string can never pass :func:`parse_id`.

Agent *names* (``scout``) are a separate, human grammar; :func:`is_valid_name` checks it.
"""

from __future__ import annotations

import enum
import re

from protocol.core.errors import InvalidHandle

__all__ = [
    "PARENT_ID",
    "IdKind",
    "an_id_of",
    "is_id_of",
    "is_valid_name",
    "kind_of",
    "make_id",
    "parse_id",
]

#: The parent supervisor's address in every session ("the Shepherd").
PARENT_ID = "shepherd"


class IdKind(enum.StrEnum):
    SESSION = "session"
    AGENT = "agent"
    TASK = "task"
    MESSAGE = "message"
    WATCHER = "watcher"
    PROMPT = "prompt"


# \Z, not $: "$" also matches before a trailing newline, which must never pass as an id
_ID_RE = re.compile(r"^shepherd-(session|agent|task|message|watcher|prompt)-([0-9a-f]{8,64})\Z")
_NAME_RE = re.compile(r"^[a-z][a-z0-9_-]{0,31}\Z")
# the same grammar, one kind each (fullmatch: the whole string, no trailing newline), and the
# kind named by _ID_RE's first group: a dict lookup instead of an Enum call per id
_ID_OF_KIND = {kind: re.compile(rf"shepherd-{kind.value}-[0-9a-f]{{8,64}}") for kind in IdKind}
_KIND_NAMED = {kind.value: kind for kind in IdKind}
_MAX_SHOWN = 80
# what make_id checks and prepends (an Enum's ``value`` is a descriptor call: one per id made)
_TOKEN_RE = re.compile(r"[0-9a-f]{8,64}")
_PREFIX = {kind: f"shepherd-{kind.value}-" for kind in IdKind}


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= _MAX_SHOWN else text[:_MAX_SHOWN] + "…"


def make_id(kind: IdKind, token: str) -> str:
    """Build an id from a hex token (the caller supplies randomness: protocol has none)."""
    if not isinstance(token, str) or _TOKEN_RE.fullmatch(token) is None:
        raise ValueError(f"token must be 8-64 lowercase hex characters, got {_shown(token)}")
    return _PREFIX[kind] + token


def kind_of(value: str) -> IdKind | None:
    """The kind of a well-formed id, or ``None`` for anything else."""
    if not isinstance(value, str):
        return None
    match = _ID_RE.match(value)
    return _KIND_NAMED[match.group(1)] if match else None


def is_id_of(value: object, kind: IdKind) -> bool:
    """``kind_of(value) is kind``, without finding out which kind a non-matching id is."""
    return isinstance(value, str) and _ID_OF_KIND[kind].fullmatch(value) is not None


def an_id_of(kind: IdKind) -> str:
    """``"an agent id"``, ``"a task id"``: the kind with its article, for messages."""
    return f"{'an' if kind.value[0] in 'aeiou' else 'a'} {kind.value} id"


def parse_id(value: object, expected: IdKind | None = None) -> str:
    """Validate an id (optionally of one kind) and return it; raise ``invalid_handle`` naming it."""
    if not isinstance(value, str):
        raise InvalidHandle(f"{_shown(value)} is not an id")
    kind = kind_of(value.strip())
    if kind is None:
        raise InvalidHandle(f"{_shown(value)} is not a Shepherd id")
    if expected is not None and kind is not expected:
        raise InvalidHandle(f"{value} is {an_id_of(kind)}, not {an_id_of(expected)}")
    return value.strip()


def is_valid_name(value: object) -> bool:
    """Agent names: lowercase, start with a letter, letters/digits/``-``/``_``, at most 32;
    never ``shepherd`` and never id-shaped (``shepherd-…``), so a name cannot pose as an id."""
    return (
        isinstance(value, str)
        and _NAME_RE.match(value) is not None
        and value != PARENT_ID
        and not value.startswith("shepherd-")
    )
