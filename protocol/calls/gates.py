"""The tool-gating rules of ``spawn --approve TOOL:GLOB``, as the Pi extension reads them
(``actors/pi/shepherd_child.ts``) and the ``acp`` adapter matches an agent's permission requests.

Rules:

1. A rule is ``TOOL:GLOB`` (bounds in :mod:`protocol.core.limits`): the tool's name, then a
   glob in which ``*`` is any text and ``?`` one character, every other character itself; the
   glob is trimmed.
2. The **subject** a glob is matched against is the call's ``command`` (a string, or a list of
   words joined by spaces), else its ``path``, else its title, else its input as compact JSON;
   trimmed.
3. A call matches a rule when its tool is the rule's tool and its whole subject matches the
   glob; the first rule that matches is the one named.

Sans-IO: pure functions only.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from typing import NamedTuple

__all__ = ["Gate", "gates", "matching", "subject_of"]


class Gate(NamedTuple):
    tool: str
    pattern: re.Pattern[str]
    source: str


def _pattern(glob: str) -> re.Pattern[str]:
    parts = (
        "[\\s\\S]*" if ch == "*" else "[\\s\\S]" if ch == "?" else re.escape(ch) for ch in glob
    )
    return re.compile("".join(parts))


def gates(rules: Iterable[str]) -> list[Gate]:
    """The rules (checked already, rule 1) as gates."""
    found = []
    for rule in rules:
        tool, sep, glob = rule.partition(":")
        if sep and tool:
            found.append(Gate(tool, _pattern(glob.strip()), rule))
    return found


def subject_of(raw_input: object, title: str | None = None) -> str:
    """What a call's glob is matched against (rule 2)."""
    if isinstance(raw_input, Mapping):
        command = raw_input.get("command")
        if isinstance(command, list) and all(isinstance(w, str) for w in command):
            command = " ".join(command)
        if isinstance(command, str):
            return command.strip()
        path = raw_input.get("path")
        if isinstance(path, str):
            return path.strip()
    if title:
        return title.strip()
    return json.dumps(raw_input, sort_keys=True, separators=(",", ":"), default=str)


def matching(found: list[Gate], tool: str, subject: str) -> Gate | None:
    """The first gate the call matches (rule 3), or None."""
    for gate in found:
        if gate.tool == tool and gate.pattern.fullmatch(subject):
            return gate
    return None
