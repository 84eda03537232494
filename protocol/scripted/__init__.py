"""The built-in scripted agent: its script and the machine that runs it."""
