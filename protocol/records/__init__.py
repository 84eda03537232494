"""What a session records of its work: tasks and their results, requests, usage, worktree
snapshots, notifications, settings, the journal's records, watch and wait ids.
"""
