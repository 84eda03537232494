#!/usr/bin/env python3
"""Fuzz one boundary target for a while: envelope decoding, settings files, script files or
watchdog replay lines (the targets and their contracts: tests/reliability/fuzz_targets.py).

    python scripts/fuzz.py --target envelope --seconds 60
    python scripts/fuzz.py --target all --seconds 120      # the time is split between targets
    python scripts/fuzz.py --target script --seconds 30 --shallow   # no deep-nesting inputs

It drives Hypothesis's ``@given`` in batches, each with its own seed, until the time is up
(no new dependency: atheris would need a build), and prints how many inputs it tried and how
they ended. On the first input that breaks a contract, Hypothesis shrinks it, the runner prints
it with the error and the seed of its batch, and exits 1. ``--seed`` picks the first batch's
seed (replay a failure with the seed it printed).
"""

from __future__ import annotations

import argparse
import sys
import time
import traceback
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from hypothesis import HealthCheck, Phase, given, seed, settings

from tests.reliability.fuzz_targets import TARGETS

BATCH = 50


def fuzz(name: str, seconds: float, *, first_seed: int, shallow: bool) -> tuple[int, Counter[str]]:
    """Run target ``name`` for ``seconds``; return (inputs tried, outcomes). Raises on a bug."""
    target = TARGETS[name]
    strategy = target.shallow if shallow else target.strategy
    outcomes: Counter[str] = Counter()
    tried = 0
    deadline = time.monotonic() + seconds
    batch_seed = first_seed
    while time.monotonic() < deadline:

        @seed(batch_seed)
        @settings(
            max_examples=BATCH,
            deadline=None,
            database=None,
            phases=[Phase.generate, Phase.shrink],
            suppress_health_check=list(HealthCheck),
            print_blob=False,
        )
        @given(strategy)
        def batch(item: Any) -> None:
            nonlocal tried
            tried += 1
            outcomes[target.check(item)] += 1

        try:
            batch()
        except Exception as exc:
            exc.add_note(f"fuzz.py: target {name}, batch seed {batch_seed}")
            raise
        batch_seed += 1
    return tried, outcomes


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--target", choices=[*TARGETS, "all"], required=True)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--seed", type=int, default=0, help="seed of the first batch")
    parser.add_argument("--shallow", action="store_true", help="leave out deep-nesting inputs")
    args = parser.parse_args(argv)
    names = list(TARGETS) if args.target == "all" else [args.target]
    share = args.seconds / len(names)
    status = 0
    for name in names:
        started = time.monotonic()
        try:
            tried, outcomes = fuzz(name, share, first_seed=args.seed, shallow=args.shallow)
        except Exception as exc:
            print(f"{name}: FAILED: {type(exc).__name__}: {str(exc)[:500]}", flush=True)
            traceback.print_exception(exc, limit=-3, file=sys.stdout)
            status = 1
            continue
        took = time.monotonic() - started
        shown = ", ".join(f"{k}={v}" for k, v in sorted(outcomes.items()))
        print(f"{name}: {tried} inputs in {took:.1f} s, no contract broken ({shown})", flush=True)
    return status


if __name__ == "__main__":
    sys.exit(main())
