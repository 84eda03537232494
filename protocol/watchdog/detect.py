"""Watchdog detector: deterministic stuck-loop rules over one agent's episode.

Rules (T = the rule's threshold, ``RULE.threshold``; see :mod:`protocol.watchdog.rules` for
the defaults; I = ``idle_no_progress_s``)
-----------------------------------------------------------------------------------------
Only the episode is considered: events since the agent last received an instruction, and,
after a rescue message, since the agent's first new call (:func:`current_episode`).
Calls are logical calls (a call and its result count once); pending calls have no output.
Each rule has a stable reason code; ``->`` gives its confidence.

``repeated_command``
    the same command key with the same output hash >= T times with no write between them; a
    write resets the count, whether the result passes or fails (edit, re-run the tests, edit,
    re-run is test-driven work, even while the same test keeps failing)
    -> medium; high at >= T+2.
``repeated_failure``
    the same command key (the same tool and normalised arguments) failing >= T times in a
    row, whatever the error texts (a line number or a time in the message changes from run
    to run; the action and its failing do not); any other call between breaks the run
    -> medium; high at >= T+2.
``repeated_typecheck_error``
    the same typecheck/compile error signature in >= T results -> medium; high at >= T+2.
``no_progress``
    >= T calls since the last write (or the episode start) whose tools ran >= I seconds in all
    (each call from its start to its result; the model's think time between a result and the
    next call is not counted: a slow model is not a loop), and a call within the last I
    seconds (a quiet agent is idle, not looping) -> low; medium at 2*I.
``read_only_loop``
    since the last write, read-only calls revisit the same targets (files, searches, however
    spelled: ``cat f`` = ``head f`` = ``read f``) >= T times -> low; medium at 2T; high at 3T.
``alternating_cycle``
    a cycle of 2 or 3 distinct (command, output) pairs repeated >= T times in a row
    (A,B,A,B,A,B is 3 cycles; A,B,A,B,A is 2) -> high.
``monologue``, ``empty_responses``, ``condensation_loop``
    streaks of what the agent says between tool calls: :mod:`protocol.watchdog.messages`.
``error_streak``
    >= T consecutive failed results, of at least two different commands, with the same
    non-empty normalised error output -> medium; high at T+2.

Neither a condensation of the agent's context nor ``output`` (a running command's lines,
bridge notes) is a call, a write or a failure for any of these rules.

Combining: the verdict's confidence is the highest rule confidence; two different rules that
are both only ``low`` make ``medium``; three or more different rules raise the highest by one
step (capped at ``high``). ``likely_stuck`` is true at ``medium`` or ``high``: a lone ``low``
is reported (reasons, evidence) but is not an alert — prefer alert-then-escalate over
tripping early (a detector that trips early is one users learn to ignore).

Every evidence item has a stable ``key`` (rule code + a hash of what it is about: command and
output hash, error signature, target set, the write or run it is anchored to) so that alert
gating can recognise the same evidence; ``seqs`` lists the events behind it, newest last.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import msgspec

from protocol.watchdog.classify import CallClass, classify_call, read_target_key
from protocol.watchdog.config import WatchdogConfig, rule_threshold
from protocol.watchdog.events import (
    LogicalCall,
    ToolEvent,
    current_episode,
    pair_calls,
)
from protocol.watchdog.evidence import (
    CONFIDENCE_LEVELS,
    MAX_EVIDENCE_COMMANDS,
    Confidence,
    Evidence,
    by_count,
    evidence_key,
    rank,
    short,
)
from protocol.watchdog.messages import message_rules
from protocol.watchdog.rules import REASON_CODES

__all__ = [
    "CONFIDENCE_LEVELS",
    "REASON_CODES",
    "Confidence",
    "Evidence",
    "Verdict",
    "detect_stuck",
    "verdict_to_dict",
]


class Verdict(msgspec.Struct, frozen=True, kw_only=True):
    likely_stuck: bool = False
    confidence: Confidence = "none"
    reasons: list[str] = []
    evidence: list[Evidence] = []
    calls: int = 0  # logical calls in the episode
    episode_started_at: float | None = None


def verdict_to_dict(verdict: Verdict) -> dict[str, object]:
    """The verdict as JSON-ready builtins."""
    result: dict[str, object] = msgspec.to_builtins(verdict)
    return result


def _commands(calls: Iterable[LogicalCall]) -> list[str]:
    seen: dict[str, None] = {}
    for call in calls:
        if call.command:
            seen.setdefault(short(call.command), None)
    return list(seen)[:MAX_EVIDENCE_COMMANDS]


def _output(call: LogicalCall) -> str:
    return call.output_hash or ""


def _repeated_command(
    calls: Sequence[LogicalCall], classes: Sequence[CallClass], config: WatchdogConfig
) -> list[Evidence]:
    """Same command, same output, no write between. A write between two runs makes them
    different attempts, passing or failing: edit, tests green, edit, tests green is healthy,
    and so is edit, the same test still failing, edit (test-driven work re-runs the test
    after each edit). The same typecheck error across edits is ``repeated_typecheck_error``'s."""
    groups: dict[tuple[str, str, int], list[LogicalCall]] = {}
    segment = 0  # number of writes before the call
    for call, cls in zip(calls, classes, strict=True):
        if call.command and not call.pending:
            groups.setdefault((call.command, _output(call), segment), []).append(call)
        if cls == "write":
            segment += 1
    longest: dict[tuple[str, str], list[LogicalCall]] = {}
    for (command, output, _), run in groups.items():
        if len(run) > len(longest.get((command, output), [])):
            longest[(command, output)] = run
    found = []
    for (command, output), run in longest.items():
        level = by_count(len(run), rule_threshold(config, "repeated_command"))
        if level == "none":
            continue
        found.append(
            Evidence(
                code="repeated_command",
                key=evidence_key("repeated_command", command, output),
                commands=[short(command)],
                hashes=[output],
                count=len(run),
                detail=f"ran {len(run)} times with the same output (no edit between)",
                confidence=level,
                seqs=[c.seq for c in run],
            )
        )
    return found


def _repeated_failure(done: Sequence[LogicalCall], config: WatchdogConfig) -> list[Evidence]:
    """The same call failing run after run. Its error texts are not compared: a line number
    or a time in the message changes while the action and its failing do not."""
    threshold = rule_threshold(config, "repeated_failure")
    runs: list[list[LogicalCall]] = [[]]
    for call in done:
        run = runs[-1]
        if call.is_error and call.command and run and run[-1].command == call.command:
            run.append(call)
        else:
            runs.append([call] if call.is_error and call.command else [])
    found = []
    for run in runs:
        level = by_count(len(run), threshold)
        if level == "none":
            continue
        hashes = list(dict.fromkeys(_output(c) for c in run))
        texts = f"{len(hashes)} different error outputs" if len(hashes) > 1 else "the same error"
        found.append(
            Evidence(
                code="repeated_failure",
                key=evidence_key("repeated_failure", run[0].command, str(run[0].seq)),
                commands=[short(run[0].command)],
                hashes=hashes[:MAX_EVIDENCE_COMMANDS],
                count=len(run),
                detail=f"failed {len(run)} times in a row ({texts})",
                confidence=level,
                seqs=[c.seq for c in run],
            )
        )
    return found


def _repeated_typecheck(done: Sequence[LogicalCall], config: WatchdogConfig) -> list[Evidence]:
    groups: dict[str, list[LogicalCall]] = {}
    for call in done:
        if call.error_signature is not None:
            groups.setdefault(call.error_signature, []).append(call)
    found = []
    for signature, group in groups.items():
        level = by_count(len(group), rule_threshold(config, "repeated_typecheck_error"))
        if level != "none":
            found.append(
                Evidence(
                    code="repeated_typecheck_error",
                    key=evidence_key("repeated_typecheck_error", signature),
                    commands=_commands(group),
                    hashes=[signature],
                    count=len(group),
                    detail=f"the same error {len(group)} times: {group[-1].error_line}",
                    confidence=level,
                    seqs=[c.seq for c in group],
                )
            )
    return found


def _after_last_write(
    calls: Sequence[LogicalCall], classes: Sequence[CallClass]
) -> tuple[LogicalCall | None, list[int]]:
    """The last write call and the indexes of the calls after it."""
    last = max((i for i, cls in enumerate(classes) if cls == "write"), default=-1)
    return (calls[last] if last >= 0 else None), list(range(last + 1, len(calls)))


def _no_progress(
    calls: Sequence[LogicalCall],
    classes: Sequence[CallClass],
    episode: Sequence[ToolEvent],
    config: WatchdogConfig,
    now: float,
) -> list[Evidence]:
    if not episode:
        return []
    write, after = _after_last_write(calls, classes)
    since = [calls[i] for i in after]
    if write is not None:
        anchor, what = f"write:{write.seq}", "the last edit or write"
    else:
        anchor, what = f"start:{episode[0].seq}", "the episode started"
    busy = _tool_time(since)
    idle = config.idle_no_progress_s
    if len(since) < rule_threshold(config, "no_progress") or busy < idle:
        return []
    last_active = max(c.end_ts if c.end_ts is not None else c.ts for c in since)
    if now - last_active > idle:
        return []  # the agent went quiet: idle is not a loop
    return [
        Evidence(
            code="no_progress",
            key=evidence_key("no_progress", anchor),
            commands=_commands(since),
            count=len(since),
            detail=f"{len(since)} tool calls ran {busy:.0f}s in all since {what}, "
            "none of them a write",
            confidence="medium" if busy >= 2 * idle else "low",
            seqs=[c.seq for c in since],
        )
    ]


def _tool_time(calls: Sequence[LogicalCall]) -> float:
    """Seconds during which at least one of these calls was running, each from its call to its
    result. The time between a result and the next call is the model thinking: a slow model
    is not an agent whose tools keep running without effect. A call still running counts
    when its result arrives (a long build is not a loop)."""
    spans = sorted((c.ts, c.end_ts) for c in calls if c.end_ts is not None)
    total, reached = 0.0, float("-inf")
    for start, end in spans:
        if end > reached:
            total += end - max(start, reached)
            reached = end
    return total


def _read_only_loop(
    calls: Sequence[LogicalCall], classes: Sequence[CallClass], config: WatchdogConfig
) -> list[Evidence]:
    write, after = _after_last_write(calls, classes)
    targets: dict[str, list[LogicalCall]] = {}
    for index in after:
        if classes[index] == "read":
            call = calls[index]
            targets.setdefault(read_target_key(call.tool, call.command), []).append(call)
    threshold = rule_threshold(config, "read_only_loop")
    revisited = {k: v for k, v in targets.items() if len(v) >= threshold}
    if not revisited:
        return []
    rounds = max(len(v) for v in revisited.values())
    level: Confidence = "low"
    if rounds >= 3 * threshold:
        level = "high"
    elif rounds >= 2 * threshold:
        level = "medium"
    anchor = f"write:{write.seq}" if write is not None else "start"
    involved = sorted((c for group in revisited.values() for c in group), key=lambda c: c.seq)
    return [
        Evidence(
            code="read_only_loop",
            key=evidence_key("read_only_loop", anchor, *sorted(revisited)),
            commands=_commands(group[0] for group in revisited.values()),
            hashes=sorted({h for c in involved if (h := _output(c))})[:MAX_EVIDENCE_COMMANDS],
            count=rounds,
            detail=(
                f"{len(revisited)} read-only target(s) revisited up to {rounds} times "
                "with no edit or write between"
            ),
            confidence=level,
            seqs=[c.seq for c in involved],
        )
    ]


def _alternating_cycle(done: Sequence[LogicalCall], config: WatchdogConfig) -> list[Evidence]:
    threshold = rule_threshold(config, "alternating_cycle")
    items = [(c.command, _output(c)) for c in done]
    best: dict[str, Evidence] = {}
    for period in (2, 3):
        start: int | None = None
        for index in range(period, len(items) + 1):
            repeats = index < len(items) and items[index] == items[index - period]
            if repeats and start is None:
                start = index
            if repeats or start is None:
                continue
            base = items[start - period : start]
            cycles = (index - start + period) // period
            start = None
            if len(set(base)) != period or any(not cmd for cmd, _ in base):
                continue
            if cycles < threshold:
                continue
            key = evidence_key("alternating_cycle", *sorted(f"{c}\x1e{h}" for c, h in base))
            run = done[index - cycles * period : index]
            if key not in best or best[key].count < cycles:
                best[key] = Evidence(
                    code="alternating_cycle",
                    key=key,
                    commands=[short(cmd) for cmd, _ in base],
                    hashes=[h for _, h in base],
                    count=cycles,
                    detail=f"a cycle of {period} calls repeated {cycles} times, same outputs",
                    confidence="high",
                    seqs=[c.seq for c in run],
                )
    return list(best.values())


def _error_streak(done: Sequence[LogicalCall], config: WatchdogConfig) -> list[Evidence]:
    found = []
    streak: list[LogicalCall] = []

    def close() -> None:
        commands = {c.command for c in streak}
        level = by_count(len(streak), rule_threshold(config, "error_streak"))
        if level != "none" and len(commands) >= 2:
            digest = _output(streak[0])
            found.append(
                Evidence(
                    code="error_streak",
                    key=evidence_key("error_streak", digest, str(streak[0].seq)),
                    commands=_commands(streak),
                    hashes=[digest],
                    count=len(streak),
                    detail=f"{len(streak)} failures in a row across {len(commands)} commands "
                    "with the same error output",
                    confidence=level,
                    seqs=[c.seq for c in streak],
                )
            )

    for call in done:
        failed = call.is_error and not call.blank_output and call.output_hash is not None
        if failed and streak and streak[-1].output_hash == call.output_hash:
            streak.append(call)
            continue
        close()
        streak = [call] if failed else []
    close()
    return found


def _combine(found: list[Evidence]) -> tuple[Confidence, list[str]]:
    per_rule: dict[str, Confidence] = {}
    for item in found:
        if rank(item.confidence) > rank(per_rule.get(item.code, "none")):
            per_rule[item.code] = item.confidence
    if not per_rule:
        return "none", []
    overall = max(per_rule.values(), key=rank)
    if len(per_rule) >= 3:
        overall = CONFIDENCE_LEVELS[min(rank(overall) + 1, rank("high"))]
    elif len(per_rule) == 2 and overall == "low":
        overall = "medium"
    return overall, [code for code in REASON_CODES if code in per_rule]


def detect_stuck(events: Sequence[ToolEvent], config: WatchdogConfig, now: float) -> Verdict:
    """Judge one agent's events (the episode since its last instruction) at time ``now``."""
    episode = current_episode(events)
    calls = pair_calls(episode)
    done = [c for c in calls if not c.pending]
    classes = [classify_call(c.tool, c.command) for c in calls]
    found = [
        *_repeated_command(calls, classes, config),
        *_repeated_failure(done, config),
        *_repeated_typecheck(done, config),
        *_no_progress(calls, classes, episode, config, now),
        *_read_only_loop(calls, classes, config),
        *_alternating_cycle(done, config),
        *message_rules(episode, config),
        *_error_streak(done, config),
    ]
    found.sort(key=lambda e: (REASON_CODES.index(e.code), -rank(e.confidence), -e.count, e.key))
    confidence, reasons = _combine(found)
    return Verdict(
        likely_stuck=rank(confidence) >= rank("medium"),
        confidence=confidence,
        reasons=reasons,
        evidence=found,
        calls=len(calls),
        episode_started_at=episode[0].ts if episode else None,
    )
