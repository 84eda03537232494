"""Watchdog text rules: normalise commands and outputs, hash, preview, render calls.

Rules
-----
* A command key is the command with ANSI escapes removed, trimmed, whitespace collapsed. A
  structured tool call (no shell command) is rendered as ``TOOL path-like-args key=json ...``
  with keys sorted, so equal calls give equal keys.
* An output hash is sha256 over the *normalised* output: ANSI stripped, carriage-return
  overwrites resolved, trailing blanks dropped, and volatile noise replaced by placeholders
  (pids, temp paths, ISO timestamps and clock times, epoch seconds, durations, hex ids of 7+
  characters, UUIDs) so that a changing pid or timestamp does not hide a loop.
  Long outputs are cut to a head and a tail before hashing (the tail is where test summaries
  and compiler totals live). :func:`normalize_output` is idempotent.
* A preview is at most ``max_lines`` lines of the ANSI-stripped output (head and tail with an
  omission marker), each line capped; whole outputs are never kept.
* A word put in a key is shell-quoted (as ``shlex.quote``), so a path with spaces stays one
  word when :mod:`protocol.watchdog.classify` splits the key again.

What a call *does* (write, read, a failed typecheck) is :mod:`protocol.watchdog.classify`.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from typing import Final

import msgspec

__all__ = [
    "SHELL_TOOLS",
    "hash_output",
    "make_preview",
    "normalize_command",
    "normalize_output",
    "render_call",
    "strip_ansi",
]

DEFAULT_HASH_CHARS: Final = 32_000
PREVIEW_LINE_CHARS: Final = 240
MAX_ARG_CHARS: Final = 200  # longer structured argument values are kept as a digest
MAX_COMMAND_KEY_CHARS: Final = 2000

# CSI, OSC, charset selection, two-character escapes, then any stray ESC, so that stripping
# is a fixed point.
_ANSI = re.compile(
    r"\x1b\[[0-?]*[ -/]*[@-~]"
    r"|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?"
    r"|\x1b[()*+][0-9A-Za-z]"
    r"|\x1b[@-Z\\-_]"
    r"|\x1b"
)
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
_WS = re.compile(r"\s+")

# Volatile noise, applied in this order (most specific first).
_NOISE: Final[tuple[tuple[re.Pattern[str], str], ...]] = (
    (
        re.compile(
            r"\b[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\b"
        ),
        "<uuid>",
    ),
    (
        re.compile(
            r"(?<!\d)\d{4}-\d{2}-\d{2}(?:[T ]\d{2}:\d{2}(?::\d{2})?(?:[.,]\d+)?"
            r"(?:Z|[+-]\d{2}:?\d{2})?)?(?!\d)"
        ),
        "<ts>",
    ),
    (re.compile(r"(?<![:\d])\d{1,2}:\d{2}:\d{2}(?:[.,]\d+)?(?![:\d])"), "<time>"),
    (
        re.compile(
            r"(?:/private)?/(?:var/)?tmp/(?!<tmp>)[^\s'\"`:;,()\[\]{}<>]*"
            r"|/(?:private/)?var/folders/[^\s'\"`:;,()\[\]{}<>]*"
        ),
        "/tmp/<tmp>",
    ),
    (re.compile(r"\btmp[a-z0-9_]{6,}\b"), "tmp<tmp>"),
    (re.compile(r"(?i)\b(pid|ppid|process(?: id)?)\b(\s*[:=#]?\s*)\d+"), r"\1\2<pid>"),
    (re.compile(r"\[\d{3,7}\]"), "[<pid>]"),
    (re.compile(r"(?i)\b0x[0-9a-f]{4,}\b"), "0x<hex>"),
    (re.compile(r"(?i)\b(?=[0-9a-f]*\d)(?=[0-9a-f]*[a-f])[0-9a-f]{7,}\b"), "<hex>"),
    (re.compile(r"(?<![\w.])1[5-9]\d{8}(?:\.\d+)?(?![\w.])"), "<epoch>"),
    (
        re.compile(
            r"(?<![\w.])(?:\d+h\s?)?(?:\d+m\s?)?\d+(?:\.\d+)?\s?"
            r"(?:ms|µs|us|ns|s|sec|secs|seconds?|mins?|minutes?)(?![\w])"
        ),
        "<dur>",
    ),
)


def strip_ansi(text: str) -> str:
    """Remove ANSI escape sequences and stray control characters (keeps \\n, \\r, \\t)."""
    return _CONTROL.sub("", _ANSI.sub("", text))


def normalize_command(text: str) -> str:
    """Command key: ANSI stripped, trimmed, runs of whitespace collapsed to one space."""
    return _WS.sub(" ", strip_ansi(text)).strip()


def _resolve_lines(text: str) -> list[str]:
    """Split into lines; a carriage return overwrites its line (progress bars)."""
    lines = []
    for line in strip_ansi(text).replace("\r\n", "\n").split("\n"):
        shown = [part for part in line.split("\r") if part]  # what a terminal would show last
        lines.append(shown[-1].rstrip() if shown else "")
    while lines and not lines[-1]:
        lines.pop()
    while lines and not lines[0]:
        lines.pop(0)
    return lines


def normalize_output(text: str) -> str:
    """Output with ANSI and volatile noise replaced by placeholders (idempotent)."""
    out = "\n".join(_resolve_lines(text))
    for _ in range(4):  # placeholders can expose a new match only rarely; reach a fixed point
        before = out
        for pattern, placeholder in _NOISE:
            out = pattern.sub(placeholder, out)
        out = "\n".join(line.rstrip() for line in out.split("\n")).strip("\n")
        if out == before:
            break
    return out


def _head_tail(text: str, max_chars: int) -> str:
    if len(text) <= max_chars:
        return text
    half = max(max_chars // 2, 1)
    return f"{text[:half]}\n...\n{text[-half:]}"


def hash_output(text: str, max_chars: int = DEFAULT_HASH_CHARS) -> str:
    """sha256 hex of the normalised output, cut to a head and a tail of ``max_chars``."""
    bounded = _head_tail(text, max_chars * 4)  # bound the normalisation cost first
    digest = hashlib.sha256(_head_tail(normalize_output(bounded), max_chars).encode())
    return digest.hexdigest()


def make_preview(text: str, max_lines: int) -> str:
    """At most ``max_lines`` lines: head, an omission marker, tail; long lines are cut."""
    if max_lines <= 0:
        return ""
    lines = [
        line if len(line) <= PREVIEW_LINE_CHARS else line[: PREVIEW_LINE_CHARS - 1] + "…"
        for line in _resolve_lines(text)
    ]
    if len(lines) <= max_lines:
        return "\n".join(lines)
    if max_lines < 3:
        return "\n".join(lines[:max_lines])
    tail = (max_lines - 1) // 2
    head = max_lines - 1 - tail
    omitted = len(lines) - head - tail
    return "\n".join([*lines[:head], f"… ({omitted} lines omitted)", *lines[-tail:]])


# --- rendering structured calls ---------------------------------------------------------

_PATHLIKE: Final = (
    "path",
    "file_path",
    "filepath",
    "file",
    "filename",
    "paths",
    "pattern",
    "query",
    "glob",
    "dir",
    "directory",
    "target",
    "url",
)
SHELL_TOOLS: Final = frozenset(
    {
        "",
        "bash",
        "sh",
        "zsh",
        "shell",
        "exec",
        "exec_command",
        "execute",
        "execute_command",
        "run",
        "run_command",
        "run_shell_command",
        "run_terminal_cmd",
        "terminal",
        "command",
        "cmd",
        "local_shell",
        "powershell",
    }
)


def render_call(tool: str, command: str | None = None, args: object = None) -> str:
    """The command key of a call: its shell command, else ``tool`` and its sorted args.

    Keys stay bounded: a long argument value (a file's new content) is replaced by its
    length and a digest, and a very long command keeps its head and a digest of the whole.
    """
    if command is not None:
        return _bounded(normalize_command(command))
    if isinstance(args, Mapping):
        shell = args.get("command", args.get("cmd"))
        if tool.lower() in SHELL_TOOLS and isinstance(shell, str):
            return _bounded(normalize_command(shell))
        parts = [tool]
        for key in _PATHLIKE:
            value = args.get(key)
            if isinstance(value, str):
                parts.append(_quote(value))
            elif isinstance(value, list):
                parts.extend(_quote(str(v)) for v in value)
        rest = sorted((str(k), v) for k, v in args.items() if str(k) not in _PATHLIKE)
        parts.extend(f"{key}={_json(value)}" for key, value in rest)
        return _bounded(normalize_command(" ".join(parts)))
    if args is None:
        return _bounded(normalize_command(tool))
    return _bounded(normalize_command(f"{tool} {_json(args)}"))


_SAFE_WORD = re.compile(r"[\w@%+=:,./-]+", re.ASCII)


def _quote(word: str) -> str:
    """Shell-quote one word (as ``shlex.quote``), so a path with spaces stays one token."""
    if _SAFE_WORD.fullmatch(word):
        return word
    return "'" + word.replace("'", "'\"'\"'") + "'"


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _bounded(command: str) -> str:
    if len(command) <= MAX_COMMAND_KEY_CHARS:
        return command
    return f"{command[: MAX_COMMAND_KEY_CHARS // 2]}… #{_digest(command)}"


def _json(value: object) -> str:
    try:
        text = msgspec.json.encode(value, order="sorted").decode()
    except (TypeError, msgspec.EncodeError):
        text = repr(value)
    if len(text) > MAX_ARG_CHARS:
        return f"<{len(text)} chars #{_digest(text)}>"
    return text
