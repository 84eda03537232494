"""Many agents, one provider, from the command line: real command agents of a real ``shepherd
serve`` report their provider's refusal with ``shepherd-child rate-limited``; the provider's
cool-down holds its other agent until it ends (told once each way), the provider is paced from
then on (a task delegated meanwhile waits queued for its token), then every task completes;
repeated provider errors end the task ``provider_error``; and every new ``serve`` flag refuses
hostile values with a typed error before anything starts."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from tests.processes.conftest import cli

from .test_task_lifecycle import _notices

pytestmark = pytest.mark.processes

#: the first run of a turn is refused by the provider; the run again after resume succeeds
REFUSED_ONCE = textwrap.dedent(
    """
    import os, subprocess, sys, time
    child = os.path.join(os.path.dirname(sys.executable), "shepherd-child")
    mark = os.path.join(os.getcwd(), "refused-" + os.environ["SHEPHERD_AGENT_NAME"])
    with open(os.path.join(os.getcwd(), "runs-" + os.environ["SHEPHERD_AGENT_NAME"]), "a") as f:
        f.write(f"{time.time()}\\n")
    if os.environ.get("REFUSE") == "always":
        subprocess.run([child, "provider-error", "--provider", "sim", "--text", "500 boom"],
                       check=True)
        sys.exit(0)
    if os.environ.get("REFUSE") == "once" and not os.path.exists(mark):
        open(mark, "w").close()
        subprocess.run([child, "rate-limited", "--provider", "sim", "--retry-after", "1.5"],
                       check=True)
        sys.exit(0)
    subprocess.run([child, "done", "--status", "completed", "--summary", "ok"], check=True)
    """
)


def _agent(tmp_path: Path, session: Path, name: str, refuse: str) -> None:
    script = tmp_path / "agent.py"
    script.write_text(REFUSED_ONCE)
    cmd = (
        f"env REFUSE={refuse} {shlex.quote(sys.executable)} {shlex.quote(str(script))} {{message}}"
    )
    cli("spawn", name, "--adapter", "command", "--cmd", cmd, "--provider", "sim",
        "--cwd", str(tmp_path), session=session)  # fmt: skip


def test_a_rate_limit_holds_the_providers_agents_and_every_task_completes(
    serve: Any, tmp_path: Path
) -> None:
    server = serve()
    session = tmp_path / "session"
    _agent(tmp_path, session, "first", "once")
    _agent(tmp_path, session, "second", "never")
    one = cli("delegate", "first", "call the model", session=session)[1]["task_id"]
    assert server.wait_for(lambda _: _notices(server, "provider_cooldown"), timeout=60)
    summary = cli("status", session=session)[1]["summary"]
    assert "sim" in summary["cooldowns"]
    _, delegated = cli("delegate", "second", "call the model too", session=session)
    two = delegated["task_id"]
    assert delegated["queued"]  # the provider is paced now: no token during its cool-down
    _, waited = cli("wait", one, two, "--timeout", "50", session=session)
    assert sorted(r["status"] for r in waited["completed"]) == ["completed", "completed"]
    assert "sim" in cli("status", session=session)[1]["summary"]["paced"]
    (ended,) = _notices(server, "provider_cooldown_ended")
    assert len(_notices(server, "provider_cooldown")) == 1
    # the first agent's turn ran twice (refused, then again); the second's once, after the end
    assert len((tmp_path / "runs-first").read_text().split()) == 2
    (second_at,) = [float(x) for x in (tmp_path / "runs-second").read_text().split()]
    assert second_at >= ended["created_at"] - 0.05


def test_provider_errors_are_retried_then_end_the_task(serve: Any, tmp_path: Path) -> None:
    config = Path(os.environ["XDG_CONFIG_HOME"]) / "shepherd" / "config.toml"
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text("provider_retries = 2\nprovider_backoff_s = 0.2\n")
    serve()
    session = tmp_path / "session"
    _agent(tmp_path, session, "flaky", "always")
    task_id = cli("delegate", "flaky", "call the model", session=session)[1]["task_id"]
    code, waited = cli("wait", task_id, "--timeout", "50", session=session, check=False)
    assert code == 0, (
        waited,
        (tmp_path / "runs-flaky").read_text(),
        cli("read", "flaky", session=session)[1]["lines"][-20:],
    )
    (result,) = waited["completed"]
    assert (result["status"], result["reason"]) == ("failed", "provider_error")
    assert "500 boom" in result["error"] and "retried 2 times" in result["error"]
    assert len((tmp_path / "runs-flaky").read_text().split()) == 3  # the first and two retries


@pytest.mark.parametrize(
    "flags",
    [
        ["--max-running", "0"],
        ["--max-running", "-1"],
        ["--max-running", "many"],
        ["--max-running", "10000001"],
        ["--max-running-per-provider", "sim"],
        ["--max-running-per-provider", "sim=0"],
        ["--max-running-per-provider", "sim=x"],
        ["--max-running-per-provider", "a b=2"],
        ["--max-running-per-provider", f"{'p' * 70}=1"],
    ],
)
def test_hostile_serve_flags_are_refused_before_anything_starts(
    tmp_path: Path, flags: list[str]
) -> None:
    session = tmp_path / "session"
    argv = [sys.executable, "-m", "actors.surfaces.entry", "serve", "--session-dir", str(session)]
    done = subprocess.run(
        [*argv, *flags, "--json"], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 2, (done.stdout, done.stderr)
    error = json.loads(done.stdout or done.stderr)["error"]
    assert error["code"] == "invalid_argument" and "max_running" in error["message"].replace(
        "-", "_"
    ), error
    assert not (session / "journal.jsonl").exists()
