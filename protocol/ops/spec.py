"""The shape of an entry of the operation table (:mod:`protocol.ops`): :class:`Op`, one
:class:`Param` per argument field, the :class:`Tool` text; and :class:`Method`, an entry as a
typed Python method. Sans-IO."""

from __future__ import annotations

import typing
from collections.abc import Callable, Mapping
from typing import Any, Generic, Literal, TypeVar, overload

import msgspec

from protocol.calls import api
from protocol.calls.answers import Pager
from protocol.core.errors import InvalidArgument

__all__ = [
    "Method",
    "Op",
    "Param",
    "Role",
    "Tool",
    "entry",
    "field_kind",
    "respell",
    "struct_items",
]

Role = Literal["parent", "child"]
R = TypeVar("R")


class Param(msgspec.Struct, frozen=True, kw_only=True):
    """What the surfaces say about one Args field.

    For a model (the tool schema): ``description``, and optional constraints (msgspec ``Meta``
    names: ``min_length`` is minLength for text, minItems for arrays; ``choices`` narrows a
    Literal, e.g. to hide an adapter only an in-process session has; the command line offers
    the same choices). For the command line: ``cli`` is ``"--flag"`` for an option, a plain
    word for a positional argument (shown under that word), ``None`` for a field the command
    line does not take; ``help`` and ``metavar`` are argparse's."""

    description: str
    min_length: int | None = None
    gt: float | None = None
    ge: float | None = None
    le: float | None = None
    choices: tuple[str, ...] | None = None
    cli: str | None = None
    help: str | None = None
    metavar: str | None = None
    #: a filesystem path, resolved against the caller's directory (the session runs
    #: elsewhere): "caller" by every surface, "cli" by the command line only (a tool's is
    #: relative to the agent's directory)
    path: Literal["caller", "cli"] | None = None
    #: a text positional that takes the rest of the command line's words, joined by spaces
    #: (``watchdog set rescue_message Stop and summarise``)
    words: bool = False


class Tool(msgspec.Struct, frozen=True, kw_only=True):
    """The model-facing tool of an operation: ``shepherd_<name>``."""

    description: str
    prompt_snippet: str
    #: the tool's name when it is not ``shepherd_<operation>`` (a name with a hyphen)
    name: str | None = None
    #: the tool's label when it is not ``Shepherd <operation>``
    label: str | None = None


class Op(msgspec.Struct, Generic[R], frozen=True, kw_only=True):
    name: str
    args: type[api.Arguments[R]]
    #: one per field of ``args``, in any order (see :func:`entry`)
    params: dict[str, Param]
    #: the command line's one-line help; "" for an operation without a command
    help: str
    #: the human view of the answer's JSON-able form
    view: Callable[[Any], str]
    role: Role = "parent"
    #: the command's ``--help`` description, when it says more than ``help``
    description: str | None = None
    tool: Tool | None = None
    #: the answer is paged: how the command line follows the pages
    pager: Pager | None = None
    #: the answer comes when something settles (``timeout_s`` bounds it), not at once
    blocks: bool = False
    #: the command's exit status, from the answer (default 0)
    exit_status: Callable[[Any], int] | None = None
    #: answered by the supervisor (the host process), not by the session
    host: bool = False
    #: the command line's words when they are not the name respelled: a sub-command of a
    #: group (``watchdog status``)
    cli: str | None = None
    #: the human view of the answer when it needs the call's arguments too (``watchdog set``
    #: names the setting it changed): ``(answer, arguments)``; else :attr:`view`
    view_of_call: Callable[[Any, Mapping[str, Any]], str] | None = None

    @property
    def command(self) -> str:
        """The command line's name of it (``delegate_many``: ``shepherd delegate-many``;
        ``watchdog status`` for a sub-command)."""
        return self.cli or self.name.replace("_", "-")

    def render(self, answer: Any, call_args: Mapping[str, Any]) -> str:
        """The human view of ``answer`` to a call with ``call_args``."""
        if self.view_of_call is not None:
            return self.view_of_call(answer, call_args)
        return self.view(answer)

    def build(self, fields: Mapping[str, Any]) -> api.Arguments[R]:
        """The arguments, checked (``invalid_argument`` naming the operation and the field)."""
        if not all(isinstance(k, str) for k in fields):
            raise InvalidArgument(f"{self.name}: argument names must be strings")
        return api.convert_args(self.args, dict(fields), self.name)

    def arguments(self) -> list[tuple[str, dict[str, Any]]]:
        """The command line's arguments: ``(name or flag, keywords)`` for argparse's
        ``add_argument``, in field order; typed, with the Struct's defaults and choices."""
        fields = {f.name: f for f in msgspec.structs.fields(self.args)}
        found: list[tuple[str, dict[str, Any]]] = []
        for name, param in self.params.items():
            if param.cli is None:
                continue
            field = fields[name]
            kind = field_kind(field.type)
            spec: dict[str, Any] = {"help": param.help, "metavar": param.metavar}
            if (item := struct_items(field.type)) is not None:
                # a sequence of Structs: a repeated option, one value per required field of
                # the item, in the order the metavar names them ("--task AGENT TEXT")
                metavar = tuple((param.metavar or "").split()) or _required_of(item)
                spec = {"help": param.help, "metavar": metavar, "nargs": len(metavar)}
                found.append(
                    (
                        param.cli,
                        {**spec, "action": "append", "dest": name, "required": field.required},
                    )
                )
                continue
            if kind is bool:
                spec = {"help": param.help, "action": "store_true"}
            elif kind in (int, float):
                spec["type"] = kind
            elif typing.get_origin(kind) is Literal:
                spec["choices"] = param.choices or typing.get_args(kind)
            spec["default"] = None if field.required else field.default
            if param.cli.startswith("-"):
                if kind is tuple:  # a repeatable option: one item per use
                    spec = {**spec, "action": "append"}
                found.append((param.cli, {**spec, "dest": name, "required": field.required}))
                continue
            if kind is tuple or param.words:
                spec["nargs"] = "+"
            elif not field.required:
                spec["nargs"] = "?"
            spec["metavar"] = param.metavar or (param.cli if param.cli != name else None)
            found.append((name, spec))
        return found

    def parsed(
        self, values: Mapping[str, Any], resolve: Callable[[str], str | None]
    ) -> api.Arguments[R]:
        """The arguments a command line gave (``values`` by field name, ``None``: not given),
        paths made absolute by ``resolve`` (``None``: not given), checked."""
        return self.build(self._given(values, resolve))

    def given(
        self, values: Mapping[str, Any], resolve: Callable[[str], str | None]
    ) -> dict[str, Any]:
        """:meth:`parsed`, as the arguments will be sent: what the command line left out is
        left out."""
        given = self._given(values, resolve)
        checked: dict[str, Any] = msgspec.to_builtins(self.build(given))
        return {k: v for k, v in checked.items() if k in given}

    def _given(
        self, values: Mapping[str, Any], resolve: Callable[[str], str | None]
    ) -> dict[str, Any]:
        fields = {f.name: f for f in msgspec.structs.fields(self.args)}
        given: dict[str, Any] = {}
        for name, param in self.params.items():
            value = values.get(name) if param.cli is not None else None
            if value is not None and param.words and isinstance(value, list):
                value = " ".join(value)
            if value is not None and param.path is not None:
                value = resolve(value)
            if value is not None and (item := struct_items(fields[name].type)) is not None:
                # "--task AGENT TEXT": each group of values fills the item's required fields
                keys = _required_of(item)
                value = [dict(zip(keys, group, strict=True)) for group in value]
            if value is not None:
                given[name] = value
        return given


def field_kind(tp: Any) -> Any:
    """A field's type without ``Annotated`` and ``| None``: ``bool``, ``int``, ``float``,
    ``str``, ``tuple`` or a ``Literal``."""
    while typing.get_origin(tp) is typing.Annotated:
        tp = typing.get_args(tp)[0]
    arms = [a for a in typing.get_args(tp) if a is not type(None)]
    if typing.get_origin(tp) in (typing.Union, type(int | None)) and len(arms) == 1:
        return field_kind(arms[0])
    return tuple if typing.get_origin(tp) is tuple else tp


def struct_items(tp: Any) -> type[msgspec.Struct] | None:
    """The item type of a field that is a sequence of Structs (``tuple[DelegateItem, ...]``),
    else None."""
    while typing.get_origin(tp) is typing.Annotated:
        tp = typing.get_args(tp)[0]
    if typing.get_origin(tp) is not tuple:
        return None
    arms = typing.get_args(tp)
    item = arms[0] if arms else None
    return item if isinstance(item, type) and issubclass(item, msgspec.Struct) else None


def _required_of(item: type[msgspec.Struct]) -> tuple[str, ...]:
    """An item Struct's required fields, in order: what the command line gives per item."""
    return tuple(f.name for f in msgspec.structs.fields(item) if f.required)


def entry(
    name: str,
    args: type[api.Arguments[R]],
    params: Mapping[str, Param | str],
    **entry: Any,
) -> Op[R]:
    """One entry; a ``params`` value that is a plain string is the field's description."""
    full = {k: Param(description=v) if isinstance(v, str) else v for k, v in params.items()}
    fields = list(args.__struct_fields__)
    if missing := [n for n in fields if n not in full]:
        raise TypeError(f"{name}: no Param for field(s) {missing} of {args.__name__}")
    if extra := [n for n in full if n not in fields]:
        raise TypeError(f"{name}: Param(s) {extra} name no field of {args.__name__}")
    return Op(name=name, args=args, params={f: full[f] for f in fields}, **entry)


def respell(param: Param | str, **spelling: Any) -> Param:
    """``param`` with its command-line spelling (or another part) replaced."""
    base = Param(description=param) if isinstance(param, str) else param
    return msgspec.structs.replace(base, **spelling)


class Method(Generic[R]):
    """An operation as a method of its owner (``Session.delegate``): its Args fields
    positionally in field order or by name, checked (:meth:`Op.build`), then run by the
    owner's ``run(args)``; the answer's type is the Struct's. A sequence field given one
    string takes it as the only item (``watch("t-1")``)."""

    def __init__(self, op: Op[R]) -> None:
        self.op = op
        self._fields = list(op.params)
        self._sequences = {
            f.name for f in msgspec.structs.fields(op.args) if field_kind(f.type) is tuple
        }

    @overload
    def __get__(self, obj: None, owner: type[Any]) -> Method[R]: ...
    @overload
    def __get__(self, obj: object, owner: type[Any]) -> Callable[..., R]: ...
    def __get__(self, obj: object | None, owner: type[Any]) -> Method[R] | Callable[..., R]:
        if obj is None:
            return self
        run: Callable[[api.Arguments[R]], R] = obj.run  # type: ignore[attr-defined]

        def call(*positional: Any, **named: Any) -> R:
            if len(positional) > len(self._fields):
                raise TypeError(f"{self.op.name}() takes at most {len(self._fields)} arguments")
            fields = dict(zip(self._fields, positional, strict=False))
            if twice := set(fields) & set(named):
                raise TypeError(f"{self.op.name}() got {sorted(twice)} twice")
            fields.update(named)
            for name in self._sequences & set(fields):
                if isinstance(fields[name], str):
                    fields[name] = (fields[name],)
            return run(self.op.build(fields))

        call.__name__ = call.__qualname__ = self.op.name
        call.__doc__ = f"``{self.op.name}``: {self.op.help} ({self.op.args.__name__})."
        return call
