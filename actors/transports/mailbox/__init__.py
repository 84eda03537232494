"""The filesystem transport: one Maildir-style inbox per owner (``tmp/`` -> ``new/`` -> ``cur/``),
woken by inotify or watchfiles, drained in order; one-shot reply inboxes for receipts."""
