"""The watchdog's operations as methods of :class:`~actors.session.session.Session`, one per
entry of the operation table (:mod:`protocol.ops.watchdog`): the entry's Args fields
positionally or by name, checked, then run by the session (``session.watchdog_status()``,
``session.watchdog_set("cooldown_s", "120")``, ``session.watchdog_inspect("scout", limit=5)``).
``Session.watchdog(op, **args)`` runs the same by the watchdog actor's own names."""

from __future__ import annotations

from protocol.ops import Method
from protocol.ops import watchdog as watchdog_ops

__all__ = ["WatchdogMethods"]


class WatchdogMethods:
    """Mixed into ``Session``, whose ``run`` each method calls."""

    watchdog_status = Method(watchdog_ops.STATUS)
    watchdog_config = Method(watchdog_ops.CONFIG)
    watchdog_set = Method(watchdog_ops.SET)
    watchdog_pause = Method(watchdog_ops.PAUSE)
    watchdog_resume = Method(watchdog_ops.RESUME)
    watchdog_inspect = Method(watchdog_ops.INSPECT)
    watchdog_list_targets = Method(watchdog_ops.LIST_TARGETS)
    watchdog_read_events = Method(watchdog_ops.READ_EVENTS)
    watchdog_detect_stuck = Method(watchdog_ops.DETECT_STUCK)
    watchdog_alert_main = Method(watchdog_ops.ALERT_MAIN)
    watchdog_steer_subagent = Method(watchdog_ops.STEER_SUBAGENT)
