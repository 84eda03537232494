"""``shepherd-child``: the child side's command line. It has exactly these commands and never a
parent one:

    shepherd-child run
        the bridge itself (started by the parent's launcher; see ``actors.child.bridge``)
    shepherd-child message TARGET TEXT [--expects-reply] [--reply-to ID] [--thread ID]
                                       [--steer] [--json]
    shepherd-child done --status completed|blocked|failed [--summary TEXT]
                        [--cancel-requests] [--json]
    shepherd-child usage --tokens N [--cost USD] [--json]
    shepherd-child approve-request TEXT [--timeout S] [--json]
        ask the parent's approval and block until it answers (exit 0 approved, 1 denied):
        see ``actors.child.approval``
    shepherd-child watchdog-status|watchdog-events AGENT [--limit N]|watchdog-stuck [AGENT]
                   |watchdog-alert AGENT TEXT [--json]
        a watchdog agent's questions (``spawn --role watchdog``), answered in the receipt:
        see ``protocol.ops.child_watchdog``; they print the answer (JSON), not the receipt
    shepherd-child rate-limited --provider NAME [--retry-after S] [--text TEXT] [--json]
    shepherd-child provider-error --provider NAME --text TEXT [--json]
        from inside a command agent's turn: its model provider refused the turn. The report
        goes to the agent's bridge (``actors.child.turn_reports``), which tells the parent when
        the turn has ended and runs the turn again when the parent resumes the agent

``message``, ``done`` and ``usage`` are what an agent runs from its shell, generated from the
child's entries of the operation table (:mod:`protocol.ops.child`): their arguments are checked
as the same Structs as the child's tools ``shepherd_message`` / ``shepherd_done``. They read the
same ``SHEPHERD_*`` environment as the bridge, publish one envelope to the parent as this agent
(capability included) and wait for the parent's honest receipt in a one-shot inbox named by
the envelope's own message id (``reply_inbox``), created and locked before publishing and
removed after (:mod:`actors.transports.mailbox.reply_inboxes`).
Options take ``--opt value`` or ``--opt=value``; ``--`` ends the options, so a TARGET or TEXT
starting with ``-`` is never read as one.

Output: the receipt, as text, or with ``--json`` one object
``{"message_id", "accepted", "request_id"?, "task_id"?, "result"?}``; exit 0.
A full parent inbox is back-pressure, not a refusal: the publish is retried with backoff
(saying so once on stderr) within the same timeout.
A refusal, a timeout (30 s, ``SHEPHERD_CHILD_TIMEOUT_S`` overrides: code
``session_unavailable``) or a missing variable exits 2 with ``{"error": {"code", "message"}}``
on stdout under ``--json``, else one line on stderr.
"""

from __future__ import annotations

import argparse
import functools
import io
import json
import os
import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, NoReturn, TextIO

import msgspec

from actors import tracing
from actors.child.approval import ask
from actors.child.env import ChildEnv, child_env_from, envelope_validator
from actors.child.outbox import until_reachable
from actors.child.turn_reports import report_refusal
from actors.runtime.clock import Clock, SystemClock
from actors.runtime.command_wire import wants_json
from actors.runtime.ids import IdSource
from actors.runtime.transport import PARENT_INBOX, Transport
from protocol import ops
from protocol.core.errors import (
    ErrorInfo,
    InvalidArgument,
    InvalidHandle,
    SessionUnavailable,
    ShepherdError,
    error_from_info,
)
from protocol.core.ids import PARENT_ID, IdKind, is_valid_name, kind_of
from protocol.ops.approvals import ChildApprovalArgs
from protocol.ops.child import (
    ChildDoneArgs,
    ChildMessageArgs,
    ChildProviderErrorArgs,
    ChildRateLimitedArgs,
    ChildUsageArgs,
)
from protocol.ops.child_watchdog import ChildWatchdogArgs, query_fields
from protocol.wire.envelopes import (
    AckEnvelope,
    AnyEnvelope,
    Delivery,
    MessageEnvelope,
    QueryEnvelope,
    ReplyEnvelope,
    RuntimeEnvelope,
    TaskDoneEnvelope,
)

if TYPE_CHECKING:
    from actors.runtime.command_socket import Request

__all__ = ["main", "run_captured", "send_and_wait"]

DEFAULT_TIMEOUT_S = 30.0
ENV_TIMEOUT = "SHEPHERD_CHILD_TIMEOUT_S"


class _Parser(argparse.ArgumentParser):
    """argparse that raises ``invalid_argument`` instead of printing usage and exiting, so a
    ``--json`` caller gets its error as JSON like every other error."""

    def error(self, message: str) -> NoReturn:
        raise InvalidArgument(f"{message} (see '{self.prog} --help')")


@functools.cache
def _parser() -> _Parser:
    """``run``, then one command per child operation of the table (:data:`protocol.ops.CHILD`):
    the same Structs as the child's tools ``shepherd_message`` / ``shepherd_done``. Built once
    per process: the bridge parses every call of its agent with it (parsing does not change a
    parser, so its threads share it)."""
    parser = _Parser(
        prog="shepherd-child",
        description=(
            "Child-side commands of a Shepherd agent (run, message, done, usage, approve-request)."
        ),
    )
    names = ",".join(["run", *(op.name for op in ops.CHILD)])
    sub = parser.add_subparsers(dest="command", required=True, metavar=f"{{{names}}}")
    sub.add_parser("run", help="run the child bridge (started by the parent supervisor)")
    for op in ops.CHILD:
        p = sub.add_parser(op.name, help=op.help)
        for name, spec in op.arguments():
            p.add_argument(name, **spec)
        p.add_argument("--json", action="store_true", help="print one JSON object")
    return parser


# ---------------------------------------------------------------------- one-shot publish


def _timeout(environ: Mapping[str, str]) -> float:
    raw = environ.get(ENV_TIMEOUT, "").strip()
    if not raw:
        return DEFAULT_TIMEOUT_S
    try:
        value = float(raw)
    except ValueError:
        raise InvalidArgument(f"{ENV_TIMEOUT}={raw!r:.40} is not a number of seconds") from None
    if not 0 < value <= 3600:
        raise InvalidArgument(f"{ENV_TIMEOUT} must be in (0, 3600] seconds, got {value}")
    return value


def send_and_wait(
    env: ChildEnv,
    build: Callable[[dict[str, Any]], AnyEnvelope],
    *,
    timeout_s: float,
    traceparent: str | None = None,
    err: TextIO | None = None,
) -> AckEnvelope:
    """Publish ``build(base_fields)`` to the parent as this agent and wait for its ``ack`` in a
    one-shot inbox named by the envelope's message id. Raises ShepherdError."""
    ids = IdSource()
    message_id = ids.new(IdKind.MESSAGE)
    base = {
        "message_id": message_id,
        "session_id": env.session_id,
        "sender_id": env.agent_id,
        "created_at": SystemClock().now(),
        "capability": env.capability,
        "reply_inbox": message_id,
    }
    if traceparent is not None:
        base["traceparent"] = traceparent
    envelope = build(base)
    validate_ack = envelope_validator(env, kinds=(AckEnvelope,))
    # the session's transport (its mailbox, or NATS), imported at the call: help and usage
    # errors never pay for it
    from actors.transports.wire import open_reply_inbox

    mailbox = env.open_transport(validate=validate_ack)
    got: list[AckEnvelope] = []
    arrived = threading.Event()

    def on_ack(received: AnyEnvelope) -> None:
        if isinstance(received, AckEnvelope) and received.ack_for == message_id:
            got.append(received)
            arrived.set()

    clock = SystemClock()
    deadline = clock.monotonic() + timeout_s
    try:  # each step waits out an outage (a NATS leader election) within the call's bound
        inbox = until_reachable(lambda: open_reply_inbox(mailbox, message_id), clock, deadline, err)
    except BaseException:
        mailbox.close()
        raise
    try:
        subscription = until_reachable(
            lambda: mailbox.subscribe(message_id, on_ack), clock, deadline, err
        )
        try:
            _publish_with_backoff(mailbox, envelope, clock, deadline, err)
            if not arrived.wait(max(0.0, deadline - clock.monotonic())):
                raise SessionUnavailable(
                    f"no receipt from the shepherd within {timeout_s:g} s "
                    f"(message {message_id}); is the session still running?"
                )
        finally:
            subscription.cancel()
    finally:
        # the receiver stops first, then the inbox goes (see
        # actors.transports.mailbox.reply_inboxes); a late receipt keeps it until the parent's sweep
        mailbox.close()
        inbox.remove()
    return got[0]


def _publish_with_backoff(
    mailbox: Transport,
    envelope: AnyEnvelope,
    clock: Clock,
    deadline: float,
    err: TextIO | None = None,
) -> None:
    """Publish to the parent; while its inbox is full or the session cannot be reached for a
    moment (a NATS stream electing its leader), the same envelope is tried again until
    ``deadline`` (:func:`~actors.child.outbox.until_reachable`); then the caller hears of it."""
    until_reachable(lambda: mailbox.publish(PARENT_INBOX, envelope), clock, deadline, err)


# ---------------------------------------------------------------------- commands


def _message_builder(args: ChildMessageArgs) -> Callable[[dict[str, Any]], AnyEnvelope]:
    target = args.target.strip()
    text = args.message
    if not text.strip():
        raise InvalidArgument("message TEXT is empty")
    if args.thread_id is not None and not args.thread_id.strip():
        raise InvalidArgument("--thread is empty")
    delivery: Delivery = "steer" if args.steer else "follow_up"
    is_id = target == PARENT_ID or kind_of(target) is IdKind.AGENT
    if args.reply_to is not None:
        if args.expects_reply:
            raise InvalidArgument(
                "a reply cannot also expect a reply (--reply-to with --expects-reply)"
            )
        reply_to = args.reply_to.strip()
        if kind_of(reply_to) is not IdKind.MESSAGE:
            raise InvalidHandle(f"--reply-to {reply_to!r:.80} is not a message id")
        if not (is_id or is_valid_name(target)):
            raise InvalidArgument(
                f"a reply goes back to the request's sender: TARGET must be its name, its "
                f"agent id or {PARENT_ID!r}, not {target!r:.80}"
            )
        return lambda base: ReplyEnvelope(
            **base,
            target_id=target,
            content=text,
            reply_to=reply_to,
            thread_id=args.thread_id,
            delivery=delivery,
        )
    if not (is_id or is_valid_name(target)):
        raise InvalidArgument(
            f"TARGET {target!r:.80} is not an agent name, an agent id or {PARENT_ID!r}"
        )
    return lambda base: MessageEnvelope(
        **base,
        target_id=target,
        content=text,
        thread_id=args.thread_id,
        expects_reply=args.expects_reply,
        delivery=delivery,
    )


def _done_builder(args: ChildDoneArgs) -> Callable[[dict[str, Any]], AnyEnvelope]:
    return lambda base: TaskDoneEnvelope(
        **base,
        target_id=PARENT_ID,
        status=args.status,
        summary=args.summary,
        cancel_requests=args.cancel_requests,
    )


def _usage_builder(args: ChildUsageArgs) -> Callable[[dict[str, Any]], AnyEnvelope]:
    """A ``usage`` runtime event with a reply inbox: the parent receipts it (counted, or
    refused), so the agent's shell knows its report was taken."""
    return lambda base: RuntimeEnvelope(
        **base, target_id=PARENT_ID, event="usage", tokens=args.tokens, cost=args.cost
    )


def _query_builder(args: ChildWatchdogArgs) -> Callable[[dict[str, Any]], AnyEnvelope]:
    """A watchdog agent's question (``query``): the parent answers it in the receipt."""
    fields = query_fields(args)
    return lambda base: QueryEnvelope(**base, target_id=PARENT_ID, **fields)


def _receipt(ack: AckEnvelope, message_id: str) -> dict[str, Any]:
    receipt: dict[str, Any] = {"message_id": message_id, "accepted": ack.accepted}
    if ack.request_id is not None:
        receipt["request_id"] = ack.request_id
    if ack.task_id is not None:
        receipt["task_id"] = ack.task_id
    if ack.result is not None:
        receipt["result"] = msgspec.to_builtins(ack.result)
    if ack.note is not None:
        receipt["note"] = ack.note
    return receipt


def _fail(error: ShepherdError, *, as_json: bool, out: TextIO, err: TextIO) -> int:
    if as_json:
        print(json.dumps({"error": {"code": error.code, "message": error.message}}), file=out)
    else:
        print(f"shepherd-child: {error.message} ({error.code})", file=err)
    return 2


def _send_command(
    args: argparse.Namespace, environ: Mapping[str, str], out: TextIO, err: TextIO
) -> int:
    op = next(op for op in ops.CHILD if op.name == args.command)
    checked = op.parsed(vars(args), lambda path: path)
    match checked:
        case ChildApprovalArgs():
            decision = ask(
                child_env_from(environ, bridge=False),
                checked,
                ack_timeout_s=_timeout(environ),
                publish=functools.partial(_publish_with_backoff, err=err),
            )
            print(json.dumps(decision) if args.json else op.view(decision), file=out)
            return 0 if decision["approved"] else 1
        case ChildMessageArgs():
            build = _message_builder(checked)
        case ChildDoneArgs():
            build = _done_builder(checked)
        case ChildUsageArgs():
            build = _usage_builder(checked)
        case ChildWatchdogArgs():
            build = _query_builder(checked)
        case ChildRateLimitedArgs() | ChildProviderErrorArgs():
            return report_refusal(op, checked, environ, as_json=args.json, out=out)
        case _:  # pragma: no cover - every child operation is one of the above
            raise AssertionError(args.command)
    env = child_env_from(environ, bridge=False)
    # the call as a tool span of the agent's task, when tracing is on (else None)
    span = tracing.command_span(
        environ,
        f"shepherd_{args.command}",
        session_id=env.session_id,
        agent_id=env.agent_id,
        agent_name=env.name,
    )
    try:
        tp = span.traceparent if span is not None else None
        ack = send_and_wait(env, build, timeout_s=_timeout(environ), traceparent=tp, err=err)
    except Exception as exc:  # told in the span, then as before
        if span is not None:
            span.end((getattr(exc, "code", type(exc).__name__), str(exc)))
        raise
    if not ack.accepted:
        info = ack.error or ErrorInfo(code="refused", message="refused by the shepherd")
        if span is not None:
            span.end((info.code, info.message))
        return _fail(error_from_info(info), as_json=args.json, out=out, err=err)
    if span is not None:
        span.end()
    # a watchdog agent's question: its answer; anything else: the receipt
    shown = ack.data if isinstance(checked, ChildWatchdogArgs) else _receipt(ack, ack.ack_for)
    print(json.dumps(shown) if args.json else op.view(shown), file=out)
    return 0


def run_captured(request: Request) -> tuple[int, str, str]:
    """Run one command as :func:`main` does, with the caller's environment and its output
    captured: what the bridge runs for its agent's ``shepherd-child`` calls
    (:mod:`actors.runtime.command_socket`)."""
    out, err = io.StringIO(), io.StringIO()
    code = main(request.argv, request.env, out=out, err=err)
    return code, out.getvalue(), err.getvalue()


def main(
    argv: Sequence[str] | None = None,
    environ: Mapping[str, str] | None = None,
    *,
    out: TextIO | None = None,
    err: TextIO | None = None,
) -> int:
    """Run one ``shepherd-child`` command; its output goes to ``out`` / ``err`` (default the
    process's stdout / stderr: the child's bridge runs forwarded commands with its own, see
    :mod:`actors.child.entry`)."""
    arguments = list(sys.argv[1:] if argv is None else argv)
    environ = os.environ if environ is None else environ
    out = sys.stdout if out is None else out
    err = sys.stderr if err is None else err
    # `--json` anywhere before `--` asks for JSON errors, even when parsing itself fails
    as_json = wants_json(arguments)
    try:
        args = _parser().parse_args(arguments)
    except InvalidArgument as exc:
        return _fail(exc, as_json=as_json, out=out, err=err)
    except SystemExit as exc:  # --help
        return exc.code if isinstance(exc.code, int) else 0
    if args.command == "run":
        # the bridge (and its adapters) only here: `message` and `done` start without them
        from actors.child.bridge import run_bridge

        return run_bridge(environ, commands=run_captured)
    try:
        return _send_command(args, environ, out, err)
    except ShepherdError as exc:
        return _fail(exc, as_json=args.json, out=out, err=err)
    except OSError as exc:
        return _fail(
            SessionUnavailable(f"cannot reach the session mailbox: {exc}"),
            as_json=args.json,
            out=out,
            err=err,
        )


if __name__ == "__main__":
    sys.exit(main())
