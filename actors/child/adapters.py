"""How one kind of agent is run inside the bridge: the contract between the bridge and an
adapter (:class:`AgentContext`, :class:`Adapter`) and the registry of adapters by name
(:data:`ADAPTERS`).

Rules:
- An adapter runs on the bridge's core thread: every call into it, and every
  :class:`AgentContext` method but ``post``, happens there; its own threads hand work back
  with ``post``.
- Adapters are imported lazily by name (a pi-rpc adapter's dependencies are never loaded for
  a scripted agent); adding one is one class plus one line in :data:`ADAPTERS`.
- Each adapter checks its own options in one pure-ish function (``check_options``: it may
  look at files, never starts anything). The bridge runs it when it builds the adapter, and
  the parent runs the same one before it starts the bridge (:func:`check_spawn_options`), so
  what ``spawn`` accepts is what the child can run: a bad option is ``invalid_argument`` to
  the caller, never an agent that dies at start.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar, Protocol

from actors.child.env import ChildEnv
from actors.runtime.clock import Clock
from actors.runtime.ids import IdSource
from protocol.core.errors import InvalidArgument
from protocol.wire.envelopes import AckEnvelope, AnyEnvelope, ControlEnvelope, RuntimeEvent

__all__ = [
    "ADAPTERS",
    "Adapter",
    "AgentContext",
    "Wrap",
    "adapter_class",
    "check_spawn_options",
    "control_reason",
    "show_refusal",
]

#: Adapter name -> "module:Class", imported on first use (a pi-rpc adapter's dependencies
#: are never loaded for a scripted agent).
ADAPTERS: dict[str, str] = {
    "scripted": "actors.child.scripted_adapter:ScriptedAdapter",
    "command": "actors.child.command:CommandAdapter",
    "pi-rpc": "actors.child.pi.adapter:PiRpcAdapter",
    "acp": "actors.child.acp:AcpAdapter",
}

#: Adapter name -> the extra whose packages it needs (a bad spawn is invalid_argument without).
ADAPTER_EXTRAS: dict[str, str] = {"acp": "acp"}


#: :meth:`AgentContext.sandboxed` as a value: a command line and its environment, as run
Wrap = Callable[[Sequence[str], Mapping[str, str]], "tuple[list[str], dict[str, str]]"]


class AgentContext(Protocol):
    """What an adapter may use: everything runs on the core thread unless noted."""

    env: ChildEnv
    clock: Clock
    ids: IdSource

    @property
    def cwd(self) -> str: ...

    def post(self, fn: Callable[[], None]) -> None:
        """Run ``fn`` on the core thread (callable from any thread)."""

    def publish(self, envelope: AnyEnvelope) -> None:
        """Publish to the parent inbox (errors are logged, never raised)."""

    def runtime(self, event: RuntimeEvent, **fields: Any) -> None:
        """Publish a runtime event of this agent."""

    def finish(self, code: int) -> None:
        """The agent is gone: the bridge exits with ``code`` after this callback."""

    def child_environ(self) -> dict[str, str]:
        """The environment for processes the agent runs (SHEPHERD_* included)."""

    def sandboxed(
        self, argv: Sequence[str], env: Mapping[str, str], rw: Sequence[str] = ()
    ) -> tuple[list[str], dict[str, str]]:
        """The command line and environment to start a process of the agent with: inside its
        sandbox if it has one (``rw``: the adapter's own state directories, kept writable;
        :mod:`actors.child.sandbox`), else unchanged. Every process an adapter starts goes
        through here."""

    def trace_environ(self) -> dict[str, str]:
        """``TRACEPARENT`` of the agent's work now, for a process it starts now (empty when
        tracing is off)."""


class Adapter(Protocol):
    """How one kind of agent is run. Built with ``cls(ctx, options)``; a bad option raises a
    :class:`~protocol.core.errors.ShepherdError` (reported as a runtime ``error``, exit 2).

    ``deliver`` gets every accepted inbox envelope except ``control close`` (the bridge
    handles that: it calls ``close`` and exits). ``close`` stops the agent for good and must
    leave no process of its own running; it is called exactly once, at exit."""

    name: ClassVar[str]

    @staticmethod
    def check_options(options: Mapping[str, Any], cwd: str) -> object:
        """Check the options (``cwd``: the agent's working directory); raise
        :class:`~protocol.core.errors.InvalidArgument` naming the bad one. Starts nothing."""

    def __init__(self, ctx: AgentContext, options: Mapping[str, Any]) -> None: ...

    def start(self) -> None: ...

    def deliver(self, envelope: AnyEnvelope) -> None: ...

    def close(self) -> None: ...


def adapter_class(name: str) -> type[Adapter]:
    target = ADAPTERS.get(name)
    if target is None:
        known = ", ".join(sorted(ADAPTERS))
        raise InvalidArgument(f"unknown adapter {name!r} (known: {known})")
    module_name, _, class_name = target.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:  # an adapter of an extra that is not installed
        extra = ADAPTER_EXTRAS.get(name)
        if extra is None or exc.name is None or exc.name.startswith("actors"):
            raise
        raise InvalidArgument(
            f"the {name} adapter needs the {extra!r} extra (pip install 'shepherd[{extra}]'): "
            f"{exc.name} is not installed"
        ) from None
    cls: type[Adapter] = getattr(module, class_name)
    return cls


def check_spawn_options(adapter: str, options: Mapping[str, Any], parent_cwd: str) -> None:
    """The parent's check of a spawn, before anything starts: the agent's working directory
    (the bridge starts there: ``cwd``, relative to the parent's, default the parent's), then
    the adapter's own :meth:`Adapter.check_options` against it."""
    cls = adapter_class(adapter)
    workdir = options.get("cwd")
    if workdir is not None and (not isinstance(workdir, str) or not workdir.strip()):
        raise InvalidArgument('"cwd" must be the path of a directory')
    cwd = os.path.join(parent_cwd, workdir) if workdir else parent_cwd
    if not os.path.isdir(cwd):
        raise InvalidArgument(f'"cwd": {cwd} is not an existing directory')
    cls.check_options(options, cwd)
    if options.get("sandbox"):  # fail closed: refused now if it cannot be made here
        from actors.child.sandbox_host import check_available

        check_available(options, cwd)


def show_refusal(ctx: AgentContext, ack: AckEnvelope) -> None:
    """A receipt refusing something the agent sent goes into its output (an accepted one is
    silent): the agent, or whoever reads its output, learns why."""
    if not ack.accepted and ack.error is not None:
        ctx.runtime(
            "output",
            text=f"[shepherd] refused {ack.ack_for}: {ack.error.code}: {ack.error.message}",
            is_error=True,
        )


def control_reason(envelope: ControlEnvelope) -> str:
    """What a ``cancel_task`` / ``abort`` says: its action, and the parent's reason if any."""
    return f"{envelope.action}{': ' + envelope.reason if envelope.reason else ''}"
