"""``python -m bench_lib.worker JOB PARAMS``: run one benchmark job in a fresh process.

A fresh process per job keeps each figure clean: no threads, heap or page cache state left by
another benchmark, and process-wide measurements (RSS, thread count, ``getrusage``) see only
the job. The result is printed as one marked JSON line (:func:`bench_lib.common.emit_result`).
"""

from __future__ import annotations

import importlib
import json
import sys

from bench_lib.common import emit_result

#: job name -> (module of bench_lib, function); only the job's own module is imported
JOBS = {
    "latency": ("delivery", "latency_job"),
    "throughput": ("delivery", "throughput_job"),
    "idle": ("delivery", "idle_job"),
    "notify": ("sessions", "notify_job"),
    "scale": ("sessions", "scale_job"),
    "settle": ("sessions", "settle_job"),
    "settle_floor": ("sessions", "settle_floor_job"),
    "settle_shape": ("shape", "settle_shape_job"),
    "create": ("sessions", "create_job"),
    "pykka_baseline": ("sessions", "pykka_baseline_job"),
    "bridge": ("bridge", "bridge_job"),
    "children": ("children", "children_job"),
    "cli": ("cli", "cli_job"),
    "requests": ("requests", "requests_job"),
    "runtime": ("savina", "runtime_job"),
    "nats": ("nats", "nats_job"),
    "journal": ("journal", "journal_job"),
}


def main(argv: list[str]) -> int:
    job, params = argv[0], json.loads(argv[1])
    module, function = JOBS[job]
    run = getattr(importlib.import_module(f"bench_lib.{module}"), function)
    emit_result(run(params))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
