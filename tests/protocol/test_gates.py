"""``spawn --approve TOOL:GLOB`` rules as the acp adapter matches them
(:mod:`protocol.calls.gates`), the same rules the Pi extension reads."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from protocol.calls.gates import gates, matching, subject_of


def test_the_subject_is_the_command_else_the_path_else_the_title_else_the_json() -> None:
    assert subject_of({"command": " git push origin main ", "path": "x"}) == "git push origin main"
    assert subject_of({"command": ["git", "push"]}) == "git push"
    assert subject_of({"path": "src/a.py"}, "Edit a file") == "src/a.py"
    assert subject_of({"other": 1}, " Fetch the page ") == "Fetch the page"
    assert subject_of({"b": 2, "a": [1]}) == '{"a":[1],"b":2}'
    assert subject_of(None) == "null"


def test_a_call_matches_the_first_rule_of_its_tool_whose_glob_covers_its_whole_subject() -> None:
    found = gates(["execute:git push*", "execute:rm -rf ?uild", "edit:*.lock", "bash:*"])
    assert matching(found, "execute", "git push origin main") is found[0]
    assert matching(found, "execute", "sudo git push") is None  # the whole subject
    assert matching(found, "execute", "rm -rf build") is found[1]
    assert matching(found, "execute", "rm -rf builds") is None
    assert matching(found, "edit", "uv.lock") is found[2]
    assert matching(found, "read", "uv.lock") is None  # another tool
    assert matching(found, "bash", "line one\nline two") is found[3]  # * spans lines


@given(st.text(max_size=40))
def test_every_other_character_of_a_glob_is_itself(literal: str) -> None:
    literal = literal.replace("*", "").replace("?", "").strip()
    (gate,) = gates([f"execute:{literal}"]) if literal else gates(["execute:x"])
    subject = literal or "x"
    assert matching([gate], "execute", subject) is gate
    assert matching([gate], "execute", subject + "!") is None
