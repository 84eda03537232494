"""What every Shepherd process shares: the actor runtime (pykka actors on a shared pool, or on
the seeded simulation), its clocks, where ids come from, named crash points, process plumbing
(exit statuses, process trees, pid liveness) and the transport seam (how envelopes move)."""
