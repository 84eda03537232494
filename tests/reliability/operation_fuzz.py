"""Schema-driven fuzzing of every operation: the inputs, and what a good answer is.

Every parent operation (each MCP tool, plus the operations without one: ``prompt``, ``wait``,
``result``, ``fail``) and every child command has a JSON schema generated from its Args Struct
(``protocol.ops.tools``). :func:`calls` draws arguments from that schema with
``hypothesis-jsonschema`` (so the fuzzer follows the schema as it changes), then, most of the
time, points handles at live things (an agent's name, a task's id) so the call reaches the
session's rules, and often spoils one field with a hostile value: huge, tiny, NaN, ±inf, -0,
integers past 64 bits, empty, very long and odd strings, ids of the wrong kind, wrong types,
unknown fields, missing required ones.

A good answer is data, or a typed error (:data:`KNOWN_CODES`); anything else (an untyped
exception, ``internal_error``, a traceback) is a bug. The canary then checks the session still
keeps its promises (``tests/hostile/canary.py``).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, cast

from hypothesis import strategies as st
from hypothesis_jsonschema import from_schema

from protocol import ops
from protocol.ops import tools

__all__ = [
    "CHILD_SCHEMAS",
    "HOSTILE",
    "KNOWN_CODES",
    "SCHEMAS",
    "World",
    "calls",
    "child_argv",
]

#: every error code an operation may answer with on purpose
KNOWN_CODES = frozenset(
    {
        "invalid_handle",
        "invalid_transition",
        "agent_busy",
        "unresolved_requests",
        "mixed_ids",
        "duplicate_ids",
        "forbidden_sender",
        "invalid_argument",
        "invalid_envelope",
        "limit_exceeded",
        "session_unavailable",
    }
)

#: values that break naive code: numbers a timer or a JSON encoder chokes on, strings a path, a
#: shell or a terminal does, ids of the wrong kind, and wrong types
HOSTILE: tuple[Any, ...] = (
    math.nan,
    math.inf,
    -math.inf,
    -0.0,
    0.0,
    1e300,
    -1e300,
    5e-324,
    2**63,
    2**64,
    -(2**63) - 1,
    10**30,
    -1,
    True,
    None,
    "",
    " ",
    "\x00",
    "\u2028\u202e",
    "x" * 70_000,
    "🐑" * 5_000,
    "../../../../etc/passwd",
    "/etc/passwd",
    "shepherd",
    "parent",
    "-rf",
    "--json",
    "{message}",
    "$(touch /tmp/shepherd-fuzz-pwned)",
    "shepherd-task-0000000000000000",
    "shepherd-agent-0000000000000000",
    "shepherd-session-0000000000000000",
    "shepherd-message-../../x",
    "shepherd-watcher-0000000000000000",
    [],
    ["x"] * 2_000,
    {},
    {"nested": {"deep": [1, 2, {"x": None}]}},
)


def _schemas() -> dict[str, tuple[str, dict[str, Any]]]:
    """name -> (operation, schema): every MCP tool, and the operations without a tool."""
    found = {spec.name: (spec.op, spec.parameters) for spec in tools.mcp_tools()}
    with_tool = {op for op, _ in found.values()}
    for op, args_type in ops.OPERATIONS.items():
        if op not in with_tool:
            found[f"op:{op}"] = (op, tools.parameters_of(args_type))
    return found


SCHEMAS: dict[str, tuple[str, dict[str, Any]]] = _schemas()
CHILD_SCHEMAS: dict[str, tuple[str, dict[str, Any]]] = {
    spec.name: (spec.op, spec.parameters) for spec in tools.child_tools()
}
_STRATEGIES: dict[str, st.SearchStrategy[dict[str, Any]]] = {}


def _strategy(name: str, schema: dict[str, Any]) -> st.SearchStrategy[dict[str, Any]]:
    if name not in _STRATEGIES:
        # an object schema draws dicts
        _STRATEGIES[name] = cast(st.SearchStrategy[dict[str, Any]], from_schema(schema))
    return _STRATEGIES[name]


#: field name -> which kind of live handle may stand in it
HANDLE_FIELDS = {
    "target": "agent",
    "agent": "agent",
    "task_id": "task",
    "reply_to": "request",
    "script": "script",
    "cwd": "directory",
}


@dataclass
class World:
    """Live things a call may name: filled by the harness as the session runs."""

    handles: dict[str, list[str]] = field(default_factory=dict)

    def add(self, kind: str, value: str) -> None:
        values = self.handles.setdefault(kind, [])
        if value not in values:
            values.append(value)
            del values[:-50]  # the newest fifty of each kind


@st.composite
def calls(
    draw: st.DrawFn,
    world: World,
    schemas: dict[str, tuple[str, dict[str, Any]]] = SCHEMAS,
    adjust: Callable[[str, dict[str, Any]], None] | None = None,
) -> tuple[str, str, dict[str, Any], str]:
    """``(name, operation, arguments, how)``: schema-valid, aimed at live things, then often
    spoiled; ``how`` says which (for the counts)."""
    name = draw(st.sampled_from(sorted(schemas)))
    op, schema = schemas[name]
    args: dict[str, Any] = dict(draw(_strategy(name, schema)))
    # The draws never depend on what the world holds (Hypothesis replays choice sequences and
    # refuses a strategy whose shape changes between runs): indices are drawn, then applied.
    for key in sorted(schema.get("properties", {})):
        kind = "task" if key == "ids" else HANDLE_FIELDS.get(key)
        if kind is None:
            continue
        aim = draw(st.integers(0, 3)) > 0
        picks = draw(st.lists(st.integers(0, 49), min_size=1, max_size=3))
        known = world.handles.get(kind, [])
        if aim and known:
            chosen = [known[i % len(known)] for i in picks]
            args[key] = chosen if key == "ids" else chosen[0]
    if adjust is not None:
        adjust(op, args)
    how = draw(st.sampled_from(["valid", "valid", "hostile", "hostile", "extra", "missing"]))
    properties = sorted(schema.get("properties", {}))
    if how == "hostile" and properties:
        args[draw(st.sampled_from(properties))] = draw(st.sampled_from(HOSTILE))
    elif how == "extra":
        args[draw(st.sampled_from(["bogus", "__class__", "capability", "session_id"]))] = draw(
            st.sampled_from(HOSTILE)
        )
    elif how == "missing" and schema.get("required"):
        args.pop(draw(st.sampled_from(schema["required"])), None)
    else:
        how = "valid"
    return name, op, args, how


def child_argv(op: str, args: dict[str, Any]) -> list[str]:
    """The ``shepherd-child`` command line for a child tool call (values as strings, as a
    shell would pass them; ``--`` before the positionals so none is read as an option)."""
    argv = [op]
    text = {k: v if isinstance(v, str) else repr(v) for k, v in args.items() if v is not None}
    if op == "message":
        for flag, key in (("--reply-to", "reply_to"), ("--thread", "thread_id")):
            if key in text:
                argv += [flag, text[key]]
        for flag, key in (("--expects-reply", "expects_reply"), ("--steer", "steer")):
            if args.get(key) is True:
                argv.append(flag)
        argv += ["--json", "--", text.get("target", ""), text.get("message", "")]
    elif op == "approve-request":
        # Nobody answers approvals here: a valid request waits for its deadline, so the round
        # gives it at most a second (a valid value stays valid; a hostile one is kept as it is).
        timeout = args.get("timeout_s")
        if isinstance(timeout, int | float) and not isinstance(timeout, bool) and timeout > 0:
            argv += ["--timeout", str(min(timeout, 1.0))]
        else:
            argv += ["--timeout", text.get("timeout_s", "1")]
        argv += ["--json", "--", text.get("message", "")]
    else:
        if "status" in text:
            argv += ["--status", text["status"]]
        if "summary" in text:
            argv += ["--summary", text["summary"]]
        if args.get("cancel_requests") is True:
            argv.append("--cancel-requests")
        argv.append("--json")
    return argv
