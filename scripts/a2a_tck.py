#!/usr/bin/env python3
"""The A2A conformance kit (a2aproject/a2a-tck) against ``shepherd a2a``.

    python scripts/a2a_tck.py TCK_DIR [--category mandatory] [--out FILE]

TCK_DIR is a checkout of the kit (it is not a package on an index: fetch it yourself; the
test suite does not run it). The script makes the kit its own virtualenv
(``TCK_DIR/.venv``, the kit's own dependencies) on first use, starts a session
(``shepherd serve``) with one scripted agent that completes every task, and ``shepherd a2a``
in front of it, then runs ``run_tck.py --category CATEGORY --transports jsonrpc`` and prints
the kit's counts (passed, failed, skipped, errors), with the failures' names; the kit's whole
output goes to FILE (default ``a2a-tck-output.txt``). Everything it started is stopped at the
end.

Two things are added to every request the kit makes, through a ``sitecustomize`` module on
the kit's ``PYTHONPATH`` (the kit's own code is not changed):

- ``Authorization: Bearer TOKEN``: the front door wants the token on every request, the Agent
  Card's included; the kit sends its ``A2A_AUTH_*`` credentials on its JSON-RPC calls but not
  when it fetches the card. (So the kit's checks that a request *without* credentials is
  refused cannot pass here: every request carries them. The project's own tests check the
  refusal: ``tests/a2a/test_a2a.py``.)
- ``A2A-Version: 1.0``: the kit names no version, which A2A v1.0 reads as 0.3, and the
  front door (the a2a-sdk's v1.0 dispatcher) refuses 0.3.

Exit status: the kit's.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SITECUSTOMIZE = """
import os

_TOKEN = os.environ.get("SHEPHERD_TCK_BEARER", "")
_HEADERS = {"Authorization": f"Bearer {_TOKEN}", "A2A-Version": "1.0"}
if _TOKEN:
    import requests

    _session_init = requests.Session.__init__

    def _init(self, *args, **kwargs):
        _session_init(self, *args, **kwargs)
        self.headers.update(_HEADERS)

    requests.Session.__init__ = _init
    try:
        import httpx
    except ImportError:
        httpx = None
    if httpx is not None:
        for _cls in (httpx.Client, httpx.AsyncClient):
            def _client_init(self, *args, _original=_cls.__init__, **kwargs):
                headers = dict(kwargs.pop("headers", None) or {})
                for key, value in _HEADERS.items():
                    headers.setdefault(key, value)
                _original(self, *args, headers=headers, **kwargs)

            _cls.__init__ = _client_init
"""

WORKER = {
    "steps": [
        {
            "repeat": {
                "times": 10000,
                "steps": [
                    {"await": "task"},
                    {"done": {"status": "completed", "summary": "done: {last}"}},
                ],
            }
        }
    ]
}


def _kit_python(tck: Path) -> Path:
    python = tck / ".venv" / "bin" / "python"
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(tck / ".venv")], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "-q", "-e", str(tck)], check=True)
    return python


def _wait_line(proc: subprocess.Popen[str], pattern: str, timeout: float) -> str:
    deadline = time.monotonic() + timeout
    assert proc.stdout is not None
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        if re.search(pattern, line):
            return line
    raise SystemExit(f"a2a_tck: no line matching {pattern!r} within {timeout:g} s")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("tck", type=Path, help="a checkout of a2aproject/a2a-tck")
    parser.add_argument("--category", default="mandatory")
    parser.add_argument("--out", type=Path, default=Path("a2a-tck-output.txt"))
    args = parser.parse_args()
    if not (args.tck / "run_tck.py").is_file():
        parser.error(f"{args.tck} holds no run_tck.py: not a checkout of the kit")
    python = _kit_python(args.tck)
    shepherd = shutil.which("shepherd") or parser.error("shepherd is not on PATH")
    work = Path(tempfile.mkdtemp(prefix="a2a-tck-"))
    env = {**os.environ, "XDG_STATE_HOME": str(work / "state")}
    env.pop("SHEPHERD_SESSION", None)
    session = work / "session"
    started: list[subprocess.Popen[str]] = []
    try:
        serve = subprocess.Popen(
            [shepherd, "serve", "--session-dir", str(session)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        started.append(serve)
        _wait_line(serve, "session", 60)
        script = work / "worker.json"
        script.write_text(json.dumps(WORKER))
        subprocess.run(
            [shepherd, "spawn", "worker", "--script", str(script), "--session", str(session)],
            env=env,
            check=True,
            capture_output=True,
        )
        door = subprocess.Popen(
            [shepherd, "a2a", "--session", str(session), "--json"],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        started.append(door)
        info = json.loads(_wait_line(door, r'"a2a"', 60))["a2a"]
        kit_env = {
            **env,
            "SHEPHERD_TCK_BEARER": info["token"],
            "A2A_AUTH_TYPE": "bearer",
            "A2A_AUTH_TOKEN": info["token"],
            "PYTHONPATH": str(work),
        }
        (work / "sitecustomize.py").write_text(SITECUSTOMIZE)
        kit = [str(python), "run_tck.py", "--sut-url", info["url"], "--category", args.category]
        run = subprocess.run(
            [*kit, "--transports", "jsonrpc", "--verbose"],
            check=False,
            cwd=args.tck,
            env=kit_env,
            capture_output=True,
            text=True,
            timeout=1800,
        )
        output = run.stdout + run.stderr
        args.out.write_text(output)
        summary = [x for x in output.splitlines() if re.match(r"^=+ .*(passed|failed).* in ", x)]
        print(summary[-1] if summary else "a2a_tck: the kit printed no summary")
        for line in output.splitlines():
            verdict = re.search(r" (FAILED|ERROR)( \[|$)", line)
            if verdict and "::" in line:
                print(f"  {verdict.group(1)} {line.split(' ')[0]}")
        print(f"the kit's whole output: {args.out}")
        return run.returncode
    finally:
        for proc in reversed(started):
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    proc.kill()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
