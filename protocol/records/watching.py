"""Which tasks a ``watch`` / ``wait`` call names: validation and normalisation of its ids.

Rules: at least one id; each must be a task id of this session or a compatibility prompt id
(which means its task, and only that); agent ids and anything else are refused naming the id;
an id (or a prompt and its task) named twice is ``duplicate_ids``; task ids and prompt ids
cannot be mixed in one call.
"""

from __future__ import annotations

from collections.abc import Container, Mapping, Sequence

from protocol.core.errors import DuplicateIds, InvalidArgument, InvalidHandle, MixedIds
from protocol.core.ids import IdKind, an_id_of, kind_of

__all__ = ["resolve_watch_ids"]


def resolve_watch_ids(
    raw_ids: Sequence[object], tasks: Container[str], prompts: Mapping[str, str]
) -> tuple[str, ...]:
    """The task ids named by ``raw_ids``, in the caller's order, or a typed error."""
    if not raw_ids:
        raise InvalidArgument("watch needs at least one task id")
    ids: list[str] = []
    named: set[str] = set()  # ``ids`` as a set: a duplicate found without a scan of the list
    kinds: set[IdKind] = set()
    for raw in raw_ids:
        value = raw.strip() if isinstance(raw, str) else raw
        kind = kind_of(value) if isinstance(value, str) else None
        if kind is None or not isinstance(value, str):
            raise InvalidHandle(f"{raw!r} is not a task id")
        if kind not in (IdKind.TASK, IdKind.PROMPT):
            raise InvalidHandle(f"{value} is {an_id_of(kind)}; watch takes task ids")
        if value in named:
            raise DuplicateIds(f"{value} is named more than once")
        if kind is IdKind.TASK and value not in tasks:
            raise InvalidHandle(f"no task {value} in this session")
        if kind is IdKind.PROMPT:
            if value not in prompts:
                raise InvalidHandle(f"no prompt {value} in this session")
            value = prompts[value]  # a prompt id means its task, and nothing else
            if value in named:
                raise DuplicateIds(f"{raw} names task {value} twice")
        kinds.add(kind)
        ids.append(value)
        named.add(value)
    if len(kinds) > 1:
        raise MixedIds("one call cannot mix task ids and prompt ids")
    return tuple(ids)
