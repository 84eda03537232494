"""Live edit collisions (protocol.session.collisions): two agents with open tasks editing one
file within the window are told, with the parent, once per pair and path; paths are compared
relative to each agent's directory; the memory of edits is bounded."""

from __future__ import annotations

import pytest

from protocol.calls import api
from protocol.records.notifications import Notice
from protocol.session import collisions
from protocol.wire.envelopes import NoticeEnvelope

from .harness import Session, delivered, notes


def team(*names: str) -> Session:
    s = Session()
    for name in names:
        s.call(api.SpawnArgs(name=name, cwd=f"/work/{name}"))
        s.delegate(name)
    return s


def edit(s: Session, name: str, *paths: str) -> list:  # type: ignore[type-arg]
    return s.runtime(s.state.names[name], "tool_call", tool="write", paths=paths)


def told(effects: list) -> tuple[list[Notice], list[tuple[str, str]]]:  # type: ignore[type-arg]
    parent = [n for n in notes(effects, Notice) if n.code == "edit_collision"]
    agents = [(e.target_id, e.text) for e in delivered(effects, NoticeEnvelope)]
    return parent, agents


def test_two_agents_editing_one_file_are_told_once_with_the_parent() -> None:
    s = team("alpha", "beta")
    a, b = s.state.names["alpha"], s.state.names["beta"]
    assert told(edit(s, "alpha", "/work/alpha/src/app.py")) == ([], [])
    s.now += 30.0
    parent, agents = told(edit(s, "beta", "src/./app.py"))  # relative: the same file
    (note,) = parent
    assert note.refs == ("src/app.py", a) and "30 s apart" in note.text
    assert "alpha" in note.text and "beta" in note.text
    assert sorted(target for target, _ in agents) == sorted([a, b])
    assert all("src/app.py" in text for _, text in agents)
    # the same pair, the same path: not told again; another path is another collision
    assert told(edit(s, "alpha", "src/app.py")) == ([], [])
    assert len(told(edit(s, "alpha", "README.md"))[0]) == 0  # beta never edited it
    assert len(told(edit(s, "beta", "README.md"))[0]) == 1


def test_no_collision_outside_the_window_or_without_an_open_task() -> None:
    s = team("alpha", "beta", "gamma")
    edit(s, "alpha", "src/app.py")
    s.now += collisions.WINDOW_S + 1
    assert told(edit(s, "beta", "src/app.py")) == ([], [])  # too far apart
    s.call(api.SpawnArgs(name="idle", cwd="/work/idle"))  # no task: not a collision
    assert told(edit(s, "idle", "src/app.py")) == ([], [])
    outside = "/elsewhere/src/app.py"  # outside gamma's directory: another file
    assert told(edit(s, "gamma", outside)) == ([], [])


def test_what_is_remembered_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(collisions, "MAX_PATHS", 3)
    monkeypatch.setattr(collisions, "MAX_TOLD", 2)
    s = team("alpha", "beta")
    for i in range(10):
        edit(s, "alpha", f"f{i}.py")
        edit(s, "beta", f"f{i}.py")
    assert len(s.state.edits) == 3 and list(s.state.edits) == ["f7.py", "f8.py", "f9.py"]
    assert len(s.state.collisions_told) == 2
