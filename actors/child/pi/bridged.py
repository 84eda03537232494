"""Pi as a child of the bridge: its process, its agent dir and the environment its tools need.

Rules:
- Pi runs through :class:`~actors.child.pi.rpc.PiProcess` with the child tools extension
  (``-e actors/pi/shepherd_child.ts``: ``shepherd_message`` / ``shepherd_done``, never a
  parent tool) and the bridge's child environment (``SHEPHERD_*`` so the tools publish as this
  agent; ``SHEPHERD_CHILD_BIN`` = this installation's ``shepherd-child``, or a wrapper around
  ``python -m actors.child.entry`` written into the agent dir).
- Its agent dir is its own: ``<session>/agents/<agent>/pi`` (mode 0700, kept: it holds
  ``models.json``, Pi's ``stderr.log`` and Pi's own session files in ``sessions/``), or a
  temporary one, removed at close, without a session dir (and then Pi saves no session).
- Started again by ``serve --recover``, Pi continues its latest saved session
  (``--continue``), so the model keeps the context it had.
- Pi retries nothing by itself (:func:`no_retries`): its agent dir's ``settings.json`` turns
  off its auto-retry and its provider client's own retries (the OpenAI client retries a 429
  or a 5xx twice unless told not to, waiting out a Retry-After), so a refused turn reaches the
  bridge at once and Shepherd's shared cool-down decides when it runs again.
- It gets its own process group *inside the bridge's session* (:class:`BridgedPi`), so the
  parent's sweep of that session reaches Pi even if the bridge dies without closing it.
"""

from __future__ import annotations

import contextlib
import functools
import json
import shlex
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from actors.child.adapters import AgentContext
from actors.child.env import ChildEnv
from actors.child.pi.launch import SHEPHERD_CHILD_EXTENSION
from actors.child.pi.options import PiOptions
from actors.child.pi.rpc import PiProcess

__all__ = [
    "BridgedPi",
    "agent_dir_for",
    "no_retries",
    "start_bridged_pi",
    "stderr_note",
    "with_child_bin",
]


class BridgedPi(PiProcess):
    """Pi in its own process group but inside the bridge's session (``PiProcess`` makes it
    lead a session of its own): the parent sweeps the bridge's session when the bridge exits,
    and that sweep must reach Pi even if the bridge died without closing it."""

    own_session = False


def agent_dir_for(env: ChildEnv) -> tuple[Path, bool]:
    """This agent's Pi agent dir, made, and whether it is temporary (to remove at close)."""
    if env.session_dir:
        path = Path(env.session_dir) / "agents" / env.agent_id / "pi"
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
        return path, False
    return Path(tempfile.mkdtemp(prefix="shepherd-pi-")), True


def with_child_bin(environ: dict[str, str], agent_dir: Path) -> dict[str, str]:
    """``environ`` (the bridge's child environment), with a ``SHEPHERD_CHILD_BIN`` for sure."""
    if not environ.get("SHEPHERD_CHILD_BIN"):
        # no `shepherd-child` console script next to this Python: a wrapper that runs it
        root = str(Path(__file__).resolve().parents[3])  # the directory holding actors/
        wrapper = agent_dir / "shepherd-child"
        wrapper.write_text(
            "#!/bin/sh\n"
            f"PYTHONPATH={shlex.quote(root)}${{PYTHONPATH:+:$PYTHONPATH}} exec "
            f'{shlex.quote(sys.executable)} -m actors.child.entry "$@"\n'
        )
        wrapper.chmod(0o700)
        environ["SHEPHERD_CHILD_BIN"] = str(wrapper)
    return environ


def no_retries(agent_dir: Path) -> None:
    """Write Pi's ``settings.json`` in ``agent_dir`` with its retries off (the module rules),
    keeping whatever else a kept agent dir's file says."""
    path = agent_dir / "settings.json"
    settings: dict[str, Any] = {}
    with contextlib.suppress(OSError, ValueError):
        loaded = json.loads(path.read_text(encoding="utf-8"))
        if isinstance(loaded, dict):
            settings = loaded
    retry = settings.get("retry")
    retry = retry if isinstance(retry, dict) else {}
    provider = retry.get("provider")
    provider = provider if isinstance(provider, dict) else {}
    settings["retry"] = {**retry, "enabled": False, "provider": {**provider, "maxRetries": 0}}
    path.write_text(json.dumps(settings, indent=2))


def start_bridged_pi(
    opts: PiOptions,
    agent_dir: Path,
    ctx: AgentContext,
    *,
    on_event: Callable[[dict[str, Any]], None],
    on_exit: Callable[[int], None],
    keep_session: bool = False,
    resume: bool = False,
) -> BridgedPi:
    """Start Pi as the module rules say, in the agent's sandbox if it has one (raises
    ``OSError``, ``PiError`` or ``SandboxUnavailable`` if it cannot)."""
    no_retries(agent_dir)
    environ = with_child_bin(ctx.child_environ(), agent_dir)
    return BridgedPi(
        opts.pi,
        models=opts.models_json,
        provider=opts.provider,
        model=opts.model,
        extensions=[SHEPHERD_CHILD_EXTENSION],
        cwd=opts.cwd,
        env=environ,
        agent_dir=agent_dir,
        on_event=on_event,
        on_exit=on_exit,
        stderr_path=agent_dir / "stderr.log",
        session_dir=agent_dir / "sessions" if keep_session else None,
        extra_args=["--continue"] if keep_session and resume else [],
        wrap=functools.partial(ctx.sandboxed, rw=(str(agent_dir),)),
    )


def stderr_note(pi: PiProcess | None) -> str:
    """The end of Pi's stderr, to append to an error text ('' when there is none)."""
    if pi is None:
        return ""
    with contextlib.suppress(OSError):
        tail = pi.stderr_text()[-1500:].strip()
        if tail:
            return f"; its stderr ends:\n{tail}"
    return ""
