"""protocol.records.worktrees: git's status parsed, what a task changed, the overlap, the bounds
(pure: no git, no files)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from protocol.calls import api_worktrees
from protocol.calls.answers import preview_result
from protocol.core.limits import WORKTREE_FILES_LISTED, WORKTREE_OVERLAP_AGENTS
from protocol.records.tasks import TaskResult
from protocol.records.worktrees import (
    PATH_CHARS,
    Snapshot,
    StatusEntry,
    changed_since,
    make_changes,
    parse_porcelain_z,
    ref_of,
    shown,
)

# a path as git prints it with -z: anything but NUL (spaces, newlines, quotes, arrows)
paths = st.text(alphabet='ab/. \n"->é\t', min_size=1, max_size=12)
codes = st.sampled_from(["??", " M", "M ", "MM", "A ", " D", "D ", "AM", "UU", "!!"])


def test_parse_porcelain_z_examples() -> None:
    data = " M a.txt\0?? new dir/x y.txt\0R  new.txt\0old.txt\0D  gone\0"
    assert parse_porcelain_z(data) == [
        StatusEntry(" M", "a.txt"),
        StatusEntry("??", "new dir/x y.txt"),
        StatusEntry("R ", "new.txt", "old.txt"),
        StatusEntry("D ", "gone"),
    ]
    assert parse_porcelain_z("") == []
    assert parse_porcelain_z("?? -> not a rename\0")[0].path == "-> not a rename"


@pytest.mark.parametrize("bad", ["M\0", "XYZpath\0", "R  new.txt\0", " M\0"])
def test_parse_porcelain_z_refuses_malformed(bad: str) -> None:
    with pytest.raises(ValueError, match=r"malformed|without its original"):
        parse_porcelain_z(bad)


plain = st.builds(StatusEntry, codes, paths)
renamed = st.builds(StatusEntry, st.sampled_from(["R ", "C ", " R", "RM"]), paths, paths)


@given(st.lists(plain | renamed, max_size=8))
def test_parse_porcelain_z_round_trips(entries: list[StatusEntry]) -> None:
    data = "".join(
        f"{e.code} {e.path}\0" + (f"{e.orig}\0" if e.orig is not None else "") for e in entries
    )
    assert parse_porcelain_z(data) == entries


def test_changed_since_the_task_started() -> None:
    snap = Snapshot(head="h0", dirty={"dirty.txt": "v1", "untracked.txt": "u1", "gone": None})
    differ = {"dirty.txt", "untracked.txt", "new.txt", "committed.txt"}
    now = {"dirty.txt": "v1", "untracked.txt": "u2", "gone": None}
    # dirty.txt: dirty before, unchanged since; untracked.txt: edited further
    assert changed_since(snap, differ, now) == {"untracked.txt", "new.txt", "committed.txt"}
    # a dirty file put back as it is at HEAD (no longer differs): changed by the task
    assert changed_since(snap, set(), {"dirty.txt": "at-head", "untracked.txt": "u1"}) == {
        "dirty.txt"
    }
    # a file deleted by the task, and a deleted one recreated
    assert changed_since(snap, set(), {"dirty.txt": None, "untracked.txt": "u1", "gone": "x"}) == {
        "dirty.txt",
        "gone",
    }


hashes = st.none() | st.sampled_from(["a", "b", "c"])


@given(
    st.dictionaries(paths, hashes, max_size=8),
    st.sets(paths, max_size=8),
    st.dictionaries(paths, hashes, max_size=8),
)
def test_changed_since_properties(
    dirty: dict[str, str | None], differ: set[str], now: dict[str, str | None]
) -> None:
    snap = Snapshot(head="h", dirty=dirty)
    changed = changed_since(snap, differ, now)
    # a path clean at the start counts exactly when it differs from HEAD now
    assert {p for p in changed if p not in dirty} == differ - set(dirty)
    # a path dirty at the start counts exactly when its content moved
    for p, then in dirty.items():
        assert (p in changed) == (now.get(p) != then)
    # nothing changed since: nothing listed
    assert changed_since(snap, set(dirty) & differ, dict(dirty)) == set()


def test_overlap_and_bounds() -> None:
    mine = {f"f{i:03}.py" for i in range(WORKTREE_FILES_LISTED + 7)} | {"shared.py"}
    others = {
        "zed": ("b/zed", {"shared.py", "theirs.py"}),
        "amy": ("b/amy", {"f000.py", "shared.py"}),
        "bob": ("b/bob", {"elsewhere.py"}),
    }
    changes = make_changes("b/me", "/w", mine, others)
    assert changes.count == len(mine) and len(changes.files) == WORKTREE_FILES_LISTED
    assert list(changes.files) == sorted(changes.files)
    assert [(o.agent, o.files, o.count) for o in changes.overlaps] == [
        ("amy", ("f000.py", "shared.py"), 2),
        ("zed", ("shared.py",), 1),
    ]
    assert changes.overlap_agents == 0
    many = {f"a{i:02}": ("b", {"shared.py"}) for i in range(WORKTREE_OVERLAP_AGENTS + 3)}
    crowded = make_changes("b/me", "/w", {"shared.py"}, many)
    assert len(crowded.overlaps) == WORKTREE_OVERLAP_AGENTS
    assert crowded.overlap_agents == WORKTREE_OVERLAP_AGENTS + 3
    assert make_changes("b", "/w", set(), many).overlaps == ()


def test_paths_shown_are_bounded_and_printable() -> None:
    assert len(shown("x" * 10_000)) == PATH_CHARS
    # a path that is not UTF-8 (read with surrogateescape) is shown, never an encoding error
    odd = b"caf\xe9.txt".decode("utf-8", "surrogateescape")
    assert shown(odd) == "caf\ufffd.txt"
    assert make_changes("b", "/w", {odd}, {}).files == ("caf\ufffd.txt",)


def test_a_crowded_answer_lists_fewer_paths_but_keeps_the_count() -> None:
    changes = make_changes("b", "/w", {f"{i}.txt" for i in range(40)}, {"o": ("b2", {"1.txt"})})
    result = TaskResult(
        task_id="t",
        agent_id="a",
        status="completed",
        ok=True,
        return_code=0,
        completed_at=1.0,
        changes=changes,
    )
    cut = preview_result(result, 200)
    assert cut.changes is not None and len(cut.changes.files) == 2 and cut.changes.count == 40
    assert preview_result(result, 16).changes.files == ()  # type: ignore[union-attr]


def test_ref_of_needs_every_option() -> None:
    full = {"worktree": True, "cwd": "/w", "branch": "b", "base": "c0ffee", "repo": "/r"}
    ref = ref_of("id", "alpha", full)
    assert ref is not None and (ref.path, ref.branch, ref.base, ref.repo) == (
        "/w",
        "b",
        "c0ffee",
        "/r",
    )
    assert ref_of("id", "alpha", {**full, "worktree": "true"}) is None
    assert ref_of("id", "alpha", {k: v for k, v in full.items() if k != "base"}) is None
    assert ref_of("id", "alpha", {}) is None


def test_what_a_human_reads() -> None:
    from protocol.calls import views
    from protocol.calls.render import render_changes

    changes = make_changes("b/me", "/w", {"a.py", "s.py"}, {"zed": ("b/zed", {"s.py"})})
    result = TaskResult(
        task_id="t1",
        agent_id="a",
        status="completed",
        ok=True,
        return_code=0,
        completed_at=1.0,
        changes=changes,
    )
    assert render_changes(result) == [
        "t1 changed 2 file(s) on b/me since the task started: a.py, s.py",
        "  overlap with zed (b/zed): s.py",
    ]
    row = {"agent": "me", "state": "dirty", "changed_files": 2, "branch": "b/me", "path": "/w"}
    assert views.worktrees({"worktrees": [row]}) == "me       dirty, 2 changed  b/me  /w"
    kept = {
        "agent_id": "a",
        "closed": True,
        "worktree_path": "/w",
        "worktree_removed": False,
        "worktree_kept_because": "1 untracked file(s), e.g. x",
    }
    assert views.closed(kept) == "closed a; worktree kept at /w: 1 untracked file(s), e.g. x"
    assert views.closed({**kept, "worktree_removed": True}) == "closed a; worktree /w removed"


def test_a_worktrees_page_fits_its_frame() -> None:
    from protocol.calls.answers import encoded_size, fit_answer

    rows = tuple(
        api_worktrees.WorktreeStatus(
            agent=f"a{i}",
            agent_id=f"id{i}",
            path="/" + "p" * 3000,
            branch="b",
            base="c",
            state="clean",
        )
        for i in range(20)
    )
    page = api_worktrees.WorktreesResult(worktrees=rows, cursor=40, next_cursor=60)
    fitted = fit_answer(page, 16_000)
    assert 1 <= len(fitted.worktrees) < 20 and encoded_size(fitted) <= 16_000
    assert fitted.next_cursor == 40 + len(fitted.worktrees)
    small = api_worktrees.WorktreesResult(worktrees=rows[:2])
    assert fit_answer(small, 16_000) == small
