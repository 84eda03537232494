#!/usr/bin/env python3
"""What per-process NATS credentials (``serve --nats-auth``) cost, beside the same work without
them, in the same run.

    python scripts/bench_nats_auth.py [--runs N] [--samples N]

- **mint**: one child's credentials as the launcher makes them at a spawn (a user key, its JWT
  signed by the account, the ``.creds`` text) and written 0600 (``Authority.child_credentials``
  + ``write_private``); baseline: writing the same bytes 0600 alone.
- **connect**: a NATS connection opened and closed, as a child's bridge or command does: with
  the child's ``.creds`` to a server started with the authority (the server checks the JWT's
  signature and the client signs the server's nonce), and without credentials to a server
  without one (today's default). Both servers run side by side; samples alternate.

Prints, per subject, the median over the runs of each run's median (ms); asserts nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def _ms(samples: list[float]) -> float:
    return statistics.median(samples) * 1000


def one_run(samples: int, tmp: Path) -> dict[str, float]:
    from actors.transports.nats.auth import Authority, make_authority, write_private
    from actors.transports.nats.server import start_server

    auth_dir = tmp / "auth"
    make_authority(auth_dir)
    authority = Authority.load(str(auth_dir))
    session = "shepherd-session-0000000000000000"
    mint: list[float] = []
    write_only: list[float] = []
    creds = ""
    for index in range(samples):
        agent = f"shepherd-agent-{index:016x}"
        started = time.perf_counter()
        creds = authority.child_credentials(session, agent, "parent")
        write_private(tmp / f"{agent}.creds", creds)
        mint.append(time.perf_counter() - started)
        started = time.perf_counter()
        write_private(tmp / f"{agent}.plain", creds)
        write_only.append(time.perf_counter() - started)

    agent = "shepherd-agent-0000000000000000"
    child_creds = tmp / "child.creds"
    write_private(child_creds, authority.child_credentials(session, agent, "parent"))
    secured = start_server(tmp / "secured", auth=auth_dir)
    plain = start_server(tmp / "plain", name="n2")
    try:

        async def measure() -> tuple[list[float], list[float]]:
            import nats

            async def once(connect: Callable[[], Awaitable[object]]) -> float:
                started = time.perf_counter()
                nc = await connect()
                await nc.close()  # type: ignore[attr-defined]
                return time.perf_counter() - started

            with_creds: list[float] = []
            without: list[float] = []
            for _ in range(samples):
                with_creds.append(
                    await once(
                        lambda: nats.connect(
                            secured.url,
                            user_credentials=str(child_creds),
                            inbox_prefix=f"_INBOX_{agent}",
                        )
                    )
                )
                without.append(await once(lambda: nats.connect(plain.url)))
            return with_creds, without

        with_creds, without = asyncio.run(measure())
    finally:
        secured.kill()
        plain.kill()
    return {
        "mint_and_write_ms": _ms(mint),
        "write_only_ms (baseline)": _ms(write_only),
        "connect_with_creds_ms": _ms(with_creds),
        "connect_without_ms (baseline)": _ms(without),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--samples", type=int, default=50)
    args = parser.parse_args()
    runs: list[dict[str, float]] = []
    for _ in range(args.runs):
        with tempfile.TemporaryDirectory(prefix="shepherd-bench-auth-") as tmp:
            runs.append(one_run(args.samples, Path(tmp)))
    for key in runs[0]:
        values = [run[key] for run in runs]
        each = ", ".join(f"{value:.3f}" for value in values)
        print(f"{key:32} {statistics.median(values):8.3f}   runs: {each}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
