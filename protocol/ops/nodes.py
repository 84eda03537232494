"""``spawn``'s ``node`` argument: where an agent runs (:mod:`protocol.wire.nodes`)."""

from __future__ import annotations

from typing import Final

from protocol.ops.spec import Param

__all__ = ["NODE_PARAM"]

#: ``spawn``'s ``node`` argument (:mod:`protocol.ops.parent`)
NODE_PARAM: Final = Param(
    description=(
        "Start the agent on this `shepherd node` (another host; sessions over NATS only), or "
        "'any' for the live node running the fewest agents; leave it out for this host"
    ),
    cli="--node",
    metavar="HOST",
    help="start it on this node ('any': the least-loaded)",
)
