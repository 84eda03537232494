"""The canary: after a hostile input, is the session still keeping its promises?

Two checks, each waiting on events with a bound (never sleeping): a short task deadline still
fires (the one timer thread is alive), and a watched completion is delivered exactly once (the
watcher, the broker and the sinks are alive). :meth:`Canary.check` runs both.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Mapping
from pathlib import Path

from actors.session.sinks import CollectingSink
from actors.session.supervisor import Supervisor
from protocol.records.notifications import TaskCompletion

#: finishes its task on a message from the test, so the completion comes after the watch
FINISH_ON_MESSAGE = {
    "steps": [
        {"await": "task"},
        {"await": "message"},
        {"done": {"status": "completed", "summary": "canary {last}"}},
        {"await": "any"},
    ]
}
#: never finishes: only its deadline ends its task
NEVER = {"steps": [{"await": "task"}, {"await": "any"}]}

WAIT_S = 30.0


class Canary:
    def __init__(self, sup: Supervisor, sink: CollectingSink, root: Path) -> None:
        self._sup = sup
        self._sink = sink
        self._root = root
        self._names = itertools.count()
        self.checks = 0

    def _agent(self, script: Mapping[str, object]) -> str:
        name = f"canary{next(self._names)}"
        path = self._root / f"{name}.json"
        path.write_text(json.dumps(script))
        self._sup.call("spawn", {"name": name, "script": str(path)})
        return name

    def _completions_of(self, task_id: str) -> list[TaskCompletion]:
        return [
            n
            for n in list(self._sink.items)
            if isinstance(n, TaskCompletion) and any(r.task_id == task_id for r in n.results)
        ]

    def deadline_fires(self) -> None:
        agent = self._agent(NEVER)
        args = {"target": agent, "task": "wait", "timeout_minutes": 0.005}  # 0.3 s
        task = self._sup.call("delegate", args)
        # on a slow machine the deadline may pass before the watch: then its answer has it
        inline = list(self._sup.call("watch", {"ids": [task.task_id]}).completed)
        assert self._sink.wait_for(
            lambda _: bool(inline or self._completions_of(task.task_id)), WAIT_S
        ), "the canary's deadline never fired"
        results = inline + [
            r for n in self._completions_of(task.task_id) for r in n.results if r.task_id
        ]
        assert [r.status for r in results] == ["timed_out"], results
        self._sup.call("close", {"agent": agent})

    def completion_once(self) -> str:
        """Returns the task id (check its count again later: see :meth:`check`)."""
        agent = self._agent(FINISH_ON_MESSAGE)
        task = self._sup.call("delegate", {"target": agent, "task": "finish"})
        task_id: str = task.task_id
        watch = self._sup.call("watch", {"ids": [task.task_id]})
        assert watch.pending == (task.task_id,)
        self._sup.call("message", {"target": agent, "message": "now"})
        assert self._sink.wait_for(lambda _: bool(self._completions_of(task.task_id)), WAIT_S), (
            "the canary's completion never arrived"
        )
        assert len(self._completions_of(task.task_id)) == 1
        self._sup.call("close", {"agent": agent})
        return task_id

    def check(self) -> None:
        completed = self.completion_once()
        self.deadline_fires()
        # the deadline took many coalescing windows: a second delivery would be here by now
        assert len(self._completions_of(completed)) == 1, "a completion was delivered twice"
        self.checks += 1
