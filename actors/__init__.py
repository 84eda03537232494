"""Everything with a thread, a file, a clock or a process.

Logging goes through loguru and is off for library users until an entry point (the CLI, a
test) enables it with ``logger.enable("actors")``. Levels: DEBUG one event per delivery
stage; INFO lifecycle (spawn, settle, exit); WARNING refused or quarantined input; ERROR a
handler, sink or timer callback that raised (caught: it never stops the actor). loguru itself
is imported only when something logs (:mod:`actors.runtime.log`).
"""

from actors.runtime.log import disable_until_enabled

disable_until_enabled()
