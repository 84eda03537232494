"""Watchdog text rules (command keys, output hashes, previews, call classes)."""

from __future__ import annotations

import re

import pytest

from protocol.watchdog import (
    classify_call,
    error_signature,
    hash_output,
    is_check_command,
    make_preview,
    normalize_command,
    normalize_output,
    read_target_key,
    render_call,
    strip_ansi,
)

# --- commands ------------------------------------------------------------------------------


def test_normalize_command_trims_collapses_and_strips_ansi() -> None:
    assert normalize_command("  rg   foo\t src \n") == "rg foo src"
    assert normalize_command("\x1b[1;32mrg\x1b[0m foo") == "rg foo"
    assert normalize_command("rg foo") == normalize_command("rg  foo ")


def test_normalize_command_keeps_real_differences() -> None:
    assert normalize_command("rg foo src") != normalize_command("rg foo tests")


def test_strip_ansi_removes_csi_osc_and_stray_escapes() -> None:
    text = "\x1b[31mred\x1b[0m \x1b]0;title\x07x \x1b(B\x1b"
    assert strip_ansi(text) == "red x "


def test_render_call_is_stable_for_structured_args() -> None:
    one = render_call("read", args={"path": "src/a.py", "limit": 50, "offset": 1})
    two = render_call("read", args={"offset": 1, "limit": 50, "path": "src/a.py"})
    assert one == two == "read src/a.py limit=50 offset=1"
    assert render_call("bash", args={"command": "  ls   -la "}) == "ls -la"
    assert render_call("bash", command="rg x", args={"command": "ignored"}) == "rg x"
    assert render_call("git_status") == "git_status"
    assert render_call("tool", args=[1, 2]) == "tool [1,2]"


def test_command_keys_stay_bounded_but_distinct() -> None:
    one = render_call("write", args={"path": "a.py", "content": "x" * 50_000})
    two = render_call("write", args={"path": "a.py", "content": "y" * 50_000})
    assert one.startswith("write a.py content=<50002 chars #")
    assert len(one) < 100 and one != two
    long_one = render_call("bash", command="cat <<EOF > f\n" + "a" * 10_000)
    long_two = render_call("bash", command="cat <<EOF > f\n" + "a" * 9_999 + "b")
    assert len(long_one) < 1100 and long_one != long_two
    assert render_call("tool", args={1: "a", "b": 2}) == 'tool 1="a" b=2'


# --- outputs and volatile noise ------------------------------------------------------------

NOISE_PAIRS = [
    ("pid", "server started, pid 12345", "server started, pid 67890"),
    ("pid=", "worker pid=4242 exited", "worker pid=99 exited"),
    ("bracketed pid", "python[12345]: ready", "python[23456]: ready"),
    ("temp path", "wrote /tmp/pytest-of-me/pytest-12/x.txt", "wrote /tmp/abcdef/x.txt"),
    ("macOS temp", "at /var/folders/ab/cd/T/tmpx1/a.py", "at /var/folders/zz/yy/T/tmpq2/a.py"),
    ("python tempfile", "created tmpa1b2c3d4 dir", "created tmpzz99yy88 dir"),
    ("ISO timestamp", "2024-05-01T10:11:12.345Z start", "2025-01-31T23:59:59Z start"),
    ("ISO with offset", "at 2024-05-01 10:11:12+02:00", "at 2024-06-02 01:02:03+02:00"),
    ("clock time", "[10:11:12] compiling", "[23:01:02] compiling"),
    ("duration s", "5 passed in 0.42s", "5 passed in 12.07s"),
    ("duration ms", "done (123ms)", "done (7ms)"),
    ("duration spaced", "finished in 2.3 s", "finished in 14 s"),
    ("duration words", "took 3 seconds", "took 12 seconds"),
    ("duration compound", "real 0m1.234s", "real 1m2.5s"),
    ("hex id", "commit a1b2c3d4e5f", "commit 0f9e8d7c6b5"),
    ("address", "object at 0x7f3a2c1d4e50", "object at 0x7f00ab12cd34"),
    (
        "uuid",
        "request 123e4567-e89b-12d3-a456-426614174000 failed",
        "request 9b2f1c3a-0000-4abc-8def-0123456789ab failed",
    ),
    ("epoch", "ts=1700000000.25 ok", "ts=1712345678 ok"),
    ("ansi", "\x1b[31mFAILED\x1b[0m test_a", "FAILED test_a"),
    ("carriage return", "progress 10%\rprogress 100%\r\ndone", "progress 100%\ndone"),
    ("trailing blanks", "a  \nb\n\n\n", "a\nb"),
]


@pytest.mark.parametrize(("name", "one", "two"), NOISE_PAIRS, ids=[p[0] for p in NOISE_PAIRS])
def test_volatile_noise_does_not_change_the_hash(name: str, one: str, two: str) -> None:
    assert normalize_output(one) == normalize_output(two), name
    assert hash_output(one) == hash_output(two)


REAL_DIFFERENCES = [
    ("file names", "error in a.py", "error in b.py"),
    ("failure counts", "3 failed, 2 passed", "2 failed, 3 passed"),
    ("line:col is not a clock", "a.py:12:5: error", "a.py:13:5: error"),
    ("short hex is kept", "code ab12", "code cd34"),
    ("words are kept", "defaced", "effaced"),
    ("small numbers are kept", "exit status 1", "exit status 2"),
    ("list index is kept", "items[0]", "items[1]"),
]


@pytest.mark.parametrize(
    ("name", "one", "two"), REAL_DIFFERENCES, ids=[p[0] for p in REAL_DIFFERENCES]
)
def test_real_differences_change_the_hash(name: str, one: str, two: str) -> None:
    assert hash_output(one) != hash_output(two), name


def test_placeholders_are_readable() -> None:
    out = normalize_output(
        "pid 1 at 2024-01-02T03:04:05Z in 0.5s /tmp/x 123e4567-e89b-12d3-a456-426614174000"
    )
    assert out == "pid <pid> at <ts> in <dur> /tmp/<tmp> <uuid>"


def test_hash_is_sha256_hex() -> None:
    digest = hash_output("hello")
    assert re.fullmatch(r"[0-9a-f]{64}", digest)
    assert hash_output("") == hash_output("\n\n  \n")


def test_hash_truncates_to_head_and_tail() -> None:
    head, tail = "HEAD\n" * 10, "TAIL\n" * 10
    one = head + "x" * 5000 + tail
    two = head + "y" * 5000 + tail
    assert hash_output(one, max_chars=80) == hash_output(two, max_chars=80)
    assert hash_output(one) != hash_output(two)  # the default budget sees the middle
    # a different ending (a test summary) is seen even when the middle is cut
    assert hash_output(one, max_chars=100) != hash_output(
        head + "x" * 5000 + "END\n", max_chars=100
    )


# --- previews ------------------------------------------------------------------------------


def test_preview_keeps_short_output_whole_but_ansi_free() -> None:
    assert make_preview("\x1b[32mok\x1b[0m\nsecond", 20) == "ok\nsecond"


@pytest.mark.parametrize("max_lines", [1, 2, 3, 5, 20])
def test_preview_never_exceeds_max_lines(max_lines: int) -> None:
    text = "\n".join(f"line {i}" for i in range(100))
    preview = make_preview(text, max_lines)
    assert len(preview.split("\n")) == max_lines


def test_preview_shows_head_marker_and_tail() -> None:
    preview = make_preview("\n".join(f"line {i}" for i in range(100)), 5).split("\n")
    assert preview == ["line 0", "line 1", "… (96 lines omitted)", "line 98", "line 99"]


def test_preview_caps_long_lines_and_handles_zero() -> None:
    assert len(make_preview("x" * 10_000, 3)) <= 240
    assert make_preview("anything", 0) == ""
    assert make_preview("", 5) == ""


# --- classification ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("tool", "command", "expected"),
    [
        ("bash", "rg foo src", "read"),
        ("bash", "rg 'a|b' src 2>&1 | head -20", "read"),
        ("bash", "cd src && cat x.py", "read"),
        ("bash", "grep -rn TODO . | wc -l", "read"),
        ("bash", "sed -n 1,80p a.py", "read"),
        ("bash", "git status", "read"),
        ("bash", "ls -la", "read"),
        ("bash", "find . -name '*.py'", "read"),
        ("bash", "cat a.py > b.py", "write"),
        ("bash", "echo hi >> notes.txt", "write"),
        ("bash", "sed -i 's/a/b/' f.py", "write"),
        ("bash", "perl -pi -e 's/a/b/' f.py", "write"),
        ("bash", "echo x | tee out.txt", "write"),
        ("bash", "git apply fix.patch", "write"),
        ("bash", "patch -p1 < fix.diff", "write"),
        ("bash", "mv a.py b.py", "write"),
        ("bash", "find . -name '*.pyc' -delete", "write"),
        ("bash", "rg '->' src", "read"),
        ("bash", "echo hi > /dev/null", "other"),
        ("bash", "pytest -q", "other"),
        ("bash", "npx tsc --noEmit", "other"),
        ("edit", "edit a.py", "write"),
        ("write", "write a.py", "write"),
        ("apply_patch", "apply_patch", "write"),
        ("str_replace_editor", "str_replace_editor a.py", "write"),
        ("read", "read a.py", "read"),
        ("grep", "grep foo", "read"),
        ("todo_write", "todo_write", "other"),
        ("web_fetch", "web_fetch url=1", "other"),
    ],
)
def test_classify_call(tool: str, command: str, expected: str) -> None:
    assert classify_call(tool, command) == expected


def test_read_target_key_treats_different_spellings_of_one_read_alike() -> None:
    key = read_target_key("bash", "cat src/a.py")
    assert read_target_key("bash", "nl -ba src/a.py") == key
    assert read_target_key("read", render_call("read", args={"path": "src/a.py"})) == key
    assert read_target_key("read", "src/a.py") == key
    assert read_target_key("bash", "cat src/b.py") != key
    assert read_target_key("bash", "rg -n foo src") == read_target_key("bash", "rg foo src")
    assert read_target_key("bash", "rg foo src") != read_target_key("bash", "rg bar src")
    head = read_target_key("bash", "head -n 50 src/a.py")
    assert read_target_key("bash", "head -50 src/a.py") == head


def test_read_target_key_tells_parts_of_one_file_apart() -> None:
    whole = read_target_key("bash", "cat src/a.py")
    part = read_target_key("bash", "sed -n '1090,1130p' src/a.py")
    assert part == read_target_key("bash", "sed -n 1090,1130p src/a.py")
    assert len({whole, part, read_target_key("bash", "sed -n 335,350p src/a.py")}) == 3
    assert read_target_key("bash", "head -n 50 src/a.py") != whole
    assert read_target_key("bash", "head -n 50 src/a.py") != read_target_key(
        "bash", "head -n 80 src/a.py"
    )
    assert read_target_key("bash", "nl -ba src/a.py | sed -n 10,20p") != read_target_key(
        "bash", "nl -ba src/a.py | sed -n 30,40p"
    )
    read = render_call("read", args={"path": "src/a.py", "offset": 1, "limit": 40})
    later = render_call("read", args={"path": "src/a.py", "offset": 200, "limit": 40})
    assert read_target_key("read", read) != read_target_key("read", later)
    assert read_target_key("read", read) != whole


# --- typecheck / compile errors -------------------------------------------------------------


@pytest.mark.parametrize(
    "command",
    [
        "tsc --noEmit",
        "npx tsc -p .",
        "mypy src",
        "python -m mypy .",
        "pyright",
        "cargo check",
        "cargo build --release",
        "go build ./...",
        "go vet ./...",
        "gcc -o a a.c",
        "clang++ main.cpp",
        "javac Main.java",
        "npm run build",
        "pnpm typecheck",
        "yarn run type-check",
        "cd web && npm run typecheck",
    ],
)
def test_is_check_command(command: str) -> None:
    assert is_check_command(command)


@pytest.mark.parametrize("command", ["rg tsc", "cat mypy.ini", "ls", "pytest -q", "git log"])
def test_is_not_check_command(command: str) -> None:
    assert not is_check_command(command)


ERRORS = [
    ("npx tsc --noEmit", "src/a.ts(12,5): error TS2345: Argument of type 'string' is not x.\n"),
    ("tsc", "src/a.ts:12:5 - error TS2345: Argument of type 'string' is not x.\n"),
    ("cargo check", "error[E0308]: mismatched types\n  --> src/main.rs:4:5\n"),
    ("mypy src", "src/a.py:12: error: Incompatible types  [assignment]\nFound 1 error\n"),
    ("pyright", "  /w/src/a.py:12:5 - error: Cannot access member\n"),
    ("gcc a.c", "a.c:3:7: error: expected ';' before '}' token\n"),
    ("javac Main.java", "Main.java:5: error: cannot find symbol\n"),
    ("go build ./...", "./main.go:12:5: undefined: foo\n"),
    ("cargo build", "error: could not compile `app`\n"),
]


@pytest.mark.parametrize(("command", "output"), ERRORS, ids=[e[0] for e in ERRORS])
def test_error_signature_finds_errors(command: str, output: str) -> None:
    found = error_signature(command, output)
    assert found is not None
    signature, first_line = found
    assert re.fullmatch(r"[0-9a-f]{64}", signature)
    assert first_line


def test_error_signature_ignores_moved_lines_and_noise() -> None:
    one = error_signature("mypy .", "src/a.py:12: error: bad thing  [misc]\nin 0.5s\n")
    two = error_signature("mypy .", "src/a.py:40: error: bad thing  [misc]\nin 3.1s\n")
    assert one is not None and two is not None
    assert one[0] == two[0]
    tsc1 = error_signature("tsc", "/tmp/x1/a.ts(1,2): error TS2304: Cannot find name 'q'.")
    tsc2 = error_signature("tsc", "/tmp/y2/a.ts(9,9): error TS2304: Cannot find name 'q'.")
    assert tsc1 is not None and tsc2 is not None and tsc1[0] == tsc2[0]


def test_error_signature_distinguishes_different_errors() -> None:
    one = error_signature("mypy .", "a.py:1: error: bad thing")
    two = error_signature("mypy .", "a.py:1: error: other thing")
    three = error_signature("mypy .", "b.py:1: error: bad thing")
    assert one is not None and two is not None and three is not None
    assert len({one[0], two[0], three[0]}) == 3


def test_error_signature_needs_an_error() -> None:
    assert error_signature("tsc", "") is None
    assert error_signature("mypy .", "Success: no issues found in 3 source files") is None
    # weak shapes only count after a check command
    assert error_signature("cat log", "./main.go:12:5: undefined: foo") is None
    assert error_signature("cat log", "error: something") is None
    # strong shapes count after any command (tsc run from a test script)
    assert error_signature("npm test", "a.ts(1,1): error TS2304: Cannot find name 'x'.")
