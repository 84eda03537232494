"""Watchdog text rules: normalise commands and outputs, hash, preview, classify calls.

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
* Classification is by tool name first, then by the shell command: ``write`` (edit tools,
  ``sed -i``, ``>`` to a file, ``tee``, ``git apply``, ``patch``, ``mv``/``cp``/``rm`` ...),
  ``read`` (cat/head/tail/rg/grep/find/ls/read tools with no write), else ``other``.
* A typecheck/compile error signature is the sorted set of error lines with line and column
  numbers removed (an error that moves when code is edited is still the same error).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from functools import lru_cache
from typing import Final, Literal

import msgspec

__all__ = [
    "CallClass",
    "classify_call",
    "error_signature",
    "hash_output",
    "is_check_command",
    "make_preview",
    "normalize_command",
    "normalize_output",
    "read_target_key",
    "render_call",
    "strip_ansi",
]

CallClass = Literal["write", "read", "other"]

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


def _split_words(text: str) -> list[str]:
    """Split like a POSIX shell: quotes group, backslash escapes; never raises (an
    unterminated quote runs to the end)."""
    words: list[str] = []
    word: list[str] = []
    quote = ""
    in_word = False
    chars = iter(text)
    for char in chars:
        if quote == "'":
            if char == "'":
                quote = ""
            else:
                word.append(char)
        elif quote == '"':
            if char == '"':
                quote = ""
            elif char == "\\":
                following = next(chars, "")
                word.append(following if following in '"\\' else char + following)
            else:
                word.append(char)
        elif char in "'\"":
            quote, in_word = char, True
        elif char == "\\":
            word.append(next(chars, ""))
            in_word = True
        elif char.isspace():
            if in_word:
                words.append("".join(word))
                word, in_word = [], False
        else:
            word.append(char)
            in_word = True
    if in_word:
        words.append("".join(word))
    return words


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


# --- classification ---------------------------------------------------------------------

_QUOTED = re.compile(r"'[^']*'|\"(?:[^\"\\]|\\.)*\"")
_SEGMENT_SPLIT = re.compile(r"\|\||&&|[;|&\n]|\$\(|`")
_REDIRECT = re.compile(r"\d*>>?\|?\s*(\S+)?")
_REDIRECT_STRIP = re.compile(r"\d*(?:>>?|<)(?:&\d+|\|?\s*[^\s|;&]+)")
_HIDDEN = re.compile(r"\x00(\d+)\x00")
_WRITE_TOOL = re.compile(r"edit|write|patch|str_replace|insert|replace|create|delete|rename|move")
_READ_TOOL = re.compile(r"read|view|open|cat|grep|glob|find|search|^ls$|^list|^rg$|ripgrep")
_WRITE_VERBS: Final = frozenset(
    {"mv", "cp", "rm", "touch", "mkdir", "rmdir", "ln", "install", "truncate", "dd", "patch"}
    | {"apply_patch", "chmod"}
)
_GIT_WRITES: Final = frozenset(
    {"apply", "am", "checkout", "restore", "reset", "merge", "rebase", "cherry-pick", "stash"}
    | {"mv", "rm", "commit", "switch", "revert", "clean"}
)
_GIT_READS: Final = frozenset(
    {"status", "log", "diff", "show", "grep", "ls-files", "blame", "branch"}
)
_READ_VERBS: Final = frozenset(
    {"cat", "less", "more", "head", "tail", "bat", "nl", "sed", "awk", "jq", "wc", "stat"}
    | {"file", "rg", "grep", "egrep", "fgrep", "ag", "ack", "find", "fd", "ls", "tree", "du"}
    | {"read", "view", "open", "glob", "search", "strings", "xxd", "od", "diff", "cmp"}
)
_NEUTRAL_VERBS: Final = frozenset(
    {"cd", "pwd", "echo", "printf", "true", ":", "sleep", "clear", "which", "type", "export"}
)
_SCRIPT_FIRST: Final = frozenset({"sed", "awk", "jq"})


def _tokens(segment: str) -> list[str]:
    tokens = _split_words(segment)
    while tokens and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", tokens[0]):
        tokens.pop(0)  # FOO=bar cmd
    while tokens and tokens[0] in {"sudo", "time", "nice", "command", "env", "exec"}:
        tokens.pop(0)
    return tokens


def _segments(command: str) -> list[list[str]]:
    """Simple commands of a shell line, split on ``| && || ; &`` outside quotes."""
    quoted: list[str] = []

    def hide(match: re.Match[str]) -> str:
        quoted.append(match.group(0))
        return f"\x00{len(quoted) - 1}\x00"

    masked = _REDIRECT_STRIP.sub(" ", _QUOTED.sub(hide, command.replace("\x00", "")))
    segments = []
    for part in _SEGMENT_SPLIT.split(masked):
        text = _HIDDEN.sub(lambda m: quoted[int(m.group(1))], part)
        tokens = _tokens(text)
        if tokens:
            segments.append(tokens)
    return segments


def _shell_writes(command: str) -> bool:
    unquoted = _QUOTED.sub("''", command)
    for match in _REDIRECT.finditer(unquoted):
        target = match.group(1) or ""
        if not target.startswith("&") and target not in {"/dev/null", "/dev/stdout", "/dev/stderr"}:
            return True
    for tokens in _segments(command):
        verb = tokens[0].rsplit("/", 1)[-1]
        if verb in _WRITE_VERBS:
            return True
        if verb == "tee" and any(t != "/dev/null" and not t.startswith("-") for t in tokens[1:]):
            return True
        if verb in {"sed", "perl", "ruby"} and any(
            t.startswith("--in-place") or re.fullmatch(r"-[a-zA-Z]*i.*", t) for t in tokens[1:]
        ):
            return True
        if verb == "find" and any(t in {"-delete", "-exec", "-execdir"} for t in tokens[1:]):
            return True
        if verb == "git" and len(tokens) > 1 and tokens[1] in _GIT_WRITES:
            return True
    return False


def _read_verb(tokens: list[str]) -> bool:
    verb = tokens[0].rsplit("/", 1)[-1]
    if verb == "git":
        return len(tokens) > 1 and tokens[1] in _GIT_READS
    return verb in _READ_VERBS


@lru_cache(maxsize=4096)  # pure; the detector asks again on every event
def classify_call(tool: str, command: str) -> CallClass:
    """``write`` (makes progress), ``read`` (only looks), or ``other``."""
    name = tool.lower()
    if name not in SHELL_TOOLS:
        if "todo" not in name and _WRITE_TOOL.search(name):
            return "write"
        if _READ_TOOL.search(name):
            return "read"
    if _shell_writes(command):
        return "write"
    segments = _segments(command)
    meaningful = [t for t in segments if t[0] not in _NEUTRAL_VERBS]
    if meaningful and all(_read_verb(t) for t in meaningful):
        return "read"
    return "other"


@lru_cache(maxsize=4096)  # pure; the detector asks again on every event
def read_target_key(tool: str, command: str) -> str:
    """What a read-only call looks at: verbs and their non-option arguments, order-free."""
    keys: set[str] = set()
    name = tool.lower()
    segments = _segments(command)
    if name not in SHELL_TOOLS and segments and segments[0][0] != tool:
        segments[0] = [tool, *segments[0]]  # structured read tool with a bare argument
    for tokens in segments:
        if tokens[0] in _NEUTRAL_VERBS:
            continue
        verb = tokens[0].rsplit("/", 1)[-1]
        args = [
            t
            for t in tokens[1:]
            if not t.startswith("-") and "=" not in t and not t.isdigit() and t != "|"
        ]
        if verb in _SCRIPT_FIRST and args:
            args = args[1:]
        if verb == "git" and args:
            verb, args = f"git {args[0]}", args[1:]
        if args or not keys:
            keys.add(f"{_read_family(verb)}:{' '.join(sorted(set(args)))}")
    return "; ".join(sorted(keys)) if keys else normalize_command(command)


_FAMILIES: Final = (
    ("read", re.compile(r"^(?:cat|less|more|head|tail|bat|nl|sed|awk)$|read|view|open")),
    ("search", re.compile(r"^(?:rg|ag|ack|ripgrep)$|grep|search")),
    ("list", re.compile(r"^(?:ls|tree|find|fd|du)$|glob|list")),
)


def _read_family(verb: str) -> str:
    """Reads of the same thing by different verbs (cat/head/read) share one family."""
    for family, pattern in _FAMILIES:
        if pattern.search(verb):
            return family
    return verb


# --- typecheck / compile errors ---------------------------------------------------------

_RUNNER = re.compile(
    r"^(?:(?:npx|bunx|pnpx)\s+|(?:pnpm|yarn)\s+(?:exec|dlx)\s+"
    r"|(?:uv|poetry|pipenv|pdm|hatch)\s+run\s+|python3?\s+-m\s+)+"
)
_CHECK_COMMAND = re.compile(
    r"""(?x)^(?:
        (?:tsc|vue-tsc)\b
      | (?:mypy|dmypy|pyright|basedpyright|pyre|pytype)\b
      | cargo\s+(?:check|build|clippy|test|run)\b
      | go\s+(?:build|vet|test|run)\b
      | (?:gcc|g\+\+|clang|clang\+\+|cc|c\+\+|javac|kotlinc|scalac|swiftc|rustc)(?:\s|$)
      | (?:npm|pnpm|yarn|bun)\s+(?:run\s+)?(?:build|typecheck|type-check|tsc|check|compile)\b
      | dotnet\s+build\b | mvn\s+(?:compile|package|verify|install)\b
      | gradlew?\s+(?:build|compile\w*|assemble)\b | make\b | cmake\s+--build\b
    )"""
)
_STRONG_ERROR = re.compile(
    r"""(?x)
      \berror\s+TS\d+\b                               # tsc
    | ^\s*error\[E\d+\]                               # rustc / cargo
    | ^\s*\S+?:\d+(?::\d+)?:\s*(?:fatal\ )?error:     # mypy, gcc, clang, javac
    | ^\s*\S+?:\d+:\d+\s+-\s+error\b                  # pyright
    """
)
_WEAK_ERROR = re.compile(r"^\s*(?:error(?:\[\w+\])?:|\S+\.go:\d+:\d+:\s)")
_LINE_COL = re.compile(r"(?<=\S)(?:\(\d+(?:,\d+)?\)|(?::\d+){1,2})(?=[:\s]|$)")
_RUST_LOCATION = re.compile(r"^\s*-->\s*(\S+?)(?::\d+)*$")
MAX_ERROR_LINES: Final = 100


@lru_cache(maxsize=4096)  # pure; the detector asks again on every event
def is_check_command(command: str) -> bool:
    """Does the command run a type checker or compiler (tsc, mypy, cargo check, ...)?"""
    for tokens in _segments(command):
        text = " ".join([tokens[0].rsplit("/", 1)[-1], *tokens[1:]])
        if _CHECK_COMMAND.match(_RUNNER.sub("", text)):
            return True
    return False


def error_signature(command: str, output: str) -> tuple[str, str] | None:
    """``(sha256 signature, first error line)`` of a typecheck/compile failure, or None.

    Strong error shapes (``error TS2345``, ``error[E0308]``, ``file.py:12: error:``) count
    after any command; weaker ones (``error: ...``, Go's ``file.go:3:4: msg``) only after a
    recognised check command.
    """
    lines = normalize_output(output).split("\n")
    check = is_check_command(command)
    found: list[str] = []
    for index, line in enumerate(lines):
        if not (_STRONG_ERROR.search(line) or (check and _WEAK_ERROR.search(line))):
            continue
        signature = _LINE_COL.sub("", line.strip())
        if signature.startswith("error["):  # rustc: the location is on a following line
            for follow in lines[index + 1 : index + 4]:
                where = _RUST_LOCATION.match(follow)
                if where:
                    signature = f"{signature} @ {where.group(1)}"
                    break
        found.append(signature)
        if len(found) >= MAX_ERROR_LINES:
            break
    if not found:
        return None
    unique = sorted(set(found))
    digest = hashlib.sha256("\n".join(unique).encode()).hexdigest()
    return digest, found[0][:PREVIEW_LINE_CHARS]
