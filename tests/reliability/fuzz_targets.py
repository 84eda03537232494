"""Fuzz targets for the boundary: what a hostile or broken file can put in front of Shepherd.

Each target is a Hypothesis strategy of raw inputs plus a ``check`` that states the contract:

- ``envelope``: :func:`protocol.wire.envelopes.decode_envelope` returns an envelope whose ids are
  all well-formed (so never path-like) and which round-trips, or raises ``invalid_envelope``.
- ``settings``: :func:`actors.surfaces.config.load_settings` over a random project file never
raises;
  a file that is not UTF-8 TOML is named in a warning; and the settings it returns are usable
  (finite, in range: a poll interval of ``nan`` would stop the mailbox receiver).
- ``script``: :func:`protocol.scripted.script.load_script_text` returns a ``Script`` or raises
  ``ScriptError``, for JSON and TOML text alike.
- ``replay``: :func:`protocol.watchdog.replay.decode_replay_line` returns a ``ReplayEvent`` or
  raises ``ReplayLineError``; :func:`~protocol.watchdog.replay.replay` over a few lines returns
  verdicts ending in a final one, or raises ``ReplayLineError``.

Inputs mix structure-aware generation (documents shaped like the real thing with one field
wrong: wrong types, huge strings, unknown kinds, foreign sessions, invalid and path-like ids,
NUL bytes) with raw bytes, mutations of valid inputs and deep nesting.
``tests/reliability/test_fuzz_boundary.py`` runs them under pytest; ``scripts/fuzz.py`` runs
one for a given number of seconds.
"""

from __future__ import annotations

import json
import math
import secrets
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec
from hypothesis import strategies as st

from actors.surfaces.config import load_settings
from protocol.core.errors import InvalidEnvelope
from protocol.core.ids import PARENT_ID, IdKind, is_valid_name, kind_of, make_id
from protocol.records.settings import Settings
from protocol.scripted.script import Script, ScriptError, load_script_text
from protocol.watchdog.config import CONFIG_KEYS
from protocol.watchdog.replay import ReplayEvent, ReplayLineError, decode_replay_line, replay
from protocol.wire.envelopes import ENCODER, AnyEnvelope, decode_envelope

__all__ = [
    "TARGETS",
    "Target",
    "deep",
    "toml_document",
    "valid_envelope_dict",
    "valid_envelope_docs",
]

SESSION = make_id(IdKind.SESSION, "5e55105e55105e55")
MAX_ENVELOPE = 64 * 1024


def _id(kind: IdKind) -> st.SearchStrategy[str]:
    return st.builds(lambda: make_id(kind, secrets.token_hex(8)))


PATH_LIKE = [
    "../../etc/passwd",
    "shepherd-agent-../../x",
    "shepherd-agent-0123456789abcdef/../../x",
    "shepherd-message-0123456789abcdef/../cur",
    "shepherd-agent-0123456789abcdef\x00",
    "shepherd-agent-0123456789ABCDEF",
    "shepherd-agent-0123456789abcdef\n",
    "/tmp/x",
    ".",
    "..",
    "parent",
    "shepherd-session-",
    "shepherd-agent-" + "a" * 65,
]

#: any id-ish value: valid ids of every kind, names, path-like strings, junk, non-strings
ids = st.one_of(
    *(_id(k) for k in IdKind),
    st.just(PARENT_ID),
    st.sampled_from(["scout", "planner", "Scout", "a" * 33, "shepherd-x", ""]),
    st.sampled_from(PATH_LIKE),
    st.text(max_size=40),
    st.integers(),
    st.none(),
)

huge = st.builds(lambda n, c: c * n, st.integers(1_000, 200_000), st.sampled_from("a\x00é💥"))

#: any JSON value, including big numbers, NUL-bearing text and moderate nesting
json_values = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(min_value=-(2**70), max_value=2**70),
        st.floats(allow_nan=False, allow_infinity=False),
        st.text(max_size=30),
        huge,
    ),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=12,
)

KINDS = [
    "message",
    "reply",
    "task",
    "task_done",
    "runtime",
    "ack",
    "control",
    "notice",
    "call",
    "result",
]
OPTIONAL_FIELDS = {
    "content": st.one_of(st.text(max_size=50), huge, json_values),
    "task_id": ids,
    "reply_to": ids,
    "ack_for": ids,
    "call_id": ids,
    "reply_inbox": ids,
    "thread_id": st.one_of(st.none(), st.text(max_size=20)),
    "expects_reply": st.one_of(st.booleans(), json_values),
    "delivery": st.sampled_from(["follow_up", "steer", "shout", 3]),
    "status": st.sampled_from(["completed", "blocked", "failed", "done", None, 0]),
    "event": st.sampled_from(["ready", "turn_end", "exit", "bogus", ""]),
    "accepted": st.one_of(st.booleans(), json_values),
    "action": st.sampled_from(["close", "cancel_task", "abort", "explode"]),
    "code": st.text(max_size=10),
    "text": st.one_of(st.text(max_size=20), huge),
    "op": st.sampled_from(["ping", "status", "spawn", "../x"]),
    "args": json_values,
    "capability": st.one_of(st.text(max_size=40), st.just("0" * 32)),
    "created_at": st.one_of(st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=5)),
    "late": st.booleans(),
    "pid": st.one_of(st.integers(), st.text(max_size=5)),
}


def valid_envelope_dict(kind: str = "message") -> dict[str, Any]:
    """A valid ``message`` (or ``task_done``) envelope as a plain dict, for mutation."""
    base: dict[str, Any] = {
        "kind": kind,
        "message_id": make_id(IdKind.MESSAGE, secrets.token_hex(8)),
        "session_id": SESSION,
        "sender_id": make_id(IdKind.AGENT, secrets.token_hex(8)),
        "target_id": PARENT_ID if kind == "task_done" else "planner",
        "created_at": 1.0,
    }
    if kind == "message":
        base["content"] = "hello"
    else:
        base["status"] = "completed"
    return base


@st.composite
def envelope_documents(draw: st.DrawFn) -> dict[str, Any]:
    """An envelope-shaped object: valid, with some fields replaced, added or removed."""
    doc = valid_envelope_dict(draw(st.sampled_from(["message", "task_done"])))
    for key in draw(st.lists(st.sampled_from(sorted(doc)), max_size=3, unique=True)):
        doc[key] = draw(ids if key.endswith("_id") else json_values)
    for key in draw(st.lists(st.sampled_from(sorted(OPTIONAL_FIELDS)), max_size=4, unique=True)):
        doc[key] = draw(OPTIONAL_FIELDS[key])
    if draw(st.integers(0, 9)) == 0:
        doc[draw(st.text(min_size=1, max_size=10))] = draw(json_values)  # an unknown field
    if draw(st.integers(0, 5)) == 0:
        doc["kind"] = draw(st.one_of(st.sampled_from(KINDS), st.text(max_size=10), json_values))
    if draw(st.integers(0, 9)) == 0:
        doc.pop(draw(st.sampled_from(sorted(doc))))
    return doc


def deep(n: int, opener: str = "[", closer: str = "]") -> str:
    return opener * n + closer * n


def _mutate(data: bytes, at: int, cut: int, flip: bytes) -> bytes:
    at = min(at, len(data))
    return (data[:at] + flip + data[at + len(flip) :])[: max(cut, 0)]


def mutated(source: st.SearchStrategy[bytes]) -> st.SearchStrategy[bytes]:
    return st.builds(
        _mutate,
        source,
        st.integers(0, 400),
        st.integers(0, 2000),
        st.binary(min_size=1, max_size=4),
    )


def _json_bytes(doc: Any) -> bytes:
    return json.dumps(doc, ensure_ascii=False, allow_nan=False).encode("utf-8", "surrogatepass")


envelope_doc_bytes = envelope_documents().map(_json_bytes)


@st.composite
def valid_envelope_docs(draw: st.DrawFn) -> dict[str, Any]:
    """Valid envelopes of several kinds with awkward but legal content (NUL, unicode, big)."""
    kind = draw(st.sampled_from(["message", "task_done", "reply", "runtime"]))
    doc = valid_envelope_dict("task_done" if kind == "task_done" else "message")
    doc["kind"] = kind
    text = draw(
        st.one_of(st.text(max_size=200), st.builds(lambda n: "\x00é" * n, st.integers(0, 6000)))
    )
    if kind == "reply":
        doc["reply_to"] = make_id(IdKind.MESSAGE, secrets.token_hex(8))
        doc["content"] = text
    elif kind == "runtime":
        doc.pop("content")
        doc.update(event=draw(st.sampled_from(["ready", "turn_end", "output"])), text=text)
        doc["target_id"] = PARENT_ID
    elif kind == "task_done":
        doc["summary"] = text
        if draw(st.booleans()):
            doc["task_id"] = make_id(IdKind.TASK, secrets.token_hex(8))
    else:
        doc["content"] = text
        doc["expects_reply"] = draw(st.booleans())
        doc["target_id"] = draw(st.sampled_from(["planner", PARENT_ID, "target"]))
    return doc


def valid_envelopes() -> st.SearchStrategy[bytes]:
    return valid_envelope_docs().map(_json_bytes)


_shallow_envelopes = st.one_of(
    valid_envelopes(),
    envelope_doc_bytes,
    mutated(envelope_doc_bytes),
    mutated(valid_envelopes()),
    st.binary(max_size=2000),
    st.builds(
        lambda d: _json_bytes(d).replace(b'"hello"', b'"he\\u0000llo"'), envelope_documents()
    ),
)
envelope_inputs = st.one_of(
    _shallow_envelopes,
    st.integers(1, 200_000).map(lambda n: deep(n).encode()),
    st.integers(1, 5_000).map(lambda n: (deep(n, '{"a":', "}")).encode()),
)


def check_envelope(data: bytes) -> str:
    try:
        envelope = decode_envelope(data, max_bytes=MAX_ENVELOPE)
    except InvalidEnvelope:
        return "invalid_envelope"
    _well_formed(envelope)
    assert decode_envelope(ENCODER.encode(envelope)) == envelope, "does not round-trip"
    return f"decoded:{envelope.__struct_config__.tag}"


def _well_formed(envelope: AnyEnvelope) -> None:
    for name in ("message_id", "session_id", "sender_id", "target_id", "task_id", "reply_to"):
        value = getattr(envelope, name, None)
        if value is None:
            continue
        assert isinstance(value, str)
        named = name == "target_id" and is_valid_name(value)
        assert value == PARENT_ID or kind_of(value) is not None or named, f"{name}={value!r}"
        assert "/" not in value and "\x00" not in value and ".." not in value, value


# ---------------------------------------------------------------------- settings (TOML)


def _toml_key(key: str) -> str:
    ok = key and all(c.isascii() and (c.isalnum() or c in "-_") for c in key)
    return key if ok else json.dumps(key)


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{_toml_key(k)} = {_toml_value(v)}" for k, v in value.items()) + "}"
    return json.dumps(str(value))


def toml_document(table: dict[str, Any]) -> str:
    """A small TOML writer (no new dependency): scalars first, then one [table] per dict."""
    lines = [
        f"{_toml_key(k)} = {_toml_value(v)}" for k, v in table.items() if not isinstance(v, dict)
    ]
    for key, value in table.items():
        if isinstance(value, dict):
            lines.append(f"[{_toml_key(key)}]")
            lines.extend(f"{_toml_key(k)} = {_toml_value(v)}" for k, v in value.items())
    return "\n".join(lines) + "\n"


SETTINGS_KEYS = [f.name for f in msgspec.structs.fields(Settings)]
WATCHDOG_KEYS = list(CONFIG_KEYS)
toml_scalars = st.one_of(
    st.booleans(),
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.floats(),  # nan and inf included: TOML has them
    st.text(max_size=20),
    st.lists(st.integers(-5, 5), max_size=3),
)


@st.composite
def settings_tables(draw: st.DrawFn) -> dict[str, Any]:
    table: dict[str, Any] = {}
    for key in draw(st.lists(st.sampled_from([*SETTINGS_KEYS, "bogus", "watchdog"]), max_size=6)):
        table[key] = draw(toml_scalars)
    if draw(st.booleans()):
        table["watchdog"] = {
            k: draw(toml_scalars)
            for k in draw(st.lists(st.sampled_from([*WATCHDOG_KEYS, "nope"]), max_size=4))
        }
    if draw(st.integers(0, 4)) == 0:
        table[draw(st.text(min_size=1, max_size=8))] = draw(toml_scalars)
    return table


settings_text = settings_tables().map(lambda t: toml_document(t).encode())
_shallow_settings = st.one_of(
    settings_text,
    settings_text,
    mutated(settings_text),
    st.binary(max_size=500),
    st.text(max_size=200).map(lambda t: t.encode("utf-8", "surrogatepass")),
)
settings_inputs = st.one_of(
    _shallow_settings,
    st.integers(1, 20_000).map(lambda n: ("a = " + deep(n)).encode()),
    st.integers(1, 5_000).map(lambda n: ("a = " + deep(n, "{b = ", "}")).encode()),
)


def settings_sane(settings: Settings) -> list[str]:
    """Values that would break a running supervisor (they must be warned about, not used)."""
    problems = []
    for name in SETTINGS_KEYS:
        value = getattr(settings, name)
        if isinstance(value, float) and not (math.isfinite(value) and value >= 0):
            problems.append(f"{name}={value}")
    if not math.isfinite(settings.fallback_poll_s) or settings.fallback_poll_s <= 0:
        problems.append(f"fallback_poll_s={settings.fallback_poll_s}")
    for name in ("max_envelope_bytes", "max_queue_depth", "output_lines"):
        if getattr(settings, name) < 1:
            problems.append(f"{name}={getattr(settings, name)}")
    return sorted(set(problems))


def check_settings(data: bytes, *, sane: bool = True) -> str:
    with tempfile.TemporaryDirectory() as tmp:
        project = Path(tmp)
        (project / ".shepherd").mkdir()
        path = project / ".shepherd" / "config.toml"
        path.write_bytes(data)
        settings, warnings = load_settings(project, user_file=project / "absent.toml")
    assert isinstance(settings, Settings)
    assert all(isinstance(w, str) and str(path) in w for w in warnings), warnings
    problems = settings_sane(settings) if sane else []
    assert not problems, f"unusable settings accepted without a warning: {problems}"
    return "warned" if warnings else "clean"


# ---------------------------------------------------------------------- scripts


STEP_VALUES: dict[str, st.SearchStrategy[Any]] = {
    "await": st.one_of(
        st.sampled_from(["task", "message", "reply", "any", "nothing"]), json_values
    ),
    "say": st.one_of(st.text(max_size=20), huge, json_values),
    "run": st.one_of(st.text(max_size=20), json_values),
    "message": st.one_of(
        st.fixed_dictionaries(
            {
                "to": st.one_of(st.sampled_from(["planner", "shepherd"]), ids),
                "text": st.text(max_size=10),
            },
            optional={"expects_reply": json_values, "steer": st.booleans(), "extra": json_values},
        ),
        json_values,
    ),
    "reply": st.one_of(st.fixed_dictionaries({"text": st.text(max_size=10)}), json_values),
    "done": st.one_of(
        st.fixed_dictionaries(
            {"status": st.sampled_from(["completed", "blocked", "failed", "nope"])},
            optional={"summary": json_values, "cancel_requests": json_values},
        ),
        json_values,
    ),
    "sleep": st.one_of(st.floats(), st.integers(), json_values),
    "exit": st.one_of(st.integers(), json_values),
    "bogus": json_values,
}


def _steps(depth: int) -> st.SearchStrategy[list[Any]]:
    kinds = sorted(STEP_VALUES) + (["repeat"] if depth < 3 else [])

    @st.composite
    def step(draw: st.DrawFn) -> Any:
        kind = draw(st.sampled_from(kinds))
        if kind == "repeat":
            return {
                "repeat": {
                    "times": draw(st.one_of(st.integers(-2, 20_000), json_values)),
                    "steps": draw(_steps(depth + 1)),
                }
            }
        if draw(st.integers(0, 19)) == 0:
            return draw(json_values)  # not a step at all
        return {kind: draw(STEP_VALUES[kind])}

    return st.lists(step(), max_size=6)


script_docs = st.one_of(
    st.builds(lambda steps: {"steps": steps}, _steps(0)),
    json_values,
    st.builds(lambda steps, extra: {"steps": steps, "x": extra}, _steps(0), json_values),
)


def _script_text(doc: Any, as_toml: bool) -> str:
    if as_toml:
        return toml_document(doc) if isinstance(doc, dict) else _toml_value(doc)
    return json.dumps(doc, ensure_ascii=False)


_shallow_scripts = st.one_of(
    st.tuples(script_docs, st.booleans()).map(lambda p: (_script_text(p[0], p[1]), p[1])),
    st.tuples(st.text(max_size=300), st.booleans()),
)
script_inputs = st.one_of(
    _shallow_scripts,
    st.tuples(st.integers(1, 50_000).map(deep), st.just(False)),
    st.tuples(st.integers(1, 20_000).map(lambda n: "steps = " + deep(n)), st.just(True)),
    st.tuples(
        st.integers(1, 20_000).map(lambda n: '{"steps": [' + deep(n, '{"x": ', "}") + "]}"),
        st.just(False),
    ),
)


def check_script(item: tuple[str, bool]) -> str:
    text, as_toml = item
    try:
        script = load_script_text(text, toml=as_toml)
    except ScriptError:
        return "script_error"
    assert isinstance(script, Script) and len(script.steps) <= 100_000
    return f"script:{len(script.steps) > 0}"


# ---------------------------------------------------------------------- watchdog replay lines

replay_docs = st.fixed_dictionaries(
    {
        "kind": st.one_of(
            st.sampled_from(["tool_call", "tool_result", "error", "message"]), json_values
        )
    },
    optional={
        "tool": st.one_of(st.sampled_from(["bash", "read", ""]), json_values),
        "command": st.one_of(st.text(max_size=30), huge, json_values),
        "args": json_values,
        "output": st.one_of(st.text(max_size=30), huge, json_values),
        "text": st.one_of(st.text(max_size=30), json_values),
        "exit_code": st.one_of(st.integers(), json_values),
        "source": st.one_of(st.sampled_from(["user", "agent", "robot"]), json_values),
        "ts": st.one_of(st.floats(allow_nan=False), json_values),
        "call_id": st.one_of(st.text(max_size=8), json_values),
        "extra": json_values,
    },
)
_shallow_line = st.one_of(
    replay_docs.map(lambda d: json.dumps(d, ensure_ascii=False)),
    st.text(max_size=200),
    json_values.map(json.dumps),
)
replay_line = st.one_of(
    _shallow_line,
    st.integers(1, 50_000).map(lambda n: '{"kind": "message", "args": ' + deep(n) + "}"),
)
replay_inputs = st.lists(replay_line, min_size=1, max_size=6)


def check_replay(lines: list[str]) -> str:
    for number, line in enumerate(lines, 1):
        try:
            event = decode_replay_line(line, number)
        except ReplayLineError as exc:
            assert exc.line == number
            continue
        assert isinstance(event, ReplayEvent)
    try:
        verdicts = replay(lines)
    except ReplayLineError:
        return "line_error"
    assert verdicts and verdicts[-1].get("final") is True
    return "replayed"


# ---------------------------------------------------------------------- registry


@dataclass(frozen=True)
class Target:
    name: str
    #: every kind of input, deep nesting included (scripts/fuzz.py)
    strategy: st.SearchStrategy[Any]
    #: the same without the deep-nesting generators (their bugs have tests of their own)
    shallow: st.SearchStrategy[Any]
    check: Callable[[Any], str]


TARGETS: dict[str, Target] = {
    "envelope": Target("envelope", envelope_inputs, _shallow_envelopes, check_envelope),
    "settings": Target("settings", settings_inputs, _shallow_settings, check_settings),
    "script": Target("script", script_inputs, _shallow_scripts, check_script),
    "replay": Target(
        "replay", replay_inputs, st.lists(_shallow_line, min_size=1, max_size=6), check_replay
    ),
}
