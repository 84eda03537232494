"""The session's requests, indexed for what the broker asks of them.

Rules:
- Every pending request is kept until it closes.
- Closed requests are kept, most recent first, up to ``closed_kept``: a late reply, a status
  view or a restart can still find them. Older closed ones are forgotten, so a long session's
  memory does not grow with every question ever asked.
- The wait-for edges (*sender waits on target*) of the pending requests are counted as they
  open and close, so checking a new request for a cycle costs the size of the graph of agents,
  not the number of requests ever made.

A mapping (``get``, ``in``, ``[]``, ``len``, ``values``) written through :meth:`put` only.
"""

from __future__ import annotations

from collections import Counter, OrderedDict
from collections.abc import Iterator, KeysView, Mapping

from protocol.records.requests import RequestRecord

__all__ = ["RequestTable"]


class RequestTable(Mapping[str, RequestRecord]):
    def __init__(self, closed_kept: int) -> None:
        self._closed_kept = max(closed_kept, 0)
        self._records: dict[str, RequestRecord] = {}
        self._pending: dict[str, None] = {}  # insertion order
        self._closed: OrderedDict[str, None] = OrderedDict()  # oldest first
        self._edges: Counter[tuple[str, str]] = Counter()

    def __getitem__(self, request_id: str) -> RequestRecord:
        return self._records[request_id]

    def __iter__(self) -> Iterator[str]:
        return iter(self._records)

    def __len__(self) -> int:
        return len(self._records)

    def put(self, record: RequestRecord) -> None:
        """Add a request or replace it with its next state."""
        request_id = record.request_id
        old = self._records.get(request_id)
        if old is not None and old.pending:
            self._drop_edge(old)
            del self._pending[request_id]
        self._closed.pop(request_id, None)
        self._records[request_id] = record
        if record.pending:
            self._pending[request_id] = None
            self._edges[(record.sender_id, record.target_id)] += 1
            return
        self._closed[request_id] = None
        while len(self._closed) > self._closed_kept:
            forgotten, _ = self._closed.popitem(last=False)
            del self._records[forgotten]

    def pending(self) -> list[RequestRecord]:
        """The pending requests, oldest first (a copy: closing them while iterating is safe)."""
        return [self._records[r] for r in self._pending]

    def wait_edges(self) -> KeysView[tuple[str, str]]:
        """Each (waiter, waited-on) pair with at least one pending request."""
        return self._edges.keys()

    def _drop_edge(self, record: RequestRecord) -> None:
        edge = (record.sender_id, record.target_id)
        self._edges[edge] -= 1
        if self._edges[edge] <= 0:
            del self._edges[edge]
