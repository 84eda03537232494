"""Wait-for cycles: agents waiting on each other's replies.

Every ``expects_reply`` request is an edge *sender waits on target*. A new edge that closes a
cycle (A waits on B waits on A, or longer) is a deadlock no timeout will explain: it is found
at once, when the request is sent, and reported naming the whole cycle.
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["find_cycle"]


def find_cycle(edges: Iterable[tuple[str, str]], new_edge: tuple[str, str]) -> list[str] | None:
    """If adding ``new_edge`` (waiter, waited_on) closes a cycle, return it as a list of nodes
    starting and ending at the waiter (``[a, b, a]``); else ``None``."""
    waiter, target = new_edge
    if waiter == target:
        return [waiter, waiter]
    graph: dict[str, set[str]] = {}
    for a, b in edges:
        graph.setdefault(a, set()).add(b)
    # depth-first search from the target back to the waiter, remembering the path
    stack: list[tuple[str, list[str]]] = [(target, [waiter, target])]
    seen = {target}
    while stack:
        node, path = stack.pop()
        for nxt in sorted(graph.get(node, ())):
            if nxt == waiter:
                return [*path, waiter]
            if nxt not in seen:
                seen.add(nxt)
                stack.append((nxt, [*path, nxt]))
    return None
