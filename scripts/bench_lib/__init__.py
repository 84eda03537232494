"""The pieces of ``scripts/bench.py``: one module per benchmark, run in fresh worker processes.

``python -m bench_lib.worker JOB PARAMS`` (with ``scripts/`` on ``PYTHONPATH``) runs one job and
prints its result as one JSON line; ``python -m bench_lib.publisher PARAMS`` is the other process
that publishes into a mailbox. ``bench.py`` starts both, collects the runs and writes the figures.
"""
