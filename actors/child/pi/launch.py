"""Where Pi is and how it starts isolated: the binary (:func:`find_pi`), the flags and
environment that keep it from discovering anything of the user's or the project's, its agent
dir's ``models.json``, and the per-instance tag every process it starts inherits.

Rules (measured with Pi 0.73.1, npm ``@mariozechner/pi-coding-agent``):
- Only what Shepherd passes explicitly is loaded (:data:`PI_ARGS`; extensions with ``-e``).
- Pi gets an isolated ``PI_CODING_AGENT_DIR`` holding only ``models.json``, and
  ``PI_OFFLINE=1``: it never touches the user's ``~/.pi`` and never goes to the network by
  itself.
- Every process Pi starts inherits :data:`TAG_VAR` (Pi passes its environment on to tools),
  with a value unique to one Pi instance, so those processes can be found and killed even
  after Pi died and they were re-parented away from its tree.
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

__all__ = [
    "PI_ARGS",
    "SHEPHERD_CHILD_EXTENSION",
    "TAG_VAR",
    "find_pi",
    "new_tag",
    "pi_argv",
    "pi_environ",
    "write_models",
]

# The flags that keep Pi from discovering anything of the user's or the project's: only what
# Shepherd passes explicitly (-e extensions) is loaded.
PI_ARGS: tuple[str, ...] = (
    "--mode",
    "rpc",
    "--offline",
    "--no-session",
    "--no-extensions",
    "--no-skills",
    "--no-prompt-templates",
    "--no-themes",
    "--no-context-files",
)

_ACTORS = Path(__file__).resolve().parents[2]  # actors/child/pi/launch.py -> actors/
SHEPHERD_CHILD_EXTENSION = _ACTORS / "pi" / "shepherd_child.ts"
_REPO_PI = _ACTORS.parent / "scripts" / "pi" / "node_modules" / ".bin" / "pi"

#: The variable that tags every process of one Pi instance (see the module rules).
TAG_VAR = "SHEPHERD_PI_INSTANCE"
_instances = itertools.count(1)


def find_pi() -> Path | None:
    """Where the Pi binary is: ``$SHEPHERD_PI``, then the project's ``scripts/pi`` install
    (made by ``scripts/install_pi.sh``), then ``pi`` on ``PATH``; ``None`` if nowhere."""
    env = os.environ.get("SHEPHERD_PI")
    if env:
        return Path(env)
    if _REPO_PI.exists():
        return _REPO_PI
    found = shutil.which("pi")
    return Path(found) if found else None


def new_tag() -> str:
    """A :data:`TAG_VAR` value no other Pi instance of any process has."""
    return f"{os.getpid()}.{next(_instances)}"


def pi_argv(
    pi: str | os.PathLike[str],
    *,
    provider: str,
    model: str,
    extensions: Sequence[str | os.PathLike[str]],
    extra_args: Sequence[str],
    session_dir: str | os.PathLike[str] | None = None,
) -> list[str]:
    """Pi's command line in RPC mode, isolated, with ``-e`` for each extension; with
    ``session_dir``, Pi saves its session there (else it saves none)."""
    saving = ("--session-dir", os.fspath(session_dir)) if session_dir is not None else ()
    argv: list[str] = [
        os.fspath(pi),
        *(a for a in PI_ARGS if not (saving and a == "--no-session")),
        *saving,
        "--provider",
        provider,
        "--model",
        model,
    ]
    for ext in extensions:
        argv += ["-e", os.fspath(ext)]
    argv += list(extra_args)
    return argv


def pi_environ(env: Mapping[str, str] | None, agent_dir: Path, tag: str) -> dict[str, str]:
    """This process's environment, then ``env``, then what isolates and tags Pi."""
    return {
        **os.environ,
        **(env or {}),
        "PI_OFFLINE": "1",
        "PI_CODING_AGENT_DIR": str(agent_dir),
        TAG_VAR: tag,
    }


def write_models(
    agent_dir: Path, models: Mapping[str, Any] | str | os.PathLike[str] | None
) -> None:
    agent_dir.mkdir(parents=True, exist_ok=True)
    if isinstance(models, Mapping):
        (agent_dir / "models.json").write_text(json.dumps(models, indent=2))
    elif models is not None:
        shutil.copyfile(models, agent_dir / "models.json")
