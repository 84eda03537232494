#!/usr/bin/env python3
"""What TLS to the NATS servers (``--transport tls://... --nats-ca``) costs, beside the same work
in clear text, in the same run.

    python scripts/bench_nats_tls.py [--runs N] [--samples N]

Two servers run side by side, each with Shepherd's settings (``sync_interval: always``): one
whose only listener is TLS (a CA and a certificate for 127.0.0.1 minted for the run), one in
clear text. Samples alternate between them.

- **connect**: a connection opened and closed as every Shepherd process opens it
  (:func:`actors.transports.nats.setup.connect`: the verified context, the scheme held to).
- **publish→ack**: one JetStream publish of a 256-byte message to a file stream, until the
  server's acknowledgement (written and synced on the server); p50 and p99.

Prints, per figure, the median over the runs of each run's figure (ms); asserts nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

_PAYLOAD = b"x" * 256


def _quantile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000


def one_run(samples: int, tmp: Path) -> dict[str, float]:
    from actors.testing.certs import mint_ca, mint_leaf
    from actors.transports.nats.server import ServerTls, start_server
    from actors.transports.nats.setup import connect
    from protocol.core.transport_url import TlsFiles

    ca = mint_ca(tmp / "pki")
    leaf = mint_leaf(ca, tmp / "pki")
    secure = start_server(tmp / "tls", tls=ServerTls(leaf.cert, leaf.key, ca.cert))
    plain = start_server(tmp / "plain", name="n2")
    ends = {"tls": (secure.url, TlsFiles(ca=str(ca.cert))), "plain": (plain.url, None)}
    try:

        async def measure() -> dict[str, float]:
            from nats.js.api import StorageType, StreamConfig

            opened: dict[str, list[float]] = {name: [] for name in ends}
            acked: dict[str, list[float]] = {name: [] for name in ends}
            for _ in range(samples):
                for name, (url, bundle) in ends.items():
                    started = time.perf_counter()
                    nc, _ = await connect([url], None, None, "bench", 5.0, None, bundle)
                    await nc.close()
                    opened[name].append(time.perf_counter() - started)
            held = {}
            for name, (url, bundle) in ends.items():
                nc, js = await connect([url], None, None, "bench", 5.0, None, bundle)
                await js.add_stream(
                    StreamConfig(name="bench", subjects=["bench.>"], storage=StorageType.FILE)
                )
                held[name] = (nc, js)
            for index in range(samples):
                for name, (_, js) in held.items():
                    started = time.perf_counter()
                    await js.publish(f"bench.{index}", _PAYLOAD)
                    acked[name].append(time.perf_counter() - started)
            for nc, _ in held.values():
                await nc.close()
            figures: dict[str, float] = {}
            for name in ends:
                suffix = "" if name == "tls" else " (baseline)"
                figures[f"connect_{name}_p50_ms{suffix}"] = _quantile(opened[name], 0.5)
                figures[f"publish_ack_{name}_p50_ms{suffix}"] = _quantile(acked[name], 0.5)
                figures[f"publish_ack_{name}_p99_ms{suffix}"] = _quantile(acked[name], 0.99)
            return figures

        return asyncio.run(measure())
    finally:
        secure.kill()
        plain.kill()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--samples", type=int, default=200)
    args = parser.parse_args()
    runs: list[dict[str, float]] = []
    for _ in range(args.runs):
        with tempfile.TemporaryDirectory(prefix="shepherd-bench-tls-") as tmp:
            runs.append(one_run(args.samples, Path(tmp)))
    for key in sorted(runs[0]):
        values = [run[key] for run in runs]
        each = ", ".join(f"{value:.3f}" for value in values)
        print(f"{key:36} {statistics.median(values):8.3f}   runs: {each}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
