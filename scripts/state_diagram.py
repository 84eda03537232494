#!/usr/bin/env python3
"""Draw Shepherd's state machines as Mermaid ``stateDiagram-v2``, read from their tables.

    python scripts/state_diagram.py                      # all three machines
    python scripts/state_diagram.py --machine request    # one: task | request | process
    python scripts/state_diagram.py --markdown           # fenced blocks, a heading each

Every edge comes from the code: the task machine from ``protocol.records.tasks.TRANSITIONS``, the
request machine from ``protocol.records.requests.REQUEST_TRANSITIONS``, the agent's process machine
from ``protocol.session.agents.PROCESS_TRANSITIONS``; the start state is the default of the
record's ``state`` field, and a state with no way out is drawn as final. Nothing is copied by
hand, so a diagram cannot disagree with its machine. The "State machines" section of
``docs/concepts.md`` is the ``--markdown`` output; ``tests/protocol/test_state_diagram.py``
fails when it is stale.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import get_args

import msgspec

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from protocol.calls.api import ProcessState
from protocol.records.requests import REQUEST_TRANSITIONS, RequestRecord, RequestState
from protocol.records.tasks import TRANSITIONS, TaskRecord, TaskState
from protocol.session.agents import PROCESS_TRANSITIONS
from protocol.session.state import AgentRow


@dataclass(frozen=True)
class Machine:
    """One machine as drawn: its states in declaration order and its edges in table order."""

    title: str
    source: str
    states: tuple[str, ...]
    start: str
    #: (from, event or None, to); the request machine's table has no event names
    edges: tuple[tuple[str, str | None, str], ...]

    @property
    def finals(self) -> tuple[str, ...]:
        """States with no edge out (terminal)."""
        sources = {a for a, _, _ in self.edges}
        return tuple(s for s in self.states if s not in sources)


def _default_state(record: type[msgspec.Struct]) -> str:
    field = next(f for f in msgspec.structs.fields(record) if f.name in {"state", "process_state"})
    return str(field.default)


def machines() -> dict[str, Machine]:
    """The three machines, keyed by their ``--machine`` name."""
    request_states = tuple(RequestState)
    return {
        "task": Machine(
            title="Task",
            source="protocol/records/tasks.py TRANSITIONS",
            states=tuple(str(s) for s in TaskState),
            start=_default_state(TaskRecord),
            edges=tuple((str(a), str(e), str(b)) for (a, e), b in TRANSITIONS.items()),
        ),
        "request": Machine(
            title="Request",
            source="protocol/records/requests.py REQUEST_TRANSITIONS",
            states=tuple(str(s) for s in request_states),
            start=_default_state(RequestRecord),
            # the table's values are sets: draw them in declaration order, not hash order
            edges=tuple(
                (str(a), None, str(b))
                for a in request_states
                for b in request_states
                if b in REQUEST_TRANSITIONS[a]
            ),
        ),
        "process": Machine(
            title="Agent process",
            source="protocol/session/agents.py PROCESS_TRANSITIONS",
            states=get_args(ProcessState),
            start=_default_state(AgentRow),
            edges=tuple((a, e, b) for (a, e), b in PROCESS_TRANSITIONS.items()),
        ),
    }


def mermaid(machine: Machine) -> str:
    """The machine as one ``stateDiagram-v2`` (no fence): one line per table entry."""
    lines = ["stateDiagram-v2", f"    [*] --> {machine.start}"]
    for a, event, b in machine.edges:
        lines.append(f"    {a} --> {b}" + (f" : {event}" if event else ""))
    lines += [f"    {s} --> [*]" for s in machine.finals]
    return "\n".join(lines) + "\n"


def render(names: list[str], *, markdown: bool = False) -> str:
    """The named machines, bare or as Markdown (a heading and a fenced block each)."""
    table = machines()
    parts = []
    for name in names:
        machine = table[name]
        text = mermaid(machine)
        if markdown:
            text = f"### {machine.title} (`{machine.source}`)\n\n```mermaid\n{text}```\n"
        parts.append(text)
    return "\n".join(parts)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--machine", choices=sorted(machines()), help="draw only this one")
    parser.add_argument("--markdown", action="store_true", help="a heading and a fenced block each")
    args = parser.parse_args(argv)
    names = [args.machine] if args.machine else list(machines())
    sys.stdout.write(render(names, markdown=args.markdown))
    return 0


if __name__ == "__main__":
    sys.exit(main())
