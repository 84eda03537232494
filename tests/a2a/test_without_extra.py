"""``shepherd a2a`` without the a2a extra installed: a typed error saying how to install it."""

from __future__ import annotations

import json
import sys

import pytest

from actors.surfaces import cli


def test_a_missing_sdk_is_a_typed_error_naming_the_extra(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # as if a2a-sdk were not installed: importing it fails
    monkeypatch.setitem(sys.modules, "a2a", None)
    monkeypatch.delitem(sys.modules, "actors.surfaces.a2a_server", raising=False)
    assert cli.main(["a2a", "--json"]) == 2
    error = json.loads(capsys.readouterr().out)["error"]
    assert error["code"] == "invalid_argument"
    assert "pip install 'shepherd[a2a]'" in error["message"]
