"""An ACP agent's tool calls that change files name them (``paths`` on the runtime event),
from the call's locations, for an edit, a delete or a move: what live edit collisions are
judged on (protocol.session.collisions)."""

from __future__ import annotations

from acp.schema import ToolCallLocation

from actors.child.acp_events import _written
from protocol.core.limits import MAX_EDIT_PATHS


def test_the_files_an_edit_changes_are_its_locations() -> None:
    here = [ToolCallLocation(path="/w/src/a.py"), ToolCallLocation(path="/w/src/b.py", line=3)]
    assert _written("edit", here) == ("/w/src/a.py", "/w/src/b.py")
    assert _written("delete", here[:1]) == ("/w/src/a.py",)
    assert _written("read", here) == ()  # reads change nothing
    assert _written("edit", None) == () and _written(None, here) == ()
    many = [ToolCallLocation(path=f"/w/{i}.py") for i in range(50)]
    assert len(_written("move", many)) == MAX_EDIT_PATHS  # bounded as the wire is
    assert _written("edit", [ToolCallLocation(path="x" * 2000)]) == ()
