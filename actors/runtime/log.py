"""The project's logger: loguru's, without importing loguru until logging can be on.

Why: importing loguru costs more than starting the interpreter (it brings asyncio,
multiprocessing and logging with it), and a short-lived command (``shepherd status``,
``shepherd-child message``) has logging off: it would pay that on every call for nothing.

Rules:
- Every module of ``actors`` logs through :data:`logger` (``from actors.runtime.log import
  logger``), never ``from loguru import logger``.
- Logging of ``actors`` is off for library users until an entry point enables it (``actors``
  package docstring): :func:`disable_until_enabled` disables it the moment loguru exists,
  whether loguru was imported before ``actors`` or after. Enabling needs loguru imported, so
  while loguru is not imported ``actors`` cannot be enabled, and a log call is rightly nothing
  at all: :data:`logger` then drops it without importing loguru.
- Once loguru is imported, :data:`logger` hands out loguru's own objects (``logger.info`` is
  loguru's bound method, ``logger.bind(...)`` loguru's logger), so loguru sees the caller's
  frame and names the caller's module as usual.
- ``bind`` / ``opt`` made before loguru was imported (a logger kept in an attribute) are
  remembered and replayed on loguru's logger once it is imported.
- Anything else (``enable``, ``add``, ``remove`` ...) imports loguru.
- A process may instead send every record to a :class:`~actors.runtime.plain_log.PlainLogger`
  (:func:`use_plain`: the child bridge, one process per agent, which would otherwise pay
  loguru's import in memory and start-up per agent). From then on loguru is never used by
  :data:`logger`, imported or not; remembered ``bind`` / ``opt`` are replayed on the plain one.
"""

from __future__ import annotations

import sys
from types import ModuleType
from typing import TYPE_CHECKING, Any, cast

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from importlib.machinery import ModuleSpec

    from loguru import Logger

    from actors.runtime.plain_log import PlainLogger

__all__ = ["disable_until_enabled", "logger", "use_plain", "use_plain_from_env"]

_PACKAGE = "actors"
_LEVELS = frozenset(
    {"trace", "debug", "info", "success", "warning", "error", "critical", "exception", "log"}
)
#: calls that make another logger: remembered while loguru is not imported
_DERIVED = frozenset({"bind", "opt"})

_Step = tuple[str, tuple[Any, ...], dict[str, Any]]


def _nothing(*args: Any, **kwargs: Any) -> None:
    """A log call while loguru is not imported (``actors`` cannot be enabled then)."""


class _LazyLogger:
    __slots__ = ("_made", "_steps")

    def __init__(self, steps: tuple[_Step, ...] = ()) -> None:
        self._steps = steps
        #: loguru's logger with these steps replayed (made on first use after the import)
        self._made: Any = None

    def _replayed(self) -> Any:
        if self._made is None:
            from loguru import logger as made

            for name, args, kwargs in self._steps:
                made = getattr(made, name)(*args, **kwargs)
            self._made = made
        return self._made

    def __getattr__(self, name: str) -> Any:
        if _plain:
            made: Any = _plain[0]
            for step, args, kwargs in self._steps:
                made = getattr(made, step)(*args, **kwargs)
            return getattr(made, name)
        loaded = "loguru" in sys.modules
        if not self._steps and loaded:
            return getattr(sys.modules["loguru"].logger, name)
        if not loaded:
            if name in _LEVELS:
                return _nothing
            if name in _DERIVED:
                return lambda *args, **kwargs: _LazyLogger((*self._steps, (name, args, kwargs)))
        # loguru's bound method, called from the caller's frame: the record names the caller
        return getattr(self._replayed(), name)


#: loguru's logger, imported only when logging can be on (module rules; typed as loguru's)
logger = cast("Logger", _LazyLogger())

#: the plain logger every record goes to instead of loguru (:func:`use_plain`), if any
_plain: list[PlainLogger] = []


def use_plain(plain: PlainLogger) -> None:
    """Send every record of :data:`logger` to ``plain`` from now on, never to loguru."""
    _plain[:] = [plain]


def use_plain_from_env(level: str | None = None) -> None:
    """Log lines to stderr through the plain logger, at ``level`` or ``SHEPHERD_LOG_LEVEL``
    (default INFO): what an agent's bridge does (its parent points stderr at the agent's log
    file); loguru's import would cost every bridge about 4 MB and a quarter of its start-up
    (:mod:`actors.runtime.plain_log`)."""
    import os

    from actors.runtime.plain_log import PlainLogger

    wanted = level or os.environ.get("SHEPHERD_LOG_LEVEL") or "INFO"
    try:
        plain = PlainLogger(wanted)
    except ValueError as exc:  # a bad level in the user's environment must not stop every agent
        plain = PlainLogger("INFO")
        plain.warning("{}; logging at INFO", exc)
    use_plain(plain)


class _DisableAfterExec:
    """loguru's own loader, then ``disable("actors")`` on the fresh module."""

    def __init__(self, loader: Any) -> None:
        self._loader = loader

    def create_module(self, spec: ModuleSpec) -> ModuleType | None:
        create: Callable[[ModuleSpec], ModuleType | None] = self._loader.create_module
        return create(spec)

    def exec_module(self, module: ModuleType) -> None:
        self._loader.exec_module(module)
        module.logger.disable(_PACKAGE)

    def __getattr__(self, name: str) -> Any:  # get_source, get_resource_reader, ...
        return getattr(self._loader, name)


class _WhenLoguruLoads:
    """An import finder that finds loguru as the others do, wraps its loader, and steps aside."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        if fullname != "loguru":
            return None
        if self in sys.meta_path:
            sys.meta_path.remove(self)
        from importlib.util import find_spec

        spec = find_spec(fullname)
        if spec is not None and spec.loader is not None:
            spec.loader = cast("Any", _DisableAfterExec(spec.loader))
        return spec


def disable_until_enabled() -> None:
    """Logging of ``actors`` off now if loguru is imported, else from the moment it is."""
    if "loguru" in sys.modules:
        sys.modules["loguru"].logger.disable(_PACKAGE)
    elif not any(isinstance(finder, _WhenLoguruLoads) for finder in sys.meta_path):
        sys.meta_path.insert(0, cast("Any", _WhenLoguruLoads()))
