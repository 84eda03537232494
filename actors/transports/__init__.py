"""How a session's processes reach each other: the :class:`~actors.runtime.transport.Transport`
seam, its two back-ends (the file mailbox, :mod:`actors.transports.mailbox`, and NATS JetStream,
:mod:`actors.transports.nats`), and the choice between them
(:mod:`actors.transports.wire`). It builds on the actor runtime (:mod:`actors.runtime`: clocks,
logs, processes), never the other way round: the runtime knows no transport."""
