"""The child process: ``shepherd-child`` (its ``run`` bridge and the ``message`` / ``done``
commands an agent runs from its shell) and the adapters that run one kind of agent inside the
bridge: a command, a scripted agent, Pi (:mod:`actors.child.pi`)."""
