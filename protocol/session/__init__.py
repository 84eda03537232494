"""The session's rules, sans-IO: everything that affects the session's state lives here.

Each rule is a function of the session's state (:mod:`~protocol.session.state`) and an event
(an operation of the parent, an envelope from an agent, what an agent's actor reports, a
timer), with the time and an id source (:class:`~protocol.session.state.Ctx`). It checks,
then changes the state, and returns the **effects** the caller must run, in order
(:mod:`~protocol.session.effects`). It never does I/O, never reads a clock, never imports the
actors. The broker actor (``actors/session/broker.py``) matches a message, calls the rule and
runs the effects; the tests call the rules directly. A watcher's rules are a function of that
watcher's own state, not the session's: its actor (``actors/session/watcher.py``) calls them.

==============  ============================================================================
module          rules
==============  ============================================================================
``agents``      names; the process-state table; exits and closes; a turn's output tail
``tasks``       one active task per agent; only the owner's ``done``; first terminal event
                wins; settlement; a turn that ends without ``done``
``task``        one task's own rules (its actor's): waiting transitions; the first ending
                wins; its deadline and budget minutes, on its own timer; a checked claim
                verified first
``routing``     who may message whom; only the target replies; late and second replies
``requests``    opening and closing requests; wait-for cycles; reply deadlines
``approvals``   approval requests to the parent: opening, approve/deny, tool-gating rules
``decisions``   an approval's outcome when it closes, and the blocked call told of it
``stale``       one stale-wait notification per waiting episode
``budgets``     limits granted within the session's remainder; usage counted; one soft
                warning per task and limit; the hard limit ends the task (budget_exceeded)
``checks``      a claimed completion checked (``verifying``): the check run, a failed attempt
                told to both sides, a restart running it again
``claims``      a completion with no sign of work told once (``unverified_claim``), or refused
                (``spawn --require-evidence``)
``admission``   at most ``max_running`` tasks handed over at once (a provider's, a node's);
                the queue's order; a freed slot filled at once
``providers``   one rate-limit cool-down per provider, shared by its agents; provider errors
                retried with backoff, then the task failed (``provider_error``)
``pacing``      a provider refused for its rate limit is paced: a token per turn the session
                starts for it, at a pace learned from what got through
``merges``      a merge of an agent's branch journaled planned then done; a restart says which
``collisions``  two live agents changing one file within a window, told once with the parent
``watchers``    who watches which task: a result routed once to each watcher subscribed
``watcher``     one watcher's own rules (its actor's): exactly once; coalescing; done
``inbound``     envelopes from agents (receipts); failures after acceptance
``outbox``      what the parent sends agents (receipts, notices); envelopes fit
``status``      the status answer, a pure view
``restore``     a restart: a fold of the journal, then the same effects
``calls``       each operation, timer and helper's report mapped to its rule
==============  ============================================================================

The machines themselves stay where they are: tasks in :mod:`protocol.records.tasks`, requests
in :mod:`protocol.records.requests`; the process machine is a table in ``agents``.
"""
