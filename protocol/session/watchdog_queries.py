"""What an agent spawned with role ``watchdog`` may ask the parent: a ``query`` envelope.

Rules:

1. **Only a watchdog agent is answered.** A query from an agent of any other role is refused
   (``forbidden_sender``, naming its role). A watchdog agent can read the watchdog's view and
   alert the parent, nothing more: no query steers an agent, messages as the parent, cancels,
   closes or changes the watchdog's settings (those stay the parent's operations).
2. **The arguments fit the question** (``invalid_argument`` otherwise):

   =========  ===============================================================  ==============
   op         what it answers                                                  takes
   =========  ===============================================================  ==============
   status     the watchdog's state (enabled, paused, alert mode, alerts sent)  nothing
              and its targets, the most recently active first
   events     an agent's newest normalised tool events                         agent, [limit]
   stuck      the detector's verdict on one agent, or on every listed agent    [agent]
   alert      a ``watchdog_alert`` to the parent about an agent, in the        agent, text
              watchdog agent's words with the detector's verdict
   =========  ===============================================================  ==============

   The agent is one of this session's, by name or id (``invalid_handle`` otherwise; a closed
   agent's history is still readable). The bounds (``limit`` 1-200, default 20; ``text``
   1-4000 characters) are the envelope's (:mod:`protocol.core.limits`): a value out of them
   fails decoding, quarantined and told like any malformed envelope. An alert's text must not
   be blank.
3. **The answer is the receipt.** A query names the one-shot inbox its answer goes to (a
   query without one is refused); the watchdog answers in order after everything the session
   told it before the query (``WatchdogQuery``), fitted to one envelope.
4. An alert is told to the parent like the watchdog's own (``[Watchdog Alert]``, naming the
   watchdog agent in ``reported_by``), unless the watchdog is disabled or paused (answered
   ``alerted: false`` with the reason). Nothing is killed or steered.
"""

from __future__ import annotations

from protocol.core.errors import ForbiddenSender, InvalidArgument
from protocol.core.limits import answer_budget
from protocol.session import outbox
from protocol.session.effects import Effect, Publish, WatchdogQuery
from protocol.session.state import AgentRow, Ctx, SessionState
from protocol.wire.envelopes import AckEnvelope, QueryEnvelope

__all__ = ["query"]

#: each question: (it needs an agent, it may name one, it takes a limit, it takes a text)
_TAKES: dict[str, tuple[bool, bool, bool, bool]] = {
    "status": (False, False, False, False),
    "events": (True, True, True, False),
    "stuck": (False, True, False, False),
    "alert": (True, True, False, True),
}


def query(s: SessionState, row: AgentRow, env: QueryEnvelope, cx: Ctx) -> list[Effect]:
    """The effects of a watchdog agent's question (module rules); raises the refusal."""
    if row.role != "watchdog":
        raise ForbiddenSender(
            f"{row.name} is a {row.role} agent: only an agent spawned with role watchdog "
            "(spawn --role watchdog) may ask the watchdog"
        )
    if env.reply_inbox is None:
        raise InvalidArgument("a watchdog query names the one-shot inbox its answer goes to")
    needs_agent, takes_agent, takes_limit, takes_text = _TAKES[env.op]
    if needs_agent and env.agent is None:
        raise InvalidArgument(f"watchdog {env.op}: name the agent (its name or id)")
    if env.agent is not None and not takes_agent:
        raise InvalidArgument(f"watchdog {env.op} takes no agent")
    if env.limit is not None and not takes_limit:
        raise InvalidArgument(f"watchdog {env.op} takes no limit")
    if takes_text and (env.text is None or not env.text.strip()):
        raise InvalidArgument("the alert's text is empty")
    if env.text is not None and not takes_text:
        raise InvalidArgument(f"watchdog {env.op} takes no text")
    agent_id = s.agent(env.agent).agent_id if env.agent is not None else None
    (receipt,) = outbox.ack(s, cx, env)
    assert isinstance(receipt, Publish)
    assert isinstance(receipt.envelope, AckEnvelope)
    return [
        WatchdogQuery(
            asker_id=row.agent_id,
            asker_name=row.name,
            op=env.op,
            agent_id=agent_id,
            limit=env.limit,
            text=env.text,
            inbox=receipt.inbox,
            receipt=receipt.envelope,
            budget=answer_budget(s.settings.max_envelope_bytes),
        )
    ]
