"""Model-facing tool schemas, generated from the same msgspec Structs as the API and the CLI.

Rules (DESIGN §6, seed 002 §5):

- One definition per tool, written in one place: name, label, description, prompt snippet,
  the operation it maps to, its ``*Args`` Struct and one :class:`Param` per Struct field.
  A field without a :class:`Param` (or a :class:`Param` without a field) fails at import, so
  appending a field to an ``*Args`` Struct cannot silently leave the tools behind.
- ``parameters`` is *generated*: the Args Struct's fields, annotated with the descriptions and
  constraints of their :class:`Param`, go through ``msgspec.json.schema``; the result is
  flattened to one object root (``type: object``, ``properties``, an explicit ``required``
  list — exactly the fields without defaults — and ``additionalProperties: false``), any
  ``$defs`` inlined, and ``X | None = None`` shown as an optional ``X``.
- A tool call is validated against that same annotated Struct (so a schema constraint such
  as "at least one id" is also enforced), then converted to the operation's Args Struct.
- A child sees only :func:`child_tools`; the parent's tools never reach a child.

Sans-IO: no files, threads or clocks here. The MCP server (``actors/mcp_server.py``), the CLI
(``shepherd tools --json``) and the Pi extensions consume these definitions.
"""

from __future__ import annotations

import typing
from collections.abc import Mapping
from typing import Annotated, Any, Literal

import msgspec

from protocol import api, watchdog_api
from protocol.errors import InvalidArgument
from protocol.limits import Handle, OptionalText, Text
from protocol.tasks import DoneStatus

__all__ = [
    "NOTIFICATIONS_PER_CALL",
    "ChildDoneArgs",
    "ChildMessageArgs",
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

Role = Literal["parent", "child"]


# ----------------------------------------------------------------------------- child operations


class ChildMessageArgs(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """``shepherd-child message``: a child's asynchronous message (or reply)."""

    target: Handle
    message: Text
    expects_reply: bool = False
    reply_to: Handle | None = None
    thread_id: Handle | None = None
    steer: bool = False


class ChildDoneArgs(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """``shepherd-child done``: the explicit terminal signal for the child's task."""

    status: DoneStatus
    summary: OptionalText | None = None
    cancel_requests: bool = False


#: at most this many notifications in one ``shepherd_notifications`` answer
NOTIFICATIONS_PER_CALL = 100


class NotificationsArgs(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """The MCP server's own ``shepherd_notifications`` (not a session operation)."""

    wait_seconds: float = 0.0


# ----------------------------------------------------------------------------- definitions


class Param(msgspec.Struct, frozen=True, kw_only=True):
    """What the model is told about one Args field, plus optional model-facing constraints
    (msgspec ``Meta`` names: ``min_length`` is minLength for text, minItems for arrays;
    ``choices`` narrows a Literal, e.g. to hide an adapter only an in-process session has)."""

    description: str
    min_length: int | None = None
    gt: float | None = None
    ge: float | None = None
    le: float | None = None
    #: offer the model only these values of a Literal field (each must be one of the field's)
    choices: tuple[str, ...] | None = None


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
    shown as simply not required (what the seeds' ``Type.Optional`` schemas say)."""
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


def _shepherd_tool(
    op: str,
    args: type[msgspec.Struct],
    *,
    role: Role,
    description: str,
    prompt_snippet: str,
    params: Mapping[str, Param | str],
    path_fields: tuple[str, ...] = (),
) -> ToolSpec:
    """The tool of one Shepherd operation: named ``shepherd_<op>``, labelled ``Shepherd <op>``."""
    return _tool(
        name=f"shepherd_{op}",
        label=f"Shepherd {op}",
        role=role,
        op=op,
        args=args,
        description=description,
        prompt_snippet=prompt_snippet,
        params=params,
        path_fields=path_fields,
    )


_AGENT = "Agent name or agent id"
#: the fields a parent's and a child's ``shepherd_message`` share, meaning the same on both sides
_MESSAGE: dict[str, Param | str] = {
    "message": "The message text",
    "thread_id": "Conversation thread id",
    "reply_to": "Message id of the question this answers",
    "expects_reply": "True when you need an answer (default false)",
}

# ----------------------------------------------------------------------------- parent tools

SPAWN = _shepherd_tool(
    "spawn",
    api.SpawnArgs,
    role="parent",
    description=(
        "Start a new agent process in this Shepherd session and return its agent id. The agent "
        "starts idle; give it work with shepherd_delegate. Adapters: 'scripted' follows a script "
        "file (deterministic; demos and tests), 'command' runs any CLI agent once per turn from a "
        "command template, 'pi-rpc' runs the Pi coding agent."
    ),
    prompt_snippet="Start a named agent process (scripted, command or pi-rpc) and get its id",
    params={
        "name": (
            "Unique agent name: lowercase letter first, then letters, digits, '-' or '_' "
            "(at most 32); usable wherever an agent id is"
        ),
        "adapter": Param(
            description="How the agent runs (default scripted)",
            choices=("scripted", "command", "pi-rpc"),
        ),
        "script": "Script file path (required for the scripted adapter)",
        "cmd": "Command template for the command adapter; {message} is the message",
        "resume_cmd": "Command template for later turns (command adapter)",
        "cwd": "Working directory of the agent process",
        "description": "What this agent is for (shown in status)",
        "pi": "Path of the Pi binary (pi-rpc adapter; default: installed Pi)",
        "models_json": "A Pi models.json declaring the provider and model (pi-rpc adapter)",
        "provider": "Pi provider name (pi-rpc adapter)",
        "model": "Pi model id (pi-rpc adapter)",
    },
    path_fields=("script", "cwd"),
)

DELEGATE = _shepherd_tool(
    "delegate",
    api.DelegateArgs,
    role="parent",
    description=(
        "Give an agent a task and return its task id at once (it does not wait for the work). "
        "An agent has at most one active task. The task ends only when the agent calls "
        "shepherd_done (or the task is cancelled, fails or times out); an idle agent is not a "
        "finished task. Use shepherd_watch to be told when it ends."
    ),
    prompt_snippet="Delegate a task to an agent; returns a task id immediately",
    params={
        "target": _AGENT,
        "task": "The task, in full: what to do and when it is done",
        "timeout_minutes": (
            "Deadline in minutes (at most 10080, 7 days); the task times out after it. "
            "Leave it out for no deadline"
        ),
    },
)

MESSAGE = _shepherd_tool(
    "message",
    api.MessageArgs,
    role="parent",
    description=(
        "Send an asynchronous message to an agent; returns once accepted, never waits for an "
        "answer. Set expects_reply to open a request (its answer arrives later as a "
        "notification). Answer an agent's question by setting reply_to to its message id. "
        "Messages queue until the agent is idle unless steer interrupts it."
    ),
    prompt_snippet="Send an asynchronous message to an agent (answers arrive as notifications)",
    params={
        **_MESSAGE,
        "target": _AGENT,
        "task_id": "Task this message is about",
        "steer": "Interrupt the agent's current turn instead of queueing (default false)",
        "reply_timeout_s": (
            "Seconds the request stays open before it times out (at most 604800, 7 days)"
        ),
    },
)

WATCH = _shepherd_tool(
    "watch",
    api.WatchArgs,
    role="parent",
    description=(
        "Subscribe to the completion of one or more tasks. Returns at once with the results "
        "already known and the ids still pending; each pending completion arrives later as a "
        "notification (read them with shepherd_notifications). Never blocks."
    ),
    prompt_snippet="Be notified when tasks finish (returns immediately; results arrive later)",
    params={"ids": "Task ids to watch (at least one, at most 1000)"},
)

STATUS = _shepherd_tool(
    "status",
    api.StatusArgs,
    role="parent",
    description=(
        "Show the session's agents: process state, active task and its state (running, waiting "
        "for a reply, stale), pending requests and the last result."
    ),
    prompt_snippet="Show agents, their tasks and pending requests",
    params={
        "agent": "Only this agent (name or id); default all",
        "cursor": (
            "Start at this agent (default 0); an answer that could not hold every agent "
            "gives next_cursor"
        ),
    },
)

CLOSE = _shepherd_tool(
    "close",
    api.CloseArgs,
    role="parent",
    description=(
        "Stop an agent process. Its active task, if any, is cancelled; the agent's records stay "
        "readable in status."
    ),
    prompt_snippet="Stop an agent (cancels its active task)",
    params={"agent": _AGENT},
)

READ = _shepherd_tool(
    "read",
    api.ReadArgs,
    role="parent",
    description="Read the last lines of an agent's output (what it printed and its tool calls).",
    prompt_snippet="Read the last lines of an agent's output",
    params={
        "agent": _AGENT,
        "lines": "How many lines (default 50)",
        "before": "Only lines older than this line number (next_cursor of the previous answer)",
    },
)

CANCEL = _shepherd_tool(
    "cancel",
    api.CancelArgs,
    role="parent",
    description=(
        "Cancel a task: it settles as cancelled (return code 130) and the agent stops working "
        "on it. Cancelling a finished task changes nothing: its existing result is returned "
        "with already_settled true."
    ),
    prompt_snippet="Cancel a delegated task",
    params={
        "task_id": "The task id",
        "reason": "Why (kept in the task's result)",
    },
)

# ----------------------------------------------------------------------------- child tools

CHILD_MESSAGE = _shepherd_tool(
    "message",
    ChildMessageArgs,
    role="child",
    description=(
        'Send an asynchronous message to another agent, the parent ("shepherd"), or as a '
        "reply. It returns as soon as the message is accepted; it does not wait for an answer. "
        "Set expects_reply when you need an answer: the answer arrives later as a new message. "
        "Answer a question by setting reply_to to its message id."
    ),
    prompt_snippet=(
        "Send an asynchronous message to a peer agent or the parent (replies arrive later)"
    ),
    params={
        **_MESSAGE,
        "target": 'Agent name or id, or "shepherd" for the parent',
        "steer": "Interrupt the recipient instead of queueing (default false)",
    },
)

CHILD_DONE = _shepherd_tool(
    "done",
    ChildDoneArgs,
    role="child",
    description=(
        "Finish your delegated task: the only way a task ends. Call it once, when the whole task "
        "is completed, or when you are blocked or have failed. Ending your turn does not finish "
        "the task."
    ),
    prompt_snippet=(
        "Mark your delegated task completed, blocked or failed (the only way a task ends)"
    ),
    params={
        "status": "completed, blocked or failed",
        "summary": "What was done, or why not",
        "cancel_requests": (
            "Cancel your questions still waiting for a reply (otherwise 'completed' is "
            "refused while any is open)"
        ),
    },
)

# ----------------------------------------------------------------------------- surface-only tools

NOTIFICATIONS = _shepherd_tool(
    "notifications",
    NotificationsArgs,
    role="parent",
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

# The watchdog tools are written once, in protocol/watchdog_api.py; their op is the tool name,
# which the supervisor routes to the watchdog.
WATCHDOG: tuple[ToolSpec, ...] = tuple(
    _tool(
        name=t.name,
        label=t.label,
        role="parent",
        op=t.name,
        args=t.args_type,
        description=t.description,
        prompt_snippet=t.prompt_snippet,
        params=t.fields,
    )
    for t in watchdog_api.WATCHDOG_TOOLS.values()
)

_PARENT: tuple[ToolSpec, ...] = (
    SPAWN,
    DELEGATE,
    MESSAGE,
    WATCH,
    STATUS,
    CLOSE,
    READ,
    CANCEL,
    *WATCHDOG,
)
_CHILD: tuple[ToolSpec, ...] = (CHILD_MESSAGE, CHILD_DONE)


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
    """
    try:
        checked = msgspec.convert(arguments if arguments is not None else {}, spec.model_type)
        return msgspec.convert(
            msgspec.structs.asdict(checked), spec.args_type, from_attributes=False
        )
    except msgspec.ValidationError as exc:
        raise InvalidArgument(f"{spec.name}: {exc}") from None
