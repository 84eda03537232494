"""The NATS JetStream transport (install extra ``shepherd[nats]``): Shepherd's envelopes on a
distributed engine instead of one machine's filesystem. Imported only when asked for, so the
file mailbox's users never load ``nats``."""
