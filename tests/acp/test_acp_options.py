"""The acp adapter's spawn options, checked in the one place spawn options are checked
(:func:`~actors.child.adapters.check_spawn_options`), before anything starts."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from actors.child.acp_options import MAX_ACP_CMD_CHARS, MAX_ACP_CMD_WORDS, AcpOptions
from actors.child.adapters import check_spawn_options
from protocol.calls.api import SpawnArgs
from protocol.core.errors import InvalidArgument

pytestmark = [pytest.mark.timeout(30)]


@pytest.mark.parametrize(
    ("options", "words"),
    [
        ({}, '"acp_cmd"'),
        ({"acp_cmd": ""}, "non-empty"),
        ({"acp_cmd": "   "}, "non-empty"),
        ({"acp_cmd": 7}, "non-empty"),
        ({"acp_cmd": "x" * (MAX_ACP_CMD_CHARS + 1)}, "longer than"),
        ({"acp_cmd": "true " + "a " * MAX_ACP_CMD_WORDS}, "more than"),
        ({"acp_cmd": "true 'unclosed"}, "not a valid command line"),
        ({"acp_cmd": "no-such-acp-agent-here"}, "not on PATH"),
        ({"acp_cmd": "./missing-agent"}, "not an executable file"),
        ({"acp_cmd": "true", "startup_timeout_s": 0}, "startup_timeout_s"),
        ({"acp_cmd": "true", "startup_timeout_s": 601}, "startup_timeout_s"),
        ({"acp_cmd": "true", "startup_timeout_s": True}, "startup_timeout_s"),
        ({"acp_cmd": "true", "cwd": "nowhere"}, "not an existing directory"),
    ],
)
def test_a_bad_option_is_invalid_argument_naming_it(
    tmp_path: Path, options: dict[str, object], words: str
) -> None:
    with pytest.raises(InvalidArgument, match=words):
        check_spawn_options("acp", options, str(tmp_path))


def test_a_good_command_line_is_split_into_words_and_resolved(tmp_path: Path) -> None:
    opts = AcpOptions(str(tmp_path), {"acp_cmd": f"{sys.executable} -m 'some agent'"})
    assert opts.argv == [sys.executable, "-m", "some agent"]
    assert opts.startup_timeout_s == 60.0
    check_spawn_options("acp", {"acp_cmd": "true --acp"}, str(tmp_path))


def test_spawn_takes_the_acp_adapter_and_its_command_line() -> None:
    import msgspec

    args = msgspec.convert(
        {"name": "coder", "adapter": "acp", "acp_cmd": "npx @zed-industries/codex-acp"},
        SpawnArgs,
    )
    assert (args.adapter, args.acp_cmd) == ("acp", "npx @zed-industries/codex-acp")


def test_without_the_acp_extra_a_spawn_is_invalid_argument_naming_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import importlib

    real = importlib.import_module

    def without_acp(name: str, package: str | None = None) -> object:
        if name == "actors.child.acp":
            raise ModuleNotFoundError("No module named 'acp'", name="acp")
        return real(name, package)

    monkeypatch.setattr("actors.child.adapters.importlib.import_module", without_acp)
    with pytest.raises(InvalidArgument, match=r"needs the 'acp' extra .*acp is not installed"):
        check_spawn_options("acp", {"acp_cmd": "true"}, str(tmp_path))
