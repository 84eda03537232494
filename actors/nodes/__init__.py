"""``shepherd node``: a host that runs a session's agents for a parent elsewhere, over NATS
(:mod:`actors.nodes.node`). The parent's side of a placement is
:mod:`actors.session.placement`."""
