"""The parent process: the session's actors and their root.

``broker`` runs the session's rules (:mod:`protocol.session`) and their effects; ``task`` and
``watcher`` are the actors of open tasks and of watchers; ``agent`` owns one agent's process;
``watchdog`` watches for agents stuck in loops; ``session`` is the in-process API over them and
``supervisor`` the session a ``shepherd serve`` process runs (files, mailbox, real processes)."""
