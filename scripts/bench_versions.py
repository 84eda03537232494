#!/usr/bin/env python3
"""Old code beside new in one run: ``scripts/bench.py`` on a base commit and on this tree, taking
turns, and each figure's medians side by side.

    python scripts/bench_versions.py BASE [--runs N] [--only NAMES] [--quick] [--out FILE]

``BASE`` is any commit this repository knows (``main``, ``HEAD~3``, a hash). Its tree is
exported to a temporary folder (``git archive``: nothing of this checkout changes) and each
turn runs ``bench.py --runs 1`` once on each tree, in alternating order (base first in odd
turns, this tree first in even ones), with that tree's packages first on ``PYTHONPATH``: a
busy spell of the machine then falls on both. Every figure's per-turn medians are kept; the
table shows, per figure, the median over the turns of each side and new/old (a time: below 1
is faster; a rate: above 1 is better, as each figure's unit says). Written to JSON (default
``bench-versions.json``). Nothing here asserts on a timing; the exit status is 1 only if a
turn failed.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_ONLY = "settle,create,notify"


def export(base: str, into: Path) -> str:
    """``base``'s tree into ``into``; its full commit id."""
    commit = subprocess.run(
        ["git", "rev-parse", "--verify", f"{base}^{{commit}}"],
        cwd=ROOT,
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    archive = subprocess.Popen(["git", "archive", commit], cwd=ROOT, stdout=subprocess.PIPE)
    subprocess.run(["tar", "-x", "-C", str(into)], stdin=archive.stdout, check=True)
    if archive.wait() != 0:
        raise SystemExit(f"bench_versions: git archive {commit} failed")
    return commit


def turn(tree: Path, only: str, quick: bool, out: Path) -> dict[str, Any]:
    """One ``bench.py --runs 1`` on ``tree``: its figures' Shepherd medians, by key."""
    env = dict(os.environ)
    env["PYTHONPATH"] = str(tree) + (os.pathsep + env["PYTHONPATH"] if "PYTHONPATH" in env else "")
    cmd = [sys.executable, str(tree / "scripts" / "bench.py"), "--runs", "1", "--only", only]
    cmd += ["--out", str(out)] + (["--quick"] if quick else [])
    done = subprocess.run(cmd, check=False, cwd=tree, env=env, capture_output=True, text=True)
    if not out.exists():
        raise RuntimeError(f"bench.py on {tree} wrote nothing: {done.stderr.strip()[-1500:]}")
    document = json.loads(out.read_text())
    figures: dict[str, Any] = {}
    for key, figure in document["figures"].items():
        mine = figure.get("subjects", {}).get("shepherd", {})
        if "median" in mine:
            figures[key] = {"median": mine["median"], "unit": figure.get("unit", "")}
    return {"figures": figures, "errors": document.get("errors", []), "rc": done.returncode}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("base", help="the commit to compare against (main, HEAD~3, a hash)")
    parser.add_argument("--runs", type=int, default=5, help="turns on each side (default 5)")
    parser.add_argument(
        "--only", default=DEFAULT_ONLY, help=f"bench.py --only (default {DEFAULT_ONLY})"
    )
    parser.add_argument("--quick", action="store_true", help="bench.py's smaller sizes")
    parser.add_argument("--out", default="bench-versions.json", help="JSON output file")
    args = parser.parse_args(argv)
    if not 1 <= args.runs <= 50:
        parser.error("--runs must be from 1 to 50")
    per: dict[str, dict[str, list[float]]] = {"old": {}, "new": {}}
    units: dict[str, str] = {}
    failures: list[str] = []
    with tempfile.TemporaryDirectory(prefix="bench-base-") as tmp:
        base_tree = Path(tmp) / "tree"
        base_tree.mkdir()
        commit = export(args.base, base_tree)
        sides = [("old", base_tree), ("new", ROOT)]
        for i in range(args.runs):
            for side, tree in sides if i % 2 == 0 else sides[::-1]:
                print(f"[bench_versions] turn {i + 1}/{args.runs}: {side}", file=sys.stderr)
                try:
                    got = turn(tree, args.only, args.quick, Path(tmp) / f"{side}-{i}.json")
                except RuntimeError as exc:
                    failures.append(f"{side} turn {i + 1}: {exc}")
                    continue
                failures += [f"{side} turn {i + 1}: {e}" for e in got["errors"]]
                for key, figure in got["figures"].items():
                    per[side].setdefault(key, []).append(figure["median"])
                    units[key] = figure["unit"]
    rows: list[dict[str, Any]] = []
    for key in sorted(set(per["old"]) | set(per["new"])):
        old, new = per["old"].get(key, []), per["new"].get(key, [])
        mo = statistics.median(old) if old else None
        mn = statistics.median(new) if new else None
        ratio = mn / mo if mo and mn is not None else None
        rows.append(
            {
                "figure": key,
                "unit": units.get(key, ""),
                "old": mo,
                "new": mn,
                "new_over_old": ratio,
                "old_turns": old,
                "new_turns": new,
            }
        )
    document = {
        "base": args.base,
        "base_commit": commit,
        "runs": args.runs,
        "only": args.only,
        "quick": args.quick,
        "load_at_end": os.getloadavg(),
        "rows": rows,
        "failures": failures,
    }
    Path(args.out).write_text(json.dumps(document, indent=2) + "\n")
    print(f"{'figure':<40} {'unit':<8} {'old':>10} {'new':>10} {'new/old':>8}")

    def num(v: Any) -> str:
        return "-" if v is None else f"{v:.4g}"

    for r in rows:
        print(
            f"{r['figure']:<40} {r['unit']:<8} {num(r['old']):>10} {num(r['new']):>10} "
            f"{num(r['new_over_old']):>8}"
        )
    for failure in failures:
        print(f"failed: {failure}", file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
