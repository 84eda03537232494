"""Watchdog call rules: what a call does (write, read, other), what a read looks at, and
whether its output is a failed typecheck or compile.

Rules
-----
* A shell command is split like a POSIX shell (quotes group, backslash escapes) into simple
  commands on ``| && || ; &`` outside quotes; splitting never raises (an unterminated quote
  runs to the end). Leading ``FOO=bar`` assignments and ``sudo``/``time``/``env``... wrappers
  are not the verb.
* Classification is by tool name first, then by the shell command: ``write`` (edit tools,
  ``sed -i``, ``>`` to a file, ``tee``, ``git apply``, ``patch``, ``mv``/``cp``/``rm`` ...),
  ``read`` (cat/head/tail/rg/grep/find/ls/read tools with no write), else ``other``.
* A read's target key is the region it looks at: its verb's family (read, search, list) and
  the words that pick what it reads (operands, line ranges, counts), order-free. So ``cat f``
  and ``read f`` look at the same thing, but ``sed -n 1,40p f`` and ``sed -n 90,130p f`` read
  different parts of one file, as ``head -n 40 f`` and ``cat f`` do.
* A typecheck/compile error signature is the sorted set of error lines with line and column
  numbers removed (an error that moves when code is edited is still the same error).

The text rules these build on (command keys, output normalisation) are
:mod:`protocol.watchdog.normalize`.
"""

from __future__ import annotations

import hashlib
import re
from functools import lru_cache
from typing import Final, Literal

from protocol.watchdog.normalize import (
    PREVIEW_LINE_CHARS,
    SHELL_TOOLS,
    normalize_command,
    normalize_output,
)

__all__ = [
    "CallClass",
    "classify_call",
    "error_signature",
    "is_check_command",
    "read_target_key",
]

CallClass = Literal["write", "read", "other"]


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


_COUNT_OPTION = re.compile(r"-(\d+)")  # ``head -40 f``: the count is the region


def _region_words(tokens: list[str]) -> list[str]:
    """The words of one simple command that say what it reads: its operands, and the numbers
    and scripts that pick a part of them (``-n 40``, ``sed -n 90,130p``, ``offset=100``)."""
    words = []
    for token in tokens[1:]:
        count = _COUNT_OPTION.fullmatch(token)
        if count:
            words.append(count.group(1))
        elif not token.startswith("-") and token != "|":
            words.append(token)
    return words


@lru_cache(maxsize=4096)  # pure; the detector asks again on every event
def read_target_key(tool: str, command: str) -> str:
    """What region a read-only call looks at: verbs and the words that pick what they read
    (operands, line ranges, counts), order-free. Spellings of one region share a key (``cat
    f`` = ``read f``); different parts of one file do not (``sed -n 1,40p f`` is not ``sed -n
    90,130p f``, ``read f offset=1`` is not ``read f offset=200``)."""
    keys: set[str] = set()
    name = tool.lower()
    segments = _segments(command)
    if name not in SHELL_TOOLS and segments and segments[0][0] != tool:
        segments[0] = [tool, *segments[0]]  # structured read tool with a bare argument
    for tokens in segments:
        if tokens[0] in _NEUTRAL_VERBS:
            continue
        verb = tokens[0].rsplit("/", 1)[-1]
        args = _region_words(tokens)
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
