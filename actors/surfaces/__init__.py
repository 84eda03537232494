"""What a user touches: the ``shepherd`` CLI and its client of a running session, the MCP
server, the terminal views, the settings files, the watchdog's commands and the demo."""
