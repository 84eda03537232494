"""The real-client proof: the real codex-acp (npm ``@zed-industries/codex-acp``, installed by
``scripts/install_acp.sh``) as an ``acp`` child, offline against a scripted model server that
speaks its provider's API (OpenAI Responses)."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from protocol.calls.approvals import APPROVED
from protocol.wire.envelopes import (
    ControlEnvelope,
    MessageEnvelope,
    RuntimeEnvelope,
    TaskDoneEnvelope,
)
from tests.acp.responses_model import ResponsesModel
from tests.acp.test_acp_bridge import decide
from tests.child.conftest import FakeParent

pytestmark = [pytest.mark.timeout(180)]

INSTALL_ACP = Path(__file__).resolve().parents[2] / "scripts" / "install_acp.sh"


@pytest.fixture(scope="session")
def codex_acp() -> Path:
    """The real codex-acp binary, installed by the project's own script on first use."""
    if shutil.which("node") is None or shutil.which("npm") is None:
        pytest.fail("node and npm are required for codex-acp (scripts/install_acp.sh)")
    result = subprocess.run(
        ["bash", str(INSTALL_ACP)], capture_output=True, text=True, timeout=600, check=False
    )
    if result.returncode != 0 or not result.stdout.strip():
        pytest.fail(f"scripts/install_acp.sh failed ({result.returncode}):\n{result.stderr}")
    path = Path(result.stdout.strip().splitlines()[-1])
    assert os.access(path, os.X_OK), path
    return path


@pytest.fixture
def model() -> Iterator[ResponsesModel]:
    server = ResponsesModel()
    try:
        yield server
    finally:
        server.close()


def start_codex(
    parent: FakeParent, codex_acp: Path, model: ResponsesModel, **options: object
) -> None:
    home = parent.tmp_path / "codex-home"
    home.mkdir()
    (home / "config.toml").write_text(
        'model = "scripted"\nmodel_provider = "scripted"\n\n'
        "[model_providers.scripted]\n"
        'name = "scripted"\n'
        f'base_url = "{model.base_url}"\n'
        'wire_api = "responses"\n'
        'env_key = "SCRIPTED_MODEL_KEY"\n'
    )
    work = parent.tmp_path / "work"
    work.mkdir()
    parent.start_bridge(
        "acp",
        {"acp_cmd": str(codex_acp), "cwd": str(work), **options},
        CODEX_HOME=str(home),
        HOME=str(home),
        SCRIPTED_MODEL_KEY="offline",
        OPENAI_API_KEY=None,
        CODEX_API_KEY=None,
    )
    parent.wait_event("output", text=lambda t: t is not None and "acp agent ready: codex-acp" in t)


def test_the_real_codex_acp_runs_a_task_turn_offline_and_its_end_settles_nothing(
    parent: FakeParent, codex_acp: Path, model: ResponsesModel
) -> None:
    model.add_text("I looked; the answer is 42.")
    start_codex(parent, codex_acp, model)
    parent.delegate("What is the answer?")
    _, end = parent.wait_event("turn_end")
    assert end.text == "end_turn"
    said = [e.text or "" for e in parent.snapshot() if isinstance(e, RuntimeEnvelope)]
    assert any("the answer is 42" in text for text in said)
    # the model got the task's text, and the shepherd tools reached codex as MCP tools
    assert model.requests, "codex never called the scripted model"
    body = str(model.requests[0])
    assert "What is the answer?" in body
    assert "shepherd_done" in body
    # ending the turn is not finishing the task
    assert not any(isinstance(e, TaskDoneEnvelope) for e in parent.snapshot())


def test_the_real_codex_acp_finishes_a_task_with_the_shepherd_done_mcp_tool(
    parent: FakeParent, codex_acp: Path, model: ResponsesModel
) -> None:
    model.add_call(
        "shepherd_done", {"status": "completed", "summary": "found 42"}, namespace="mcp__shepherd"
    )
    model.add_text("Done.")
    start_codex(parent, codex_acp, model)
    parent.delegate("Find the answer, then finish.")
    _, call = parent.wait_event("tool_call")
    assert "found 42" in (call.command or "")
    # codex asks permission for the MCP tool call: a Shepherd approval, approved here
    _, request = parent.wait_for(lambda e: isinstance(e, MessageEnvelope) and e.approval)
    assert isinstance(request, MessageEnvelope) and "shepherd_done" in request.content
    decide(parent, request, APPROVED)
    _, done = parent.wait_for(lambda e: isinstance(e, TaskDoneEnvelope))
    assert isinstance(done, TaskDoneEnvelope)
    assert (done.status, done.summary) == ("completed", "found 42")


def test_the_real_codex_acp_reports_context_occupancy_not_spend_so_budgets_count_none(
    parent: FakeParent, codex_acp: Path, model: ResponsesModel
) -> None:
    """codex-acp 0.16 answers a prompt without ``usage`` and reports only ``usage_update``
    with the context's occupancy (``used`` 120 of ``size``) and no cost for a model it has no
    price for: that is not spending, so no ``usage`` event reaches the budgets. If a later
    codex-acp reports a prompt's usage or a cost, this fails: count it then."""
    model.add_text("Counted.")
    start_codex(parent, codex_acp, model)
    parent.delegate("Count the tokens.")
    parent.wait_event("turn_end")
    said = [e.text or "" for e in parent.snapshot() if isinstance(e, RuntimeEnvelope)]
    assert any("Counted." in text for text in said)
    used = [e for e in parent.snapshot() if isinstance(e, RuntimeEnvelope) and e.event == "usage"]
    assert used == []


def test_an_abort_cancels_the_real_codex_acps_turn_in_flight(
    parent: FakeParent, codex_acp: Path, model: ResponsesModel
) -> None:
    model.add_hold()
    model.add_text("Too late.")
    start_codex(parent, codex_acp, model)
    parent.delegate("Think for a long time.")
    assert model.holding.wait(60), "codex never asked the model"
    parent.send(ControlEnvelope(**parent.base(), action="abort", reason="enough"))
    _, end = parent.wait_event("turn_end")
    model.release()
    assert end.text == "cancelled"
    said = [e.text or "" for e in parent.snapshot() if isinstance(e, RuntimeEnvelope)]
    assert not any("Too late." in text for text in said)


def test_approve_rules_let_the_real_codex_acps_unmatched_requests_through(
    parent: FakeParent, codex_acp: Path, model: ResponsesModel
) -> None:
    model.add_call(
        "shepherd_done", {"status": "completed", "summary": "found 42"}, namespace="mcp__shepherd"
    )
    model.add_text("Done.")
    start_codex(parent, codex_acp, model, approve=["execute:git push*"])
    parent.delegate("Find the answer, then finish.")
    _, done = parent.wait_for(lambda e: isinstance(e, TaskDoneEnvelope))
    assert isinstance(done, TaskDoneEnvelope) and done.summary == "found 42"
    # codex asked permission for the MCP tool call; no rule matched it: allowed, not asked
    assert not any(isinstance(e, MessageEnvelope) and e.approval for e in parent.snapshot())
    parent.wait_event("output", text=lambda t: t is not None and "no --approve rule" in t)
