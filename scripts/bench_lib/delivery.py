"""Worker jobs over the filesystem mailbox: delivery latency, throughput, idle cost.

Each job builds a fresh mailbox (``Mailbox.create``, on the memory filesystem Shepherd would use),
starts one receiver from :mod:`bench_lib.receivers`, and drives it with ``bench_lib.publisher``
children — other processes, so every figure crosses a real process boundary.
"""

from __future__ import annotations

import gc
import hmac
import os
import resource
import threading
import time
from typing import Any

from actors.runtime.transport import PARENT_INBOX
from actors.transports.mailbox.mailbox import Mailbox
from bench_lib.common import (
    Publisher,
    latency_summary,
    memory_base_dir,
    new_ids,
    now_ns,
    temp_dir,
)
from bench_lib.receivers import mailbox_options, make_receiver
from protocol.core.errors import ForbiddenSender
from protocol.wire.envelopes import AnyEnvelope


class LatencySink:
    """Records ``now - stamp`` per phase; wakes the job when every envelope arrived."""

    def __init__(self, expected: list[int]) -> None:
        self.samples: list[list[int]] = [[] for _ in expected]
        self._expected = expected
        self.phase_done = [threading.Event() for _ in expected]

    def __call__(self, envelope: AnyEnvelope) -> None:
        arrived = now_ns()
        phase, stamp = envelope.content.split()  # type: ignore[union-attr]
        samples = self.samples[int(phase)]
        samples.append(arrived - int(stamp))
        if len(samples) >= self._expected[int(phase)]:
            self.phase_done[int(phase)].set()

    @property
    def count(self) -> int:
        return sum(len(samples) for samples in self.samples)


class CountingSink:
    """Counts distinct message ids per phase (``first`` is the phase index of its first one),
    and duplicates; wakes the job as each phase completes."""

    def __init__(self, expected: list[int], first: int = 0) -> None:
        self.ids: set[str] = set()
        self.per_phase = [0 for _ in expected]
        self.duplicates = 0
        self._expected = expected
        self._first = first
        self.phase_done = [threading.Event() for _ in expected]

    def __call__(self, envelope: AnyEnvelope) -> None:
        if envelope.message_id in self.ids:
            self.duplicates += 1
            return
        self.ids.add(envelope.message_id)
        phase = int(envelope.content.split(maxsplit=1)[0]) - self._first  # type: ignore[union-attr]
        self.per_phase[phase] += 1
        if self.per_phase[phase] >= self._expected[phase]:
            self.phase_done[phase].set()


def capability_check(senders: dict[str, str]) -> Any:
    """The parent's mailbox validator (as ``Supervisor._validate``): known sender, its secret."""

    def validate(inbox: str, envelope: AnyEnvelope) -> None:
        expected = senders.get(envelope.sender_id)
        if expected is None:
            raise ForbiddenSender(f"unknown sender {envelope.sender_id!r}")
        if not hmac.compare_digest(envelope.capability.encode(), expected.encode()):
            raise ForbiddenSender("capability does not match")

    return validate


def _publisher_params(mailbox: Mailbox, sender: str, secret: str, seed: int) -> dict[str, Any]:
    return {
        "root": str(mailbox.root),
        "session_id": mailbox.session_id,
        "inbox": PARENT_INBOX,
        "sender_id": sender,
        "capability": secret,
        "seed": seed,
    }


def latency_job(params: dict[str, Any]) -> dict[str, Any]:
    """One publisher process, paced phases (idle, burst) → one receiver; latency per phase."""
    variant: str = params["variant"]
    phases: list[dict[str, Any]] = params["phases"]
    paced_s = sum(p["count"] * sum(p["gap_ms"]) / 2000.0 for p in phases)
    with temp_dir("shepherd-bench-", memory_base_dir()) as tmp:
        session_id, agent, secret = new_ids()
        mailbox = Mailbox.create(
            tmp / "mbox",
            session_id,
            validate=capability_check({agent: secret}),
            **mailbox_options(variant),
        )
        mailbox.ensure_inbox(PARENT_INBOX)
        sink = LatencySink([p["count"] for p in phases])
        receiver = make_receiver(variant, mailbox, [PARENT_INBOX], sink)
        try:
            receiver.start()
            publisher = Publisher(
                {**_publisher_params(mailbox, agent, secret, params["seed"]), "phases": phases}
            )
            try:
                publisher.wait_ready()
                complete = True
                for done in sink.phase_done:  # a phase starts once the last one fully arrived
                    publisher.go()
                    complete = done.wait(paced_s * 3 + 30) and complete
                sent = publisher.result(paced_s * 3 + 30)["phases"]
            finally:
                publisher.close()
        finally:
            receiver.close()
            mailbox.close()
    return {
        "variant": variant,
        "complete": complete,
        "published": sum(phase["published"] for phase in sent),
        "received": sink.count,
        "phases": [latency_summary(samples) for samples in sink.samples],
        "publish_call": [phase["publish_call"] for phase in sent],
    }


THROUGHPUT_VARIANTS = (
    "shepherd",
    "shepherd_bell",
    "shepherd_inotify",
    "inotify_reader",
    "raw_files_floor",
)


def throughput_job(params: dict[str, Any]) -> dict[str, Any]:
    """For each variant, then each figure ``{"label", "producers", "envelopes"}``: that many
    producer processes publish flat out into the parent inbox; envelopes/s delivered, from the
    release of the producers to the last envelope reaching the receiving end.

    Variants (one receiver alive at a time, each on its own fresh mailbox):
    ``shepherd``: ``Mailbox.publish`` → the Mailbox receiver → a ShepherdActor (the whole stack),
    the receiver woken as the session parent's is (inotify and the inbox's doorbell);
    ``shepherd_bell`` / ``shepherd_inotify``: the same, woken by the doorbell alone (as every
    bridge is) / by inotify alone (the previous default of every process);
    ``inotify_reader``: the same producers, read by the bare inotify reader (no actor);
    ``raw_files_floor``: producers writing the same files with bare system calls, read by the
    bare inotify reader — what the machine can do with one file per envelope.

    The producer processes are started once and serve every variant and figure in turn (a
    figure with fewer producers leaves the others idle), so start-up is paid once, untimed."""
    variants: list[str] = params.get("variants", list(THROUGHPUT_VARIANTS))
    figures: list[dict[str, Any]] = params["figures"]
    width = max(f["producers"] for f in figures)
    share = [  # share[i][k]: what producer i publishes in figure k
        [f["envelopes"] // f["producers"] if i < f["producers"] else 0 for f in figures]
        for i in range(width)
    ]
    expected = [sum(row[k] for row in share) for k in range(len(figures))]
    senders = dict(new_ids()[1:] for _ in range(width))
    out: dict[str, Any] = {}
    with temp_dir("shepherd-bench-", memory_base_dir()) as tmp:
        mailboxes = {}
        for variant in variants:
            mailbox = Mailbox.create(
                tmp / variant,
                new_ids()[0],
                validate=capability_check(senders),
                **mailbox_options(variant),
            )
            mailbox.ensure_inbox(PARENT_INBOX)
            mailboxes[variant] = mailbox
        publishers: list[Publisher] = []
        try:
            for i, (sender, secret) in enumerate(senders.items()):
                phases = [
                    {
                        "count": share[i][k],
                        "gap_ms": None,
                        "root": str(mailboxes[variant].root),
                        "session_id": mailboxes[variant].session_id,
                        "raw": variant == "raw_files_floor",
                    }
                    for variant in variants
                    for k in range(len(figures))
                ]
                params_i = {**_publisher_params(mailboxes[variants[0]], sender, secret, i)}
                publishers.append(Publisher({**params_i, "phases": phases}))
            for publisher in publishers:
                publisher.wait_ready()
            for v, variant in enumerate(variants):
                out[variant] = _throughput_variant(
                    variant, mailboxes[variant], publishers, figures, expected, v * len(figures)
                )
            results = [publisher.result(60)["phases"] for publisher in publishers]
        finally:
            for publisher in publishers:
                publisher.close()
            for mailbox in mailboxes.values():
                mailbox.close()
    for v, variant in enumerate(variants):
        for k, figure in enumerate(out[variant]["figures"]):
            mine = [r[v * len(figures) + k] for r in results]
            mine = [phase for phase in mine if phase["published"]]
            figure["published"] = sum(phase["published"] for phase in mine)
            figure["lost"] = figure["published"] - figure["delivered"]
            figure["backpressure_waits"] = sum(phase["backpressure_waits"] for phase in mine)
            figure["producer_elapsed_s"] = max(phase["elapsed_s"] for phase in mine)
            calls = [phase["publish_call"]["mean_ms"] for phase in mine]
            figure["publish_call_mean_ms"] = sum(calls) / len(calls)
    return {"variants": out}


def _throughput_variant(
    variant: str,
    mailbox: Mailbox,
    publishers: list[Publisher],
    figures: list[dict[str, Any]],
    expected: list[int],
    first_phase: int,
) -> dict[str, Any]:
    sink = CountingSink(expected, first_phase)
    reader = variant if variant.startswith("shepherd") else "raw_inotify"
    receiver = make_receiver(reader, mailbox, [PARENT_INBOX], sink)
    done: list[dict[str, Any]] = []
    try:
        receiver.start()
        for k, figure in enumerate(figures):
            started = time.perf_counter()
            for publisher in publishers:
                publisher.go()
            complete = sink.phase_done[k].wait(expected[k] / 200 + 60)
            elapsed = time.perf_counter() - started
            done.append(
                {
                    "label": figure["label"],
                    "producers": figure["producers"],
                    "complete": complete,
                    "envelopes_per_s": sink.per_phase[k] / elapsed,
                    "elapsed_s": elapsed,
                    "delivered": sink.per_phase[k],
                }
            )
    finally:
        receiver.close()
        stats = mailbox.stats()
        mailbox.close()
    return {
        "figures": done,
        "duplicates": sink.duplicates,
        "left_in_new": len(os.listdir(mailbox.inbox_path(PARENT_INBOX) / "new")),
        "quarantined": stats.quarantined if variant.startswith("shepherd") else 0,
    }


def idle_job(params: dict[str, Any]) -> dict[str, Any]:
    """CPU seconds this process uses over ``duration_s`` while its receiver watches
    ``agents`` agent inboxes plus the parent inbox and nothing arrives."""
    variant: str = params["variant"]
    duration: float = params["duration_s"]
    with temp_dir("shepherd-bench-", memory_base_dir()) as tmp:
        session_id, _, _ = new_ids()
        mailbox = Mailbox.create(tmp / "mbox", session_id, **mailbox_options(variant))
        inboxes = [PARENT_INBOX] + [new_ids()[1] for _ in range(params["agents"])]
        for inbox in inboxes:
            mailbox.ensure_inbox(inbox)
        receiver = make_receiver(variant, mailbox, inboxes, lambda envelope: None)
        try:
            receiver.start()
            gc.collect()
            before = resource.getrusage(resource.RUSAGE_SELF)
            wall = time.perf_counter()
            time.sleep(duration)  # the idle period itself is the workload
            wall = time.perf_counter() - wall
            after = resource.getrusage(resource.RUSAGE_SELF)
        finally:
            receiver.close()
            mailbox.close()
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {
        "variant": variant,
        "inboxes": len(inboxes),
        "duration_s": wall,
        "cpu_s": cpu,
        "cpu_s_per_30s": cpu * 30.0 / wall,
        "core_pct": 100.0 * cpu / wall,
    }
