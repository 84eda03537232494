"""``shepherd watchdog ...``: the watchdog's command line, its session routing, and the loop demo.

Commands (each takes ``--json`` and ``--session DIR`` like every other ``shepherd`` command)::

    shepherd watchdog status              enabled / paused, alert mode, alerts sent, targets
    shepherd watchdog config              every setting in effect, every rule's threshold
    shepherd watchdog set KEY VALUE...    change one setting for this session only
                                          (a rule's threshold: ``set monologue.threshold 5``)
    shepherd watchdog pause | resume      suppress / restore alerts (detection keeps running)
    shepherd watchdog inspect AGENT       an agent's event window and the detector's verdict
    shepherd watchdog replay FILE         run the detector over a JSON-lines transcript

``replay`` runs locally, without a session: a verdict after each event, then the final
verdict (with ``--json`` one JSON object per line, the last one ``{"final": true, ...}``). It
starts from the default settings, or with ``--session`` from that live session's settings;
``--set KEY=VALUE`` overrides fields (``--set monologue.threshold=5`` as well). Errors exit
with status 2 and, with ``--json``, print ``{"error": {"code", "message"}}`` on stdout.

The other commands run in the session: :func:`run_watchdog` takes a ``call(op, args)``
function (:func:`client_call` for the CLI; ``lambda op, a: session.watchdog(op, **a)`` in
process). :func:`session_call` is the session side, for ``Supervisor.call``.
:func:`run_loop_demo` is ``shepherd demo --loop``.

``python -m actors.surfaces.watchdog_cli replay FILE ...`` (or any other watchdog command) runs this
module directly.
"""

from __future__ import annotations

import argparse
import itertools
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TextIO

import msgspec

from protocol import watchdog as wd
from protocol.errors import InvalidArgument, ShepherdError

__all__ = [
    "LOOP_COMMAND",
    "LOOP_SCRIPT",
    "Call",
    "add_watchdog_parser",
    "client_call",
    "main",
    "parse_set_options",
    "run_loop_demo",
    "run_watchdog",
]

#: ``call(op, args)``: run one watchdog operation in a session and return its JSON-able result
Call = Callable[[str, dict[str, Any]], Any]


# ----------------------------------------------------------------------------- parser


def _add_common(p: argparse.ArgumentParser, *, replay: bool = False) -> None:
    p.add_argument("--json", action="store_true", help="print JSON (replay: one object a line)")
    p.add_argument(
        "--session",
        metavar="DIR",
        help=(
            "start from this live session's watchdog settings (default: the built-in defaults)"
            if replay
            else "the session directory"
        ),
    )


def add_watchdog_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add ``watchdog`` and its subcommands to the ``shepherd`` parser's subparsers."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "watchdog",
        help="the stuck-loop watchdog: status, settings, pause/resume, inspect, replay",
        description="The stuck-loop watchdog (it alerts the parent; it never kills or steers).",
    )
    sub = parser.add_subparsers(dest="watchdog_command", required=True, metavar="COMMAND")

    p = sub.add_parser("status", help="enabled/paused, alert mode, alerts sent, targets")
    _add_common(p)
    p = sub.add_parser("config", help="every watchdog setting in effect, every rule's threshold")
    _add_common(p)
    p = sub.add_parser(
        "set",
        help="change one setting for this session only (settings files are not written)",
        description=(
            f"Keys: {', '.join(wd.CONFIG_KEYS)}, and rescue_message_override (the session's "
            "rescue message; an empty value clears it). RULE.threshold is one rule's count "
            "(1-1,000,000). The words of VALUE are joined by spaces."
        ),
    )
    p.add_argument("key", metavar="KEY")
    p.add_argument("value", metavar="VALUE", nargs="+")
    _add_common(p)
    p = sub.add_parser("pause", help="suppress alerts in this session (detection goes on)")
    _add_common(p)
    p = sub.add_parser("resume", help="alert again after a pause")
    _add_common(p)
    p = sub.add_parser("inspect", help="an agent's recent events and the detector's verdict")
    p.add_argument("agent", metavar="AGENT", help="agent name or id")
    p.add_argument("--limit", type=int, metavar="N", help="only the newest N events")
    _add_common(p)
    p = sub.add_parser(
        "replay",
        help="run the detector over a JSON-lines transcript (no session needed)",
        description=(
            "One event per line: {kind: tool_call|tool_result|error|message|user_input|"
            "condensation|output, tool, command?, args?, output?, text?, exit_code?, is_error?, "
            "source?: user|agent, ts?}. Prints the verdict after each event, then the final "
            "verdict. FILE '-' reads standard input."
        ),
    )
    p.add_argument("file", metavar="FILE")
    p.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help=(
            "override a watchdog setting (repeatable), e.g. --set repeat_threshold=5 or "
            "--set monologue.threshold=4"
        ),
    )
    _add_common(p, replay=True)
    return parser


# ----------------------------------------------------------------------------- output


def _emit(out: TextIO, as_json: bool, data: Any, human: str) -> None:
    out.write((msgspec.json.encode(data).decode() if as_json else human) + "\n")
    out.flush()


def _fail(args: argparse.Namespace, exc: ShepherdError, out: TextIO, err: TextIO) -> int:
    if getattr(args, "json", False):
        out.write(msgspec.json.encode({"error": exc.info()}).decode() + "\n")
        out.flush()
    else:
        err.write(f"shepherd: {exc.code}: {exc.message}\n")
        err.flush()
    return 2


def _when(ts: Any) -> str:
    """A clock value: wall-clock time of day for real sessions, seconds for simulated ones."""
    if not isinstance(ts, (int, float)):
        return "-"
    if ts > 1e9:
        return time.strftime("%H:%M:%S", time.localtime(ts))
    return f"{ts:.1f}s"


def _one_line(text: str, width: int = 100) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= width else flat[: width - 1] + "…"


def _value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _verdict_lines(verdict: Mapping[str, Any]) -> list[str]:
    stuck = "likely stuck" if verdict.get("likely_stuck") else "not stuck"
    lines = [f"verdict: {stuck} (confidence {verdict.get('confidence', 'none')})"]
    reasons = verdict.get("reasons") or []
    lines.append(f"reasons: {', '.join(reasons) or 'none'}")
    evidence = verdict.get("evidence") or []
    if evidence:
        lines.append("evidence:")
    for item in evidence:
        lines.append(
            f"  - {item.get('code')} x{item.get('count')} [{item.get('confidence')}]: "
            f"{item.get('detail', '')}"
        )
        lines.extend(f"      $ {command}" for command in item.get("commands") or [])
        hashes = [h[:12] for h in item.get("hashes") or [] if h]
        if hashes:
            lines.append(f"      output sha256: {', '.join(hashes)}")
    return lines


def _render_status(data: Mapping[str, Any]) -> str:
    if not data.get("enabled"):
        state = "off (enabled = false)"
    elif data.get("paused"):
        state = "paused (no alerts until `shepherd watchdog resume`)"
    else:
        state = "on"
    targets = data.get("targets") or []
    lines = [
        f"watchdog: {state}",
        f"alert mode: {data.get('alert_mode')}   alerts sent: {data.get('alerts', 0)}",
        f"rescue message: {_one_line(str(data.get('rescue_message', '')), 90)}",
        f"targets: {len(targets)}",
    ]
    for t in targets:
        lines.append(
            f"  {t.get('name') or '?':<12} {t.get('id', ''):<14} {t.get('kind', ''):<9} "
            f"{t.get('status', ''):<9} {t.get('tool_call_count', 0):>4} tool calls   "
            f"last active {_when(t.get('last_active_at'))}"
        )
    return "\n".join(lines)


_FALLBACKS = {f"{r.code}.threshold": r.fallback for r in wd.RULES}


def _render_config(data: Mapping[str, Any]) -> str:
    """Every setting; a rule with no threshold of its own shows the one it uses."""
    width = max((len(k) for k in data), default=0)
    lines = []
    for key, value in data.items():
        shown = _value(value)
        fallback = _FALLBACKS.get(key)
        if value is None and fallback is not None:
            shown = f"{_value(data.get(fallback))} (from {fallback})"
        lines.append(f"{key:<{width}}  {shown}")
    return "\n".join(lines)


def _render_set(key: str, data: Mapping[str, Any]) -> str:
    if key == "rescue_message_override":
        return "rescue message override updated (this session only; settings files unchanged)"
    return f"{key} = {_value(data.get(key))} (this session only; settings files unchanged)"


def _render_inspect(data: Mapping[str, Any]) -> str:
    events = data.get("events") or []
    lines = [
        f"{data.get('name')} ({data.get('agent_id')})   task: {data.get('task_id') or 'none'}",
        *_verdict_lines(data.get("verdict") or {}),
        f"events: {len(events)} shown, {data.get('dropped', 0)} dropped from the window",
    ]
    if events:
        lines.append(f"  {'seq':>4} {'ts':>9}  {'kind':<11} {'tool':<8} {'exit':>4}  what")
    for e in events:
        what = e.get("command") or e.get("preview") or ""
        if e.get("kind") in ("tool_result", "error") and e.get("output_hash"):
            what = f"{what}  -> {str(e['output_hash'])[:12]}"
        exit_code = e.get("exit_code")
        lines.append(
            f"  {e.get('seq', ''):>4} {_when(e.get('ts')):>9}  {e.get('kind', ''):<11} "
            f"{e.get('tool') or '-':<8} {'' if exit_code is None else exit_code:>4}  "
            f"{_one_line(str(what), 70)}"
        )
    return "\n".join(lines)


# ----------------------------------------------------------------------------- replay


def parse_set_options(
    pairs: Sequence[str], base: wd.WatchdogConfig | None = None
) -> wd.WatchdogConfig:
    """Apply ``KEY=VALUE`` overrides (``watchdog.KEY`` accepted) onto ``base``; a bad pair
    raises :class:`~protocol.errors.InvalidArgument` naming it."""
    config = base if base is not None else wd.WatchdogConfig()
    for pair in pairs:
        key, eq, text = pair.partition("=")
        key = key.strip().removeprefix("watchdog.")
        if not eq or not key:
            raise InvalidArgument(f"--set expects KEY=VALUE, got {pair!r}")
        config = wd.set_config_value(config, key, text)
    return config


def _read_transcript(path: str) -> list[bytes]:
    try:
        data = sys.stdin.buffer.read() if path == "-" else Path(path).read_bytes()
    except OSError as exc:
        raise InvalidArgument(f"cannot read {path}: {exc.strerror or exc}") from None
    return data.splitlines()


def _replay_table(lines: list[bytes], results: list[dict[str, Any]]) -> str:
    head = f"{'line':>4}  {'kind':<11} {'tool':<8} {'stuck':<5} {'conf':<6} {'alert':<5}  "
    rows = [head + "command / reasons"]
    for r in results:
        if r.get("final"):
            continue
        line = int(r["line"])
        event = wd.decode_replay_line(lines[line - 1], line)
        what = event.command or _one_line(event.text or event.output or "", 40)
        reasons = ",".join(r.get("reasons") or [])
        rows.append(
            f"{line:>4}  {r['kind']:<11} {r.get('tool') or '-':<8} "
            f"{'yes' if r['likely_stuck'] else 'no':<5} {r['confidence']:<6} "
            f"{'yes' if r.get('alert') else '':<5}  {_one_line(what, 50)}"
            + (f"   [{reasons}]" if reasons else "")
        )
    final = results[-1]
    rows.append("")
    events, alerts = final.get("events", 0), final.get("alerts", 0)
    rows.append(
        f"final after {events} event{'' if events == 1 else 's'}, "
        f"{alerts} alert{'' if alerts == 1 else 's'}:"
    )
    rows.extend(_verdict_lines(final))
    return "\n".join(rows)


def _replay(args: argparse.Namespace, call: Call | None, out: TextIO) -> int:
    base: wd.WatchdogConfig | None = None
    if args.session and call is not None:
        try:
            base = msgspec.convert(call("config", {}), wd.WatchdogConfig)
        except msgspec.ValidationError as exc:
            raise InvalidArgument(f"the session's watchdog settings are unusable: {exc}") from None
    config = parse_set_options(args.overrides, base)
    lines = _read_transcript(args.file)
    results = wd.replay(lines, config)
    if args.json:
        for r in results:
            out.write(msgspec.json.encode(r).decode() + "\n")
        out.flush()
    else:
        _emit(out, False, None, _replay_table(lines, results))
    return 0


# ----------------------------------------------------------------------------- commands


def run_watchdog(
    args: argparse.Namespace,
    call: Call | None,
    *,
    out: TextIO | None = None,
    err: TextIO | None = None,
) -> int:
    """Run one parsed ``shepherd watchdog ...`` command; 0 on success, 2 on an error."""
    out = out or sys.stdout
    err = err or sys.stderr
    command = args.watchdog_command
    try:
        if command == "replay":
            return _replay(args, call, out)
        if call is None:
            raise InvalidArgument(f"watchdog {command} needs a session")
        data: Any
        match command:
            case "status":
                data = call("status", {})
                human = _render_status(data)
            case "config":
                data = call("config", {})
                human = _render_config(data)
            case "set":
                data = call("set", {"key": args.key, "value": " ".join(args.value)})
                human = _render_set(args.key, data)
            case "pause":
                data = call("pause", {})
                human = "watchdog paused: no alerts until `shepherd watchdog resume`"
            case "resume":
                data = call("resume", {})
                human = "watchdog resumed: alerts are on again"
            case "inspect":
                request: dict[str, Any] = {"agent": args.agent}
                if args.limit is not None:
                    request["limit"] = args.limit
                data = call("inspect", request)
                human = _render_inspect(data)
            case _:
                raise InvalidArgument(f"unknown watchdog command {command!r}")
        _emit(out, args.json, data, human)
        return 0
    except ShepherdError as exc:
        return _fail(args, exc, out, err)


def client_call(session: str | None, announce: Callable[[str], None] | None = None) -> Call:
    """The CLI's ``call``: op ``watchdog`` to the session found from ``--session`` (lazily;
    ``announce`` is told which session when it was not named)."""

    found: list[Any] = []  # the session, found once (and announced once)

    def call(op: str, args: dict[str, Any]) -> Any:
        from actors.surfaces.client import Client, find_session

        if not found:
            found.append(find_session(session, announce=announce))
        return Client(found[0]).call("watchdog", {"op": op, "args": args})

    return call


# ----------------------------------------------------------------------------- loop demo

LOOP_COMMAND = "rg -n TODO src"
LOOP_RUNS = 36
LOOP_GAP_S = 5.0

#: a scout that takes its task, then runs the same search over and over, never finishing
LOOP_SCRIPT: dict[str, Any] = {
    "steps": [
        {"await": "task"},
        {"say": "scout: looking for the TODOs"},
        {
            "repeat": {
                "times": LOOP_RUNS,
                "steps": [{"run": LOOP_COMMAND}, {"sleep": LOOP_GAP_S}],
            }
        },
        {"await": "any"},
    ]
}

_RG_OUTPUT = "src/app.py:12:    # TODO: handle the timeout\nsrc/db.py:40:    # TODO: retry\n"


class _Teller:
    """Prints one story line, stamped with the seconds since the story began."""

    def __init__(self, out: TextIO, now: Callable[[], float]) -> None:
        self._out = out
        self._now = now
        self.t0: float | None = None

    def since(self, t: float) -> float:
        return t - (self.t0 if self.t0 is not None else t)

    def __call__(self, text: str) -> None:
        now = self._now()
        if self.t0 is None:
            self.t0 = now
        self._out.write(f"[{now - self.t0:8.3f}s] {text}\n")
        self._out.flush()


def _windows_ok(alert_times: list[float], runs: list[float], cooldown: float, gap: float) -> bool:
    """Exactly one alert per cooldown window while the loop ran: alerts at least a cooldown
    apart, never a whole window (plus one loop step) without one, up to the loop's end."""
    if not alert_times or not runs:
        return False
    slack = gap + 1.0  # an alert comes with the first result after the window opens
    pairs = itertools.pairwise(alert_times)
    spaced = all(cooldown <= b - a < cooldown + slack for a, b in pairs)
    return spaced and runs[-1] - alert_times[-1] < cooldown + slack


def run_loop_demo(out: TextIO | None = None, seed: int = 1) -> int:
    """``shepherd demo --loop``: a scripted scout loops on one search in the simulation; the
    watchdog alerts the parent once per cooldown window and the task keeps running. Returns 0
    when exactly one alert per cooldown window arrived and the task is still running."""
    from actors.session.session import Session
    from actors.testing import SimSession
    from protocol.notifications import AnyNotification, WatchdogAlert
    from protocol.render import render_notification
    from protocol.views import render_status

    out = out or sys.stdout
    holder: list[Session] = []
    tell = _Teller(out, lambda: holder[0].runtime.clock.now() if holder else 0.0)
    alerts: list[WatchdogAlert] = []
    runs: list[float] = []

    def sink(note: AnyNotification) -> None:
        if isinstance(note, WatchdogAlert):
            alerts.append(note)
        tell("notification to the parent:\n" + render_notification(note))

    def commands(command: str) -> tuple[str, int]:
        runs.append(holder[0].runtime.clock.now())
        same = " (the same output as before)" if len(runs) > 1 else ""
        tell(f"scout $ {command}   run {len(runs)}: {len(_RG_OUTPUT.splitlines())} matches{same}")
        return _RG_OUTPUT, 0

    session = SimSession.simulated(seed, sink=sink, tap=tell, commands=commands)
    holder.append(session)
    try:
        config = session.watchdog("config")
        cooldown = float(config["cooldown_s"])
        out.write(
            f"session {session.session_id} (simulated, seed {seed}): a scout repeats "
            f"`{LOOP_COMMAND}` {LOOP_RUNS} times, every {LOOP_GAP_S:g}s, with the same output\n"
            f"watchdog: repeat_threshold {config['repeat_threshold']}, cooldown {cooldown:g}s, "
            f"alert_mode {config['alert_mode']} (alert the parent; never kill or steer)\n\n"
        )
        session.spawn("scout", script=LOOP_SCRIPT, description="finds the TODOs")
        task = session.delegate("scout", "Find every TODO in src/ and list them")
        session.sim.run_all(max_time=LOOP_RUNS * LOOP_GAP_S + 20)
        status = msgspec.to_builtins(session.status())
        watchdog = session.watchdog("status")
        inspected = session.watchdog("inspect", agent="scout", limit=1)
    finally:
        session.shutdown()
    times = [a.created_at for a in alerts]
    running = any(
        (a.get("task") or {}).get("task_id") == task.task_id
        and a["task"]["state"] in ("running", "waiting")
        for a in status["agents"]
    )
    ok = _windows_ok(times, runs, cooldown, LOOP_GAP_S) and running
    ok = ok and all("repeated_command" in a.reasons for a in alerts)
    loop_s = runs[-1] - runs[0] if runs else 0.0
    out.write("\nfinal status:\n" + render_status(status) + "\n")
    out.write(
        f"watchdog: {watchdog['alerts']} alerts to the parent at "
        f"{', '.join(f'{tell.since(t):.0f}s' for t in times) or 'none'} "
        f"over a {loop_s:.0f}s loop "
        f"(cooldown {cooldown:g}s); last verdict for scout: "
        f"{inspected['verdict']['confidence']} {', '.join(inspected['verdict']['reasons'])}\n"
    )
    out.write(
        f"task {task.task_id}: {'still running' if running else 'NOT running'} "
        "(the watchdog alerted; nothing was killed or steered)\n"
    )
    out.write(
        "exactly one alert per cooldown window: "
        + ("yes\n" if ok else "NO (see the alert times above)\n")
    )
    out.flush()
    return 0 if ok else 1


# ----------------------------------------------------------------------------- module entry


def main(argv: list[str] | None = None) -> int:
    """``python -m actors.surfaces.watchdog_cli COMMAND ...``: the ``shepherd watchdog``
    commands."""
    parser = argparse.ArgumentParser(prog="shepherd")
    add_watchdog_parser(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["watchdog", *(sys.argv[1:] if argv is None else argv)])
    call = client_call(args.session) if args.session or args.watchdog_command != "replay" else None
    return run_watchdog(args, call)


if __name__ == "__main__":
    sys.exit(main())
