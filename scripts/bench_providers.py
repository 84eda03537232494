#!/usr/bin/env python3
"""Many agents, one provider: the session's gate against the agents' own retries, same run.

    python scripts/bench_providers.py [--agents 50] [--tasks 4] [--rate 5] [--runs 3] [--trace]

A simulated model provider (an HTTP server in this process) answers at most ``--rate``
requests in any one second; past that it answers 429 with a ``Retry-After`` of the seconds
until a slot frees, rounded up to a tenth (HTTP's own form is whole seconds: coarser). Each
agent is a real command agent of a real session (a supervisor in this process, its file
mailbox, a bridge process per agent); each of its turns is one request to the provider, as
one model call is. Each agent is given ``--tasks`` tasks, the next as soon as its last ended;
a task is one successful request.

- ``gate``: a refused turn reports it (``shepherd-child rate-limited --provider sim
  --retry-after S``) and ends; the session's cool-down for ``sim`` holds every agent of it
  until it ends; from then on ``sim`` is paced (:mod:`protocol.session.pacing`): the refused
  turns are resumed and the queued tasks started a token apart. Nothing retries by itself.
- ``gate+cap``: the same, with ``--max-running-per-provider sim=RATE`` (admission).
- ``own retries``: no gate; the agent's turn retries by itself, honouring Retry-After, three
  times, then says ``done --status failed`` (what an agent with its own retry policy does).

Besides the session's cool-down, the provider counts the requests that came before its own
last Retry-After had passed (any caller's: what a provider that punishes early callers sees).

Reported per mode (medians of ``--runs`` runs, the modes alternating): the whole run's
seconds against the time the limit itself imposes (requests / rate), tasks completed and
failed, requests the provider refused, and requests that reached the provider while the
session's cool-down for it was on (from the ``provider_cooldown`` notice to its end; a turn
already running when it began can still reach it: counted, not hidden). Asserts nothing.
``--trace`` prints each second's pace, queue and what the provider took and refused.
"""

from __future__ import annotations

import argparse
import http.server
import json
import math
import os
import shlex
import statistics
import sys
import threading
import time
from collections import deque
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench_lib.common import temp_dir

GATED = """
import os, subprocess, sys, urllib.error, urllib.request
child = os.path.join(os.path.dirname(sys.executable), "shepherd-child")
try:
    urllib.request.urlopen(urllib.request.Request(os.environ["SIM_URL"], data=b"x"), timeout=60)
except urllib.error.HTTPError as exc:
    if exc.code == 429:
        after = exc.headers.get("Retry-After", "1")
        report = ["rate-limited", "--provider", "sim", "--retry-after", after]
    else:
        report = ["provider-error", "--provider", "sim", "--text", f"HTTP {exc.code}"]
    subprocess.run([child, *report], check=True)
    sys.exit(0)
except OSError as exc:  # the provider could not be reached: a provider error too
    subprocess.run([child, "provider-error", "--provider", "sim", "--text", repr(exc)], check=True)
    sys.exit(0)
subprocess.run([child, "done", "--status", "completed", "--summary", "ok"], check=True)
"""

OWN_RETRIES = """
import os, subprocess, sys, time, urllib.error, urllib.request
child = os.path.join(os.path.dirname(sys.executable), "shepherd-child")
for attempt in range(4):
    try:
        urllib.request.urlopen(urllib.request.Request(os.environ["SIM_URL"], data=b"x"), timeout=60)
        break
    except (urllib.error.HTTPError, OSError) as exc:
        limited = isinstance(exc, urllib.error.HTTPError) and exc.code == 429
        if attempt == 3:
            subprocess.run([child, "done", "--status", "failed", "--summary", repr(exc)])
            sys.exit(0)
        time.sleep(float(exc.headers.get("Retry-After", "1")) if limited else 1.0)
subprocess.run([child, "done", "--status", "completed", "--summary", "ok"], check=True)
"""


class Provider:
    """At most ``rate`` requests answered in any one second; the rest get 429 (Retry-After)."""

    def __init__(self, rate: int) -> None:
        self.rate = rate
        self.lock = threading.Lock()
        self.window: deque[float] = deque()
        self.arrivals: list[tuple[float, bool]] = []  # (time, answered)
        #: until when the provider asked its callers to wait (its last Retry-After)
        self.asked_until = 0.0
        self.early = 0  # requests that came before that

    def take(self) -> float | None:
        """None: answered; else the Retry-After of the refusal."""
        now = time.monotonic()
        with self.lock:
            while self.window and self.window[0] <= now - 1.0:
                self.window.popleft()
            ok = len(self.window) < self.rate
            self.early += now < self.asked_until
            self.arrivals.append((now, ok))
            if ok:
                self.window.append(now)
                return None
            wait = math.ceil((self.window[0] + 1.0 - now) * 10) / 10 or 0.1
            self.asked_until = max(self.asked_until, now + wait)
            return wait

    def serve(self) -> tuple[http.server.ThreadingHTTPServer, str]:
        provider = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length", "0")))
                wait = provider.take()
                if wait is None:
                    self.send_response(200)
                    self.end_headers()
                    self.wfile.write(b"{}")
                else:
                    self.send_response(429)
                    self.send_header("Retry-After", f"{wait:.1f}")
                    self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        class Server(http.server.ThreadingHTTPServer):
            request_queue_size = 1024  # a burst of every agent at once is accepted, not reset
            daemon_threads = True

        server = Server(("127.0.0.1", 0), Handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        return server, f"http://127.0.0.1:{server.server_address[1]}/v1"


class Cooldowns:
    """The session's notices: when each cool-down of ``sim`` began and ended."""

    def __init__(self) -> None:
        self.windows: list[list[float]] = []

    def __call__(self, note: Any) -> None:
        code = getattr(note, "code", None)
        if code == "provider_cooldown":
            self.windows.append([time.monotonic(), float("inf")])
        elif code == "provider_cooldown_ended" and self.windows:
            self.windows[-1][1] = time.monotonic()

    def inside(self, at: float) -> bool:
        return any(start < at < end for start, end in self.windows)


def _sample(session: Any, provider: Provider, threads: list[Any], started: float) -> None:
    """Each second until the agents are done: the pace, the queue, what the provider took."""
    while alive := [t for t in threads if t.is_alive()]:
        alive[0].join(timeout=1.0)  # a second's pace: the sampling's, not a wait for an event
        summary = session.status().summary
        now = time.monotonic()
        took = sum(1 for at, ok in provider.arrivals if ok and at > now - 1.0)
        refused = sum(1 for at, ok in provider.arrivals if not ok and at > now - 1.0)
        print(
            f"{now - started:6.1f}s pace {summary.paced.get('sim', 0):5.2f} queued "
            f"{summary.queued:3d} running {summary.running:3d} took {took} refused {refused}",
            flush=True,
        )


def run(mode: str, agents: int, tasks: int, rate: int, trace: bool = False) -> dict[str, Any]:
    from actors.session.sinks import CollectingSink
    from actors.session.supervisor import Supervisor
    from protocol.records.settings import Settings

    provider = Provider(rate)
    server, url = provider.serve()
    cooldowns = Cooldowns()
    sink = CollectingSink()
    with temp_dir("shepherd-bench-providers-") as root:
        worker = root / "worker.py"
        worker.write_text(OWN_RETRIES if mode == "own retries" else GATED)
        caps = {"sim": rate} if mode == "gate+cap" else {}
        settings = Settings(max_running_per_provider=caps, provider_cooldown_max_s=30.0)
        os.environ["SIM_URL"] = url
        sup = Supervisor(
            root / "session",
            sinks=[sink, cooldowns],
            mailbox_root=root / "mailbox",
            settings=settings,
        )
        try:
            session = sup.session
            cmd = f"{shlex.quote(sys.executable)} {shlex.quote(str(worker))} {{message}}"
            names = [f"w{i:03d}" for i in range(agents)]
            for name in names:
                session.spawn(name, adapter="command", cmd=cmd, provider="sim")
            results: list[Any] = []

            def agent_work(name: str) -> None:  # its next task as soon as its last ended
                for _ in range(tasks):
                    task_id = session.delegate(name, "one model call").task_id
                    results.extend(session.wait([task_id], timeout_s=600).completed)

            threads = [threading.Thread(target=agent_work, args=(n,)) for n in names]
            started = time.monotonic()
            for thread in threads:
                thread.start()
            if trace:
                _sample(session, provider, threads, started)
            for thread in threads:
                thread.join()
            seconds = time.monotonic() - started
        finally:
            sup.shutdown()
            server.shutdown()
    arrivals = provider.arrivals
    return {
        "seconds": seconds,
        "limit_seconds": agents * tasks / rate,
        "completed": sum(1 for r in results if r.status == "completed"),
        "failed": sum(1 for r in results if r.status != "completed"),
        "unfinished": agents * tasks - len(results),
        "refused": sum(1 for _, ok in arrivals if not ok),
        "requests": len(arrivals),
        "during_cooldown": sum(1 for at, _ in arrivals if cooldowns.inside(at)),
        "before_retry_after": provider.early,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--agents", type=int, default=50)
    parser.add_argument("--tasks", type=int, default=4)
    parser.add_argument("--rate", type=int, default=5)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--modes", default="gate,gate+cap,own retries")
    parser.add_argument("--trace", action="store_true", help="each second's pace and queue")
    args = parser.parse_args(argv)
    modes = [m.strip() for m in args.modes.split(",")]
    got: dict[str, list[dict[str, Any]]] = {m: [] for m in modes}
    for _ in range(args.runs):
        for mode in modes:  # alternating: the machine's load spreads over every mode
            got[mode].append(run(mode, args.agents, args.tasks, args.rate, args.trace))
    table = {}
    for mode, runs in got.items():
        row = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
        row["ratio"] = row["seconds"] / row["limit_seconds"]
        table[mode] = row
        print(
            f"{mode:>12}: {row['seconds']:.1f} s for {row['limit_seconds']:.0f} s of limit "
            f"({row['ratio']:.2f}x); completed {row['completed']:.0f}, failed "
            f"{row['failed']:.0f}, unfinished {row['unfinished']:.0f}; requests "
            f"{row['requests']:.0f}, refused "
            f"{row['refused']:.0f}, during the session's cool-down "
            f"{row['during_cooldown']:.0f}, before the provider's Retry-After "
            f"{row['before_retry_after']:.0f}"
        )
    print(json.dumps({"providers": table, "runs": args.runs}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
