"""The session's files: the journal (the truth a restart folds), the notifications file (the
record of delivery), task notes, and MCP clients' read cursors. Append-only JSON lines, safe to
reopen after a crash."""
