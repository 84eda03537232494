"""``spawn``: the operation table's entry that starts an agent, every adapter's options with it
(see :mod:`protocol.ops`; listed first among :mod:`protocol.ops.parent`'s)."""

from __future__ import annotations

from protocol.calls import api, views
from protocol.ops.nodes import NODE_PARAM
from protocol.ops.spec import Param, Tool, entry

__all__ = ["SPAWN", "check_params"]


def check_params(whose: str) -> dict[str, Param]:
    """The acceptance check's three fields (``delegate``'s, and ``spawn``'s default of them),
    saying ``whose`` check they are."""
    return {
        "verify": Param(
            description=(
                f"Acceptance check of {whose}: a shell command (1 to 4096 characters) run in "
                "the agent's directory when the agent says completed; exit status 0 accepts "
                "the claim, anything else sends the task back to the agent with the output's "
                "tail (after the last attempt it fails with verification_failed)"
            ),
            cli="--verify",
            metavar="CMD",
            help="acceptance check: a shell command that must exit 0 (1-4096 characters)",
        ),
        "verify_attempts": Param(
            description="Attempts the check gets (1 to 10, default 2)",
            cli="--verify-attempts",
            metavar="N",
            help="attempts of the check (1-10, default 2)",
        ),
        "verify_timeout_s": Param(
            description=(
                "Seconds one run of the check may take (above 0, at most 3600, default 600); "
                "past it the run is killed and counts as failed"
            ),
            cli="--verify-timeout",
            metavar="S",
            help="seconds one run of the check may take (at most 3600, default 600)",
        ),
    }


SPAWN = entry(
    "spawn",
    api.SpawnArgs,
    help="start an agent",
    view=views.spawned,
    params={
        "name": Param(
            description=(
                "Unique agent name: lowercase letter first, then letters, digits, '-' or '_' "
                "(at most 32); usable wherever an agent id is"
            ),
            cli="name",
        ),
        "adapter": Param(
            description="How the agent runs (default scripted)",
            choices=("scripted", "command", "pi-rpc", "acp"),
            cli="--adapter",
        ),
        "script": Param(
            description="Script file path (required for the scripted adapter)",
            cli="--script",
            metavar="FILE",
            help="script file (scripted adapter)",
            path="caller",
        ),
        "cmd": Param(
            description="Command template for the command adapter; {message} is the message",
            cli="--cmd",
            metavar="TEMPLATE",
            help="command template with {message}",
        ),
        "resume_cmd": Param(
            description="Command template for later turns (command adapter)",
            cli="--resume-cmd",
            metavar="TEMPLATE",
            help="template for later turns",
        ),
        "cwd": Param(
            description="Working directory of the agent process",
            cli="--cwd",
            metavar="DIR",
            help="the agent's working directory",
            path="caller",
        ),
        "description": Param(
            description="What this agent is for (shown in status)",
            cli="--description",
            help="what this agent is for",
        ),
        "pi": Param(
            description="Path of the Pi binary (pi-rpc adapter; default: installed Pi)",
            cli="--pi",
            metavar="PATH",
            help="the Pi binary (pi-rpc adapter)",
            path="cli",
        ),
        "models_json": Param(
            description="A Pi models.json declaring the provider and model (pi-rpc adapter)",
            cli="--models-json",
            metavar="FILE",
            help="a Pi models.json with the provider (pi-rpc)",
            path="cli",
        ),
        "provider": Param(
            description=(
                "The model provider the agent uses: Pi's provider (pi-rpc adapter); for any "
                "adapter, the name its rate-limit cool-downs and serve's "
                "--max-running-per-provider cap are shared by"
            ),
            cli="--provider",
            metavar="NAME",
            help="its model provider (Pi's, for pi-rpc; shared rate limits and caps by name)",
        ),
        "model": Param(
            description="Pi model id (pi-rpc adapter)",
            cli="--model",
            metavar="ID",
            help="the Pi model id (pi-rpc)",
        ),
        "acp_cmd": Param(
            description=(
                "Command line of an Agent Client Protocol agent, run over stdio (acp adapter), "
                "e.g. 'npx @zed-industries/codex-acp'; at most 4096 characters"
            ),
            cli="--acp-cmd",
            metavar="CMD",
            help="an ACP agent's command line (acp adapter)",
        ),
        # --- a git worktree of its own
        "worktree": Param(
            description=(
                "Run the agent in a git worktree of its own, on its own branch (default false); "
                "each task's completion then lists the files it changed"
            ),
            cli="--worktree",
            help="run the agent in a git worktree of its own",
        ),
        "repo": Param(
            description=(
                "The git repository the worktree is made from (with worktree; default: the "
                "session's working directory)"
            ),
            cli="--repo",
            metavar="DIR",
            help="the repository (--worktree)",
            path="caller",
        ),
        "branch": Param(
            description=(
                "The worktree's branch (with worktree; default shepherd/<session>/<name>); an "
                "existing branch is checked out, unless it is checked out elsewhere"
            ),
            cli="--branch",
            metavar="BRANCH",
            help="the worktree's branch (--worktree)",
        ),
        "base": Param(
            description="Where a new branch starts (with worktree; default the repository's HEAD)",
            cli="--base",
            metavar="REF",
            help="the new branch's start (--worktree)",
        ),
        "approve": Param(
            description=(
                "Tool calls that wait for your approval before they run, each TOOL:GLOB "
                "(pi-rpc: Pi's tool calls; acp: the agent's permission requests, TOOL its "
                "kind, and those matching no rule are allowed at once): 'bash:git push*' "
                "gates bash commands starting with git push; the glob is matched against the "
                "command, else a path argument, else (acp) the title, else the arguments as "
                "JSON (* any text, ? one character). At most 64 rules of 1000 characters"
            ),
            cli="--approve",
            metavar="TOOL:GLOB",
            help="gate matching Pi tool calls on your approval (repeatable)",
        ),
        "node": NODE_PARAM,
        **check_params("every task of the agent that names none"),
        "require_evidence": Param(
            description=(
                "Refuse the agent's done(completed) when its task made no tool call (default "
                "false): the agent is told and the task stays open. Scripted, pi-rpc and acp "
                "agents only (a command agent reports no tool calls: use verify)"
            ),
            cli="--require-evidence",
            help="refuse a completed done from a task that made no tool call",
        ),
        "role": Param(
            description=(
                "What the agent is for: 'worker' (default) or 'watchdog', which may also read "
                "the watchdog's view of the session's agents and alert the parent (read-only: "
                "it cannot steer, cancel or close anyone)"
            ),
            cli="--role",
            help="worker (default) or watchdog: reads the watchdog's view, alerts the parent",
        ),
        "sandbox": Param(
            description=(
                "Run the agent's processes in a sandbox (bubblewrap; default false): the file "
                "system read-only except its working directory, its own home and temporary "
                "directory and sandbox_rw; the session's files, the parent's home and other "
                "agents' worktrees hidden; no network unless sandbox_net; its own process "
                "namespace; the environment cut to a short list plus env. If the sandbox "
                "cannot be made the spawn is refused (sandbox_unavailable)"
            ),
            cli="--sandbox",
            help="run the agent in a sandbox (bubblewrap): see docs/guides/sandbox.md",
        ),
        "sandbox_rw": Param(
            description=(
                "More paths the sandboxed agent may write (existing, absolute, normalised, "
                "not /; at most 16 of 1024 characters)"
            ),
            cli="--sandbox-rw",
            metavar="PATH",
            help="a path the sandboxed agent may write (repeatable, at most 16)",
        ),
        "sandbox_net": Param(
            description="Let the sandboxed agent use the network (default false: none)",
            cli="--sandbox-net",
            help="let the sandboxed agent use the network",
        ),
        "sandbox_pids": Param(
            description=(
                "At most this many processes in the sandbox at once (0 to 65536, default 512; "
                "0: no bound); a fork beyond it fails inside the sandbox"
            ),
            cli="--sandbox-pids",
            metavar="N",
            help="at most N processes in the sandbox (default 512; 0: no bound)",
        ),
        "sandbox_tmp_mb": Param(
            description=(
                "Size of the sandbox's temporary directory /tmp, MiB (1 to 65536, default "
                "256); a write beyond it fails with 'no space left'"
            ),
            cli="--sandbox-tmp-mb",
            metavar="MIB",
            help="size of the sandbox's /tmp in MiB (default 256)",
        ),
        "env": Param(
            description=(
                "Names of the parent's environment variables passed into the sandbox (at most "
                "64; not SHEPHERD_*); everything else but a short list (PATH, locale, TERM, "
                "TZ) is left out"
            ),
            cli="--env",
            metavar="NAME",
            help="pass the parent's variable NAME into the sandbox (repeatable)",
        ),
    },
    tool=Tool(
        description=(
            "Start a new agent process in this Shepherd session and return its agent id. The "
            "agent starts idle; give it work with shepherd_delegate. Adapters: 'scripted' "
            "follows a script file (deterministic; demos and tests), 'command' runs any CLI "
            "agent once per turn from a command template, 'pi-rpc' runs the Pi coding agent, "
            "'acp' runs any Agent Client Protocol agent over stdio."
        ),
        prompt_snippet="Start a named agent process (scripted, command, pi-rpc or acp), get its id",
    ),
)
