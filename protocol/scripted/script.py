"""The scripted agent's language: a script of steps, parsed and bounded before it runs.

A script is JSON ``{"steps": [...]}`` (or TOML with ``[[steps]]`` tables); each step is an
object with exactly one key:

``{"await": "task"|"message"|"reply"|"any"}``  end the turn; idle until such a delivery arrives
``{"say": TEXT}``                              output text
``{"run": COMMAND}``                           a tool call (reported as tool call + result)
``{"message": {"to", "text", "expects_reply"?, "steer"?}}``
``{"reply": {"text"}}``                        answer the last request received
``{"done": {"status", "summary"?}}``           the explicit terminal signal for the task
``{"sleep": SECONDS}``                         pause (still inside the turn)
``{"exit": CODE}``                             the process exits, as a crash would
``{"repeat": {"times": N, "steps": [...]}}``   the inner steps N times (loops for the watchdog)

In ``text`` and ``summary``, ``{last}`` stands for the text of the last delivery received.

Rules: a script is checked whole before anything runs, and a bad one is a
:class:`ScriptError` (an ``invalid_argument``) naming the step. Bounds: at most
:data:`MAX_SCRIPT_BYTES` of source, 100,000 steps once repeats are unrolled, repeats nested 8
deep and run 0..10000 times, sleeps of 0..86400 s, exit codes 0..255. What the steps do when
run is :mod:`protocol.scripted.script_machine`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

import msgspec

from protocol.core.errors import InvalidArgument

__all__ = [
    "MAX_SCRIPT_BYTES",
    "AwaitKind",
    "AwaitStep",
    "DoneStep",
    "ExitStep",
    "MessageStep",
    "ReplyStep",
    "RunStep",
    "SayStep",
    "Script",
    "ScriptError",
    "SleepStep",
    "Step",
    "load_script_text",
    "parse_script",
]

AwaitKind = Literal["task", "message", "reply", "any"]


class ScriptError(InvalidArgument):
    """A script file that cannot be run; the message names the step."""


class AwaitStep(msgspec.Struct, frozen=True):
    kind: AwaitKind


class SayStep(msgspec.Struct, frozen=True):
    text: str


class RunStep(msgspec.Struct, frozen=True):
    command: str


class MessageStep(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    to: str
    text: str
    expects_reply: bool = False
    steer: bool = False


class ReplyStep(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    text: str


class DoneStep(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    status: Literal["completed", "blocked", "failed"]
    summary: str | None = None
    cancel_requests: bool = False


class SleepStep(msgspec.Struct, frozen=True):
    seconds: float


class ExitStep(msgspec.Struct, frozen=True):
    code: int


Step = AwaitStep | SayStep | RunStep | MessageStep | ReplyStep | DoneStep | SleepStep | ExitStep


class Script(msgspec.Struct, frozen=True):
    steps: tuple[Step, ...]


_MAX_STEPS = 100_000
_MAX_DEPTH = 8
#: A script file larger than this is refused unread (a script is a few kilobytes; this bound
#: keeps a wrong path, such as a log file, from being read into memory).
MAX_SCRIPT_BYTES = 1024 * 1024


def _parse_step(raw: object, where: str, out: list[Step], depth: int) -> None:
    if not isinstance(raw, Mapping) or len(raw) != 1:
        raise ScriptError(f"{where}: a step is an object with exactly one key, got {raw!r:.80}")
    ((key, value),) = raw.items()
    try:
        match key:
            case "await":
                out.append(AwaitStep(msgspec.convert(value, AwaitKind)))
            case "say":
                out.append(SayStep(msgspec.convert(value, str)))
            case "run":
                out.append(RunStep(msgspec.convert(value, str)))
            case "message":
                out.append(msgspec.convert(value, MessageStep))
            case "reply":
                out.append(msgspec.convert(value, ReplyStep))
            case "done":
                out.append(msgspec.convert(value, DoneStep))
            case "sleep":
                seconds = msgspec.convert(value, float)
                if not 0 <= seconds <= 86_400:
                    raise ScriptError(f"{where}: sleep must be 0..86400 seconds, got {seconds}")
                out.append(SleepStep(seconds))
            case "exit":
                code = msgspec.convert(value, int)
                if not 0 <= code <= 255:  # what a process can exit with
                    raise ScriptError(f"{where}: exit needs a code of 0..255, got {code}")
                out.append(ExitStep(code))
            case "repeat":
                if depth >= _MAX_DEPTH:
                    raise ScriptError(f"{where}: repeat nested deeper than {_MAX_DEPTH}")
                if not isinstance(value, Mapping) or set(value) != {"times", "steps"}:
                    raise ScriptError(f"{where}: repeat needs exactly 'times' and 'steps'")
                times = msgspec.convert(value["times"], int)
                inner = value["steps"]
                if not isinstance(inner, list) or not 0 <= times <= 10_000:
                    raise ScriptError(f"{where}: repeat needs 0..10000 times and a list of steps")
                body: list[Step] = []
                for i, sub in enumerate(inner):
                    _parse_step(sub, f"{where}.repeat.steps[{i}]", body, depth + 1)
                if len(out) + len(body) * times > _MAX_STEPS:
                    raise ScriptError(f"{where}: script longer than {_MAX_STEPS} steps")
                for _ in range(times):
                    out.extend(body)
            case _:
                raise ScriptError(f"{where}: unknown step kind {key!r}")
    except msgspec.ValidationError as exc:
        raise ScriptError(f"{where}.{key}: {exc}") from None
    if len(out) > _MAX_STEPS:
        raise ScriptError(f"script longer than {_MAX_STEPS} steps")


def parse_script(document: object) -> Script:
    """Validate an already-parsed JSON/TOML document into a :class:`Script`."""
    if not isinstance(document, Mapping) or set(document) != {"steps"}:
        raise ScriptError('a script is an object with one key, "steps"')
    raw_steps = document["steps"]
    if not isinstance(raw_steps, list):
        raise ScriptError('"steps" must be a list')
    steps: list[Step] = []
    for i, raw in enumerate(raw_steps):
        _parse_step(raw, f"steps[{i}]", steps, 0)
    return Script(tuple(steps))


def load_script_text(text: str, *, toml: bool) -> Script:
    """Parse script source text (JSON or TOML) into a Script, with typed errors."""
    if len(text) > MAX_SCRIPT_BYTES:
        raise ScriptError(f"script is longer than {MAX_SCRIPT_BYTES} bytes")
    try:
        document: Any = msgspec.toml.decode(text) if toml else msgspec.json.decode(text)
    except (msgspec.DecodeError, ValueError) as exc:
        raise ScriptError(f"script is not valid {'TOML' if toml else 'JSON'}: {exc}") from None
    except RecursionError:
        raise ScriptError("script is nested too deeply to read") from None
    try:
        return parse_script(document)
    except RecursionError:
        raise ScriptError("script is nested too deeply to read") from None
