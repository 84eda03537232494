"""Model-facing tool schemas, generated from the operation table (:mod:`protocol.ops`).

Rules:

- One tool per table entry with a ``tool`` text: ``shepherd_<op>``, labelled ``Shepherd <op>``,
  with the entry's Args Struct and one :class:`Param` per Struct field (the entry's). A field
  without a :class:`Param` (or a :class:`Param` without a field) fails at import, so appending
  a field to an ``*Args`` Struct cannot silently leave the tools behind. ``tools.DELEGATE`` is
  the parent's ``shepherd_delegate``, ``tools.CHILD_DONE`` the child's ``shepherd_done``.
- ``parameters`` is *generated*: the Args Struct's fields, annotated with the descriptions and
  constraints of their :class:`Param`, go through ``msgspec.json.schema``; the result is
  flattened to one object root (``type: object``, ``properties``, an explicit ``required``
  list — exactly the fields without defaults — and ``additionalProperties: false``), any
  ``$defs`` inlined, and ``X | None = None`` shown as an optional ``X``.
- A tool call is validated against that same annotated Struct (so a schema constraint such
  as "at least one id" is also enforced), then converted to the operation's Args Struct.
- A child sees only :func:`child_tools`; the parent's tools never reach a child.

Sans-IO: no files, threads or clocks here. The MCP server (``actors/surfaces/mcp_server.py``), the
CLI (``shepherd tools --json``) and the Pi extensions consume these definitions.
"""

from __future__ import annotations

import typing
from collections.abc import Mapping
from typing import Annotated, Any, Literal

import msgspec

from protocol import ops
from protocol.core.errors import InvalidArgument
from protocol.ops import Op, Param, Role

__all__ = [
    "NOTIFICATIONS_PER_CALL",
    "NotificationsArgs",
    "Param",
    "Role",
    "ToolSpec",
    "args_from_tool_call",
    "child_tools",
    "mcp_tools",
    "parameters_of",
    "parent_tools",
    "to_json",
    "tool_by_name",
]

# ----------------------------------------------------------------------------- surface-only

#: at most this many notifications in one ``shepherd_notifications`` answer
NOTIFICATIONS_PER_CALL = 100


class NotificationsArgs(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """The MCP server's own ``shepherd_notifications`` (not a session operation)."""

    wait_seconds: float = 0.0


# ----------------------------------------------------------------------------- definitions


class ToolSpec(msgspec.Struct, frozen=True, kw_only=True):
    name: str
    label: str
    description: str
    prompt_snippet: str
    #: JSON schema with a flat object root (generated; see the module rules)
    parameters: dict[str, Any]
    role: Role
    #: the operation it runs (``Supervisor.call`` / ``shepherd-child`` name)
    op: str
    #: the operation's Args Struct; never part of the serialised form (:func:`to_json`)
    args_type: type[msgspec.Struct]
    #: the Args fields annotated with their Params: what a tool call is validated against
    model_type: type[msgspec.Struct]
    #: fields holding filesystem paths: the caller resolves them against *its own* directory
    path_fields: tuple[str, ...] = ()


#: ``typing.Union[...]`` and ``X | Y`` (``types.UnionType``, spelled without importing ``types``)
_UNION_ORIGINS = (typing.Union, type(int | None))


def _constrain(tp: Any, param: Param) -> Any:
    if param.choices is not None:
        allowed = typing.get_args(tp) if typing.get_origin(tp) is Literal else ()
        if not param.choices or not set(param.choices) <= set(allowed):
            raise TypeError(f"choices {param.choices} are not values of {tp}")
        literal: Any = Literal
        tp = literal[param.choices]
    bounds = (
        ("min_length", param.min_length),
        ("gt", param.gt),
        ("ge", param.ge),
        ("le", param.le),
    )
    given: dict[str, Any] = {k: v for k, v in bounds if v is not None}
    if given:
        meta = msgspec.Meta(**given)
        if typing.get_origin(tp) in _UNION_ORIGINS:
            # constraints go on the non-None arms: msgspec refuses ``min_length`` on
            # ``str | None`` but takes it on the ``str`` of ``Annotated[str, ...] | None``
            arms = [a if a is type(None) else Annotated[a, meta] for a in typing.get_args(tp)]
            tp = typing.Union[tuple(arms)]  # noqa: UP007 - built from a runtime tuple
        else:
            tp = Annotated[tp, meta]
    return Annotated[tp, msgspec.Meta(description=param.description)]


def _model_type(name: str, args_type: type[msgspec.Struct], params: dict[str, Param]) -> Any:
    fields = msgspec.structs.fields(args_type)
    names = [f.name for f in fields]
    if missing := [n for n in names if n not in params]:
        raise TypeError(f"{name}: no Param for field(s) {missing} of {args_type.__name__}")
    if extra := [n for n in params if n not in names]:
        raise TypeError(f"{name}: Param(s) {extra} name no field of {args_type.__name__}")
    spec: list[tuple[str, Any] | tuple[str, Any, Any]] = []
    for f in fields:
        annotated = _constrain(f.type, params[f.name])
        if f.required:
            spec.append((f.name, annotated))
        elif f.default is not msgspec.NODEFAULT:
            spec.append((f.name, annotated, f.default))
        else:
            spec.append((f.name, annotated, msgspec.field(default_factory=f.default_factory)))
    return msgspec.defstruct(name, spec, kw_only=True, frozen=True, forbid_unknown_fields=True)


def _inline(node: Any, defs: dict[str, Any], seen: tuple[str, ...] = ()) -> Any:
    if isinstance(node, list):
        return [_inline(item, defs, seen) for item in node]
    if not isinstance(node, dict):
        return node
    ref = node.get("$ref")
    if isinstance(ref, str):
        key = ref.removeprefix("#/$defs/")
        if key in seen:
            raise TypeError(f"recursive schema {key} cannot be inlined into a flat tool schema")
        target = {k: v for k, v in defs[key].items() if k != "title"}
        merged = {**target, **{k: v for k, v in node.items() if k != "$ref"}}
        return _inline(merged, defs, (*seen, key))
    return {k: _inline(v, defs, seen) for k, v in node.items()}


def _optional(prop: dict[str, Any]) -> dict[str, Any]:
    """``{"anyOf": [X, {"type": "null"}], "default": null}`` → ``X``: an optional field is
    shown as simply not required (as a TypeBox ``Type.Optional`` field is in Pi's tools)."""
    arms = prop.get("anyOf")
    if prop.get("default", 0) is not None or not isinstance(arms, list):
        return prop
    rest = [a for a in arms if a != {"type": "null"}]
    if len(rest) != 1 or len(rest) == len(arms):
        return prop
    out = {k: v for k, v in prop.items() if k not in ("anyOf", "default")}
    return {**out, **rest[0]}


def _parameters(model_type: Any) -> dict[str, Any]:
    raw = msgspec.json.schema(model_type)
    root = _inline(raw, raw.get("$defs", {}))
    root.pop("$defs", None)
    props = {name: _optional(prop) for name, prop in root.get("properties", {}).items()}
    return {
        "type": "object",
        "properties": props,
        "required": list(root.get("required", [])),
        "additionalProperties": False,
    }


def parameters_of(args_type: type[msgspec.Struct]) -> dict[str, Any]:
    """The flat JSON schema of any Args Struct (what a tool of it would publish, without the
    tool's descriptions): for operations without a tool, and for schema-driven tests."""
    return _parameters(args_type)


def _tool(
    *,
    name: str,
    label: str,
    role: Role,
    op: str,
    args: type[msgspec.Struct],
    description: str,
    prompt_snippet: str,
    params: Mapping[str, Param | str],
    path_fields: tuple[str, ...] = (),
) -> ToolSpec:
    """One tool; a ``params`` value that is a plain string is the field's description."""
    full = {k: Param(description=v) if isinstance(v, str) else v for k, v in params.items()}
    model = _model_type(f"{name}_parameters", args, full)
    return ToolSpec(
        name=name,
        label=label,
        description=description,
        prompt_snippet=prompt_snippet,
        parameters=_parameters(model),
        role=role,
        op=op,
        args_type=args,
        model_type=model,
        path_fields=path_fields,
    )


def _of(op: Op[Any]) -> ToolSpec:
    """The tool of one table entry."""
    assert op.tool is not None
    return _tool(
        name=op.tool.name or f"shepherd_{op.name}",
        label=op.tool.label or f"Shepherd {op.name}",
        role=op.role,
        op=op.name,
        args=op.args,
        description=op.tool.description,
        prompt_snippet=op.tool.prompt_snippet,
        params=op.params,
        path_fields=tuple(f for f, p in op.params.items() if p.path == "caller"),
    )


# ----------------------------------------------------------------------------- surface-only tools

NOTIFICATIONS = _tool(
    name="shepherd_notifications",
    label="Shepherd notifications",
    role="parent",
    op="notifications",
    args=NotificationsArgs,
    description=(
        "Return the Shepherd notifications you have not seen yet: task completions for your "
        "watches, agents' messages to you (answer with shepherd_message reply_to), and notices "
        "(stale waits, exits, timeouts). Each is returned once, also across restarts of the "
        f'server. An answer holds at most {NOTIFICATIONS_PER_CALL}; when its "more" is true, '
        "call again at once. "
        "With wait_seconds it waits up to that long for the next one when none is pending."
    ),
    prompt_snippet="Fetch new Shepherd notifications (completions, agent messages, notices)",
    params={
        "wait_seconds": Param(
            description="Wait up to this many seconds when nothing is pending (default 0)",
            ge=0.0,
            le=300.0,
        ),
    },
)

_PARENT: tuple[ToolSpec, ...] = tuple(_of(op) for op in (*ops.PARENT, *ops.WATCHDOG) if op.tool)
_CHILD: tuple[ToolSpec, ...] = tuple(_of(op) for op in ops.CHILD if op.tool)
_BY_CONSTANT: dict[str, ToolSpec] = {
    **{s.op.upper(): s for s in _PARENT if s.name.startswith("shepherd_")},
    **{f"CHILD_{s.op.upper().replace('-', '_')}": s for s in _CHILD},
}


def __getattr__(name: str) -> ToolSpec:
    """``tools.DELEGATE``, ``tools.CHILD_DONE``: a generated tool by its operation's name."""
    try:
        return _BY_CONSTANT[name]
    except KeyError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None


def parent_tools() -> tuple[ToolSpec, ...]:
    """The parent's tools, one per parent operation (``shepherd tools --json``)."""
    return _PARENT


def child_tools() -> tuple[ToolSpec, ...]:
    """The only tools a child ever gets (``shepherd tools --child --json``)."""
    return _CHILD


def mcp_tools() -> tuple[ToolSpec, ...]:
    """What the MCP server lists: the parent tools plus ``shepherd_notifications``, which the
    server answers itself (an MCP client has no other way to receive notifications)."""
    return (*_PARENT, NOTIFICATIONS)


def tool_by_name(role: Role, name: str) -> ToolSpec:
    for spec in _CHILD if role == "child" else _PARENT:
        if spec.name == name:
            return spec
    raise InvalidArgument(f"no {role} tool named {name!r}")


def to_json(spec: ToolSpec) -> dict[str, Any]:
    """The serialised form (what ``shepherd tools --json`` prints; camelCase like Pi's)."""
    return {
        "name": spec.name,
        "label": spec.label,
        "description": spec.description,
        "promptSnippet": spec.prompt_snippet,
        # a copy (through JSON: the schema is JSON by construction), so no caller can edit
        # the one shared definition
        "parameters": msgspec.json.decode(msgspec.json.encode(spec.parameters)),
    }


def args_from_tool_call(spec: ToolSpec, arguments: dict[str, Any] | None) -> msgspec.Struct:
    """Validate a tool call's arguments and return the operation's Args Struct.

    A bad call raises :class:`InvalidArgument` naming the tool and the field (msgspec's
    message carries the path, e.g. ``Expected `array` of length >= 1 - at `$.ids```).
    No published schema allows ``null``: an explicit ``null`` is refused, never read as "left
    out" (JSON clients turn NaN and infinities into ``null``, so a NaN deadline would
    otherwise become no deadline at all).
    """
    nulls = sorted(k for k, v in (arguments or {}).items() if v is None)
    if nulls:
        raise InvalidArgument(
            f"{spec.name}: {', '.join(nulls)}: null is not a value (leave the field out instead)"
        )
    try:
        checked = msgspec.convert(arguments if arguments is not None else {}, spec.model_type)
        return msgspec.convert(
            msgspec.structs.asdict(checked), spec.args_type, from_attributes=False
        )
    except msgspec.ValidationError as exc:
        raise InvalidArgument(f"{spec.name}: {exc}") from None
