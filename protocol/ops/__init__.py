"""The operation table: every operation of a session, written once.

One :class:`Op` per operation: its name, its arguments Struct (``protocol.calls.api``: the types and
bounds; the Struct is an ``Args`` of its result type), one :class:`Param` per argument field
(what a model is told about it, and how the command line spells it), the command line's help,
the model-facing tool's text, and the human view of its answer (``protocol.calls.views``). Every
surface is generated from it:

==========================  =================================================================
surface                     what it takes from the table
==========================  =================================================================
``shepherd COMMAND``        sub-command, positional arguments, options, help, types, choices;
                            flags to arguments; paging (``pager``); the view; the exit status
``Supervisor.call``         the name to the Args Struct (:data:`OPERATIONS`), checked
``Session.delegate`` ...    a method per operation (:class:`Method`), typed by the Struct
tools, MCP                  ``shepherd_<name>`` for each entry with a ``tool``
(``protocol.ops.tools``) ``shepherd-child``          the child's ``message``, ``done`` and
``approve-request``
                            (:data:`CHILD`), the same Structs as its tools
                            ``shepherd_message`` / ``shepherd_done`` /
                            ``shepherd_request_approval``
==========================  =================================================================

The entries are written in :mod:`protocol.ops.parent` (the batch operations in
:mod:`protocol.ops.batch`, the watchdog's in :mod:`protocol.ops.watchdog`) and
:mod:`protocol.ops.child`; the shape
of one is :mod:`protocol.ops.spec`. Adding an operation is one entry (with its Structs in
``protocol.calls.api`` and its handler in the session). Rules, checked at import:

- every field of the Args Struct has exactly one :class:`Param` (appending a field to a Struct
  cannot leave a surface behind);
- the command line lists positional arguments and options in field order, so the Python
  methods take their positional arguments in the same order.

Sans-IO: data and pure functions; the surfaces do the parsing, printing and calling.
"""

from __future__ import annotations

from typing import Any

from protocol.calls import api
from protocol.core.errors import InvalidArgument
from protocol.ops import batch, child, child_watchdog, parent, watchdog, worktrees
from protocol.ops.parent import WAIT_TIMED_OUT
from protocol.ops.spec import Method, Op, Param, Role, Tool, field_kind

__all__ = [
    "CHILD",
    "OPERATIONS",
    "PARENT",
    "WAIT_TIMED_OUT",
    "WATCHDOG",
    "Method",
    "Op",
    "Param",
    "Role",
    "Tool",
    "field_kind",
    "parent_op",
]

#: the parent's operations: every entry of :mod:`protocol.ops.parent`, in the order written
#: there, then the worktrees' and the batch operations (the order the command line and the
#: tools list them)
PARENT: tuple[Op[Any], ...] = (
    *(v for v in vars(parent).values() if isinstance(v, Op)),
    *(v for v in vars(worktrees).values() if isinstance(v, Op)),
    *(getattr(batch, name) for name in batch.__all__),
)
#: the watchdog's operations (``shepherd watchdog ...``, the ``watchdog_*`` tools), listed
#: after the others (:mod:`protocol.ops.watchdog`)
WATCHDOG: tuple[Op[Any], ...] = watchdog.WATCHDOG
#: the child's operations (``shepherd-child message|done`` and the child's tools), then a
#: watchdog agent's (``shepherd-child watchdog-*``: :mod:`protocol.ops.child_watchdog`)
CHILD: tuple[Op[Any], ...] = (
    *(v for v in vars(child).values() if isinstance(v, Op)),
    *child_watchdog.CHILD_WATCHDOG,
)

_BY_NAME: dict[str, Op[Any]] = {op.name: op for op in (*PARENT, *WATCHDOG)}
#: the session's operations (what ``Session.run`` takes) by name
OPERATIONS: dict[str, type[api.Arguments[Any]]] = {
    op.name: op.args for op in (*PARENT, *WATCHDOG) if not op.host
}


def parent_op(name: str) -> Op[Any]:
    """The parent operation (the watchdog's too) called ``name``; ``invalid_argument`` for an
    unknown one."""
    op = _BY_NAME.get(name)
    if op is None:
        raise InvalidArgument(f"unknown operation {name!r}")
    return op
