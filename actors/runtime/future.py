"""The runtime's futures: pykka's threading future, which also says when it is done."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import pykka

__all__ = ["RuntimeFuture"]

T = TypeVar("T")


class RuntimeFuture(pykka.ThreadingFuture[T]):
    """pykka's threading future, which also says when it is ``done`` (a public flag, not pykka's
    private result slot). On the simulation it carries a ``driver``: ``get`` runs the
    simulation until the answer is there, since nothing else would on its one thread."""

    def __init__(self, driver: Callable[[RuntimeFuture[Any]], None] | None = None) -> None:
        super().__init__()
        self.done = False
        self.driver = driver

    def set(self, value: Any | None = None) -> None:
        super().set(value)
        self.done = True

    def set_exception(self, exc_info: Any = None) -> None:
        super().set_exception(exc_info)
        self.done = True

    def get(self, *, timeout: float | None = None) -> Any:
        if self.driver is not None and not self.done:
            self.driver(self)
        return super().get(timeout=timeout)
