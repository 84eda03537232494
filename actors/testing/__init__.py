"""The seeded simulation: a one-thread runtime with virtual time, a simulated transport, simulated
scripted agents and fault injection. The tests run the production actor classes on it; the
demo (``shepherd demo``) and the watchdog's ``try`` run on it by design (same seed, same story).
No module outside this package and those two surfaces imports it."""

from actors.testing.session import SimSession

__all__ = ["SimSession"]
