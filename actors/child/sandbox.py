"""``spawn --sandbox``: every process an agent runs (a command turn, a scripted ``run`` step, Pi,
an ACP agent) starts inside a bubblewrap sandbox made by its bridge. The bridge itself stays
outside: it keeps the agent's Shepherd channel (mailbox or NATS, the capability, the
credentials), and the agent reaches it only through a socket bound into the sandbox.

Rules (the options' bounds and checks: :mod:`protocol.records.sandbox`):

1. **Fail closed.** The parent checks the sandbox can be made before the spawn is accepted
   (:func:`actors.child.sandbox_host.check_available`: bubblewrap runs this very shape once
   per process, and the process-count group can be made); a bridge that cannot make it exits
   before its agent starts. Nothing runs unsandboxed in its place: ``sandbox_unavailable``.
2. **Files**: the root read-only; hidden behind an empty read-only directory: the session's
   directory (journal, other agents' files and worktrees, credentials), the mailbox, the
   parent's home, ``/run``; writable: the working directory, a private home
   (``agents/<id>/home``), ``/tmp`` (a fresh one of ``sandbox_tmp_mb`` MiB; ``/dev`` has the
   same bound), the adapter's own state directory and ``sandbox_rw``. The most specific rule
   governs each path (a worktree inside the hidden session directory is writable; the
   session directory inside a writable checkout stays hidden); Python, this package and the
   ``PATH`` stay readable. An agent in a git worktree may also write its repository's git
   directory (its commits and branches; another worktree's files stay hidden, what others
   committed is in the shared repository).
3. **Processes**: its own process, IPC and host-name namespaces (it sees and signals only its
   own processes); no capability left (the ``/tmp`` bound is set first, then every capability
   is dropped before the agent's program runs, with ``no_new_privs``); at most
   ``sandbox_pids`` processes at once (a pids cgroup per agent, removed at close). The
   command line and the groups: :mod:`actors.child.sandbox_host`.
4. **Network**: none (a namespace of its own with loopback only) unless ``sandbox_net``.
5. **Environment**: only :data:`PASSED` names, the ``env`` names (from the bridge's own
   environment, which is the parent's), and what the adapter set for its process; no
   ``SHEPHERD_*`` but :data:`AGENT_KEEPS` (never the capability or the credentials' path).
6. **The channel**: ``shepherd-child`` inside the sandbox is forwarded to the bridge's sandbox
   socket (``/run/shepherd/bridge.sock``; :class:`~actors.runtime.command_socket.CommandServer`),
   which runs it with the bridge's own identity; of the caller's ``SHEPHERD_*`` it keeps only
   the call's timeout and the running turn's report path, as the bridge handed it out.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Final

import actors
from actors.child.sandbox_host import (
    bwrap,
    check_workdir,
    empty_group,
    inner,
    leftover_name,
    namespaces,
    pids_group,
    private_dir,
    probe,
)
from actors.runtime.command_socket import CommandServer, Request, Runner
from actors.runtime.command_wire import CHILD_COMMANDS, ENV_COMMAND_SOCKET, SANDBOX_SOCKET
from protocol.records.sandbox import SandboxView, view_of

if TYPE_CHECKING:
    from actors.child.env import ChildEnv

__all__ = ["AGENT_KEEPS", "INSIDE_SOCKET", "PASSED", "Sandbox", "sandbox_for"]

#: variables of the bridge's environment every sandboxed process gets (rule 5)
PASSED: Final = frozenset(
    {
        "PATH",
        "PYTHONPATH",
        "LANG",
        "LANGUAGE",
        "TERM",
        "TZ",
        "COLORTERM",
        "NO_COLOR",
        "USER",
        "LOGNAME",
    }
)
#: the ``SHEPHERD_*`` an agent's process may see (none is a secret)
AGENT_KEEPS: Final = frozenset(
    {
        "SHEPHERD_AGENT_ID",
        "SHEPHERD_AGENT_NAME",
        "SHEPHERD_CHILD_BIN",
        "SHEPHERD_COMMAND_SOCKET",
        "SHEPHERD_TURN",
        "SHEPHERD_TURN_REPORT",
        "SHEPHERD_TASK_ID",
        "SHEPHERD_CHILD_TIMEOUT_S",
    }
)
#: where the bridge's sandbox socket is, inside (rule 6)
INSIDE_SOCKET: Final = SANDBOX_SOCKET
INSIDE_DIR: Final = os.path.dirname(SANDBOX_SOCKET)
#: directories the sandbox has fresh and empty (what the programs it runs need there is
#: bound back: Python or the package installed under ``/tmp``)
_FRESH: Final = ("/tmp", "/run")
#: the rules' order for one path: the more permissive wins, but the session's own files
#: (``secret``) stay hidden even where a writable path names them
_RANK: Final = {"hide": 0, "ro": 1, "rw": 2, "secret": 3}


class Sandbox:
    """One agent's sandbox, made by its bridge (module rules)."""

    def __init__(
        self,
        view: SandboxView,
        *,
        environ: Mapping[str, str],
        cwd: str,
        agent_dir: Path,
        hidden: Sequence[str],
        runner: Runner | None,
        name: str,
        private: Sequence[str] = (),
    ) -> None:
        """``hidden``: the session's files, hidden whatever else is asked; ``private``: hidden
        unless a writable path asks for it (the parent's home, when the agent works there)."""
        self.view = view
        self._environ = dict(environ)
        self._cwd = os.path.realpath(cwd)
        self._home = agent_dir / "home"
        self._secret = _directories(hidden)
        self._hidden = self._secret + _directories(private)
        self._runner = runner
        self._name = name
        #: the report path of the turn running now, as handed to its process (rule 6)
        self._report: str | None = None
        self._group: Path | None = None
        self._socket_dir: str | None = None
        self._server: CommandServer | None = None

    def start(self) -> None:
        """Make what the sandbox needs outside: the home, the process bound, the socket."""
        probe(self.view.net)
        self._home.mkdir(mode=0o700, parents=True, exist_ok=True)
        if self.view.pids:
            self._group = pids_group(self._name, self.view.pids)
        self._socket_dir = private_dir(Path(tempfile.gettempdir()) / self._name)
        if self._runner is not None:
            path = os.path.join(self._socket_dir, "bridge.sock")
            self._server = CommandServer(
                self._run, CHILD_COMMANDS, program="shepherd-child", path=path
            )

    def close(self) -> None:
        if self._server is not None:
            self._server.close()
        if self._socket_dir is not None:
            shutil.rmtree(self._socket_dir, ignore_errors=True)
        if self._group is not None:
            empty_group(self._group)

    # -- the channel (rule 6)

    def _run(self, request: Request) -> tuple[int, str, str] | None:
        assert self._runner is not None
        env = {k: v for k, v in request.env.items() if not k.startswith("SHEPHERD_")}
        own = ((k, v) for k, v in self._environ.items() if k.startswith("SHEPHERD_"))
        env.update((k, v) for k, v in own if k != ENV_COMMAND_SOCKET)
        timeout = request.env.get("SHEPHERD_CHILD_TIMEOUT_S")
        if timeout is not None:
            env["SHEPHERD_CHILD_TIMEOUT_S"] = timeout
        report = request.env.get("SHEPHERD_TURN_REPORT")
        if report is not None and report == self._report:  # the one the bridge handed out
            env["SHEPHERD_TURN_REPORT"] = report
        return self._runner(Request(request.argv, env, request.cwd, request.announce))

    # -- a process

    def environ(self, env: Mapping[str, str]) -> dict[str, str]:
        """Rule 5: what of ``env`` (an adapter's environment for its process) gets in."""
        named = set(self.view.env)
        kept: dict[str, str] = {}
        for key, value in env.items():
            own = self._environ.get(key) == value  # the bridge's, not the adapter's
            if key.startswith("SHEPHERD_"):
                if key in AGENT_KEEPS:
                    kept[key] = value
            elif key in PASSED or key in named or key.startswith("LC_") or not own:
                kept[key] = value
        for key in named:
            if key in self._environ:
                kept.setdefault(key, self._environ[key])
        if self._server is not None:
            kept[ENV_COMMAND_SOCKET] = INSIDE_SOCKET
        kept["HOME"] = str(self._home)
        kept["TMPDIR"] = "/tmp"
        return kept

    def wrap(
        self, argv: Sequence[str], env: Mapping[str, str], *, rw: Sequence[str] = ()
    ) -> tuple[list[str], dict[str, str]]:
        """``argv`` as a sandboxed command line, and its environment (rules 2-5); ``rw``: the
        adapter's own state directories."""
        inside = self.environ(env)
        if "SHEPHERD_TURN_REPORT" in inside:  # a command agent's turn
            self._report = inside["SHEPHERD_TURN_REPORT"]
        command = [bwrap(), *namespaces(self.view.net), *self._mounts(rw)]
        command += ["--chdir", self._cwd, *inner(self.view.tmp_mb), *argv]
        if self._group is not None:  # join the group first: everything forked is counted
            join = 'echo $$ > "$0" || exit 125; exec "$@"'
            command = ["/bin/sh", "-c", join, str(self._group / "cgroup.procs"), *command]
        return command, inside

    def _rules(self, rw: Sequence[str]) -> dict[str, str]:
        rules: dict[str, str] = {}

        def put(path: str, kind: str) -> None:
            real = os.path.realpath(path)
            if real not in rules or _RANK[kind] > _RANK[rules[real]]:
                rules[real] = kind

        for path in self._hidden:
            put(path, "secret" if path in self._secret else "hide")
        readable = [sys.prefix, sys.base_prefix, os.path.dirname(sys.executable)]
        readable.append(str(Path(actors.__file__).resolve().parent.parent))
        readable += [p for p in self._environ.get("PATH", "").split(":") if p.startswith("/")]
        covered = [*self._hidden, *_FRESH]  # what the sandbox covers with its own
        for path in readable:
            if os.path.isdir(path) and any(_under(path, h) for h in covered):
                put(path, "ro")
        for path in (self._cwd, str(self._home), *self.view.rw, *rw):
            if os.path.exists(path):
                put(path, "rw")
        common = _git_common_dir(self._cwd)
        if common is not None:  # a worktree: its repository's git directory (commits, refs)
            put(common, "rw")
        return rules

    def _mounts(self, rw: Sequence[str]) -> list[str]:
        mounts = ["--ro-bind", "/", "/", "--proc", "/proc", "--dev", "/dev"]
        for path in _FRESH:
            mounts += ["--tmpfs", path]
        rules = self._rules(rw)
        for path in sorted(rules, key=lambda p: (p.count("/"), p)):
            kind = rules[path]
            if kind in ("hide", "secret"):
                mounts += ["--tmpfs", path]
            else:
                mounts += ["--bind" if kind == "rw" else "--ro-bind", path, path]
        if self._socket_dir is not None:
            mounts += ["--bind", self._socket_dir, INSIDE_DIR]
        for path in ["/run", *(p for p, kind in rules.items() if kind in ("hide", "secret"))]:
            mounts += ["--remount-ro", path]
        return mounts


def sandbox_for(env: ChildEnv, runner: Runner | None) -> Sandbox | None:
    """The sandbox a bridge makes for its agent, started (None: the agent asked for none)."""
    view = view_of(env.options)
    if view is None:
        return None
    check_workdir(os.getcwd())  # the parent checked; a bridge never relies on it
    if env.session_dir:
        agent_dir = Path(env.session_dir) / "agents" / env.agent_id
    else:  # a node's agent: a private directory of its own
        agent_dir = Path(tempfile.mkdtemp(prefix="shepherd-agent-"))
    sandbox = Sandbox(
        view,
        environ=os.environ,
        cwd=os.getcwd(),
        agent_dir=agent_dir,
        hidden=[env.session_dir or "", env.mailbox],
        private=[os.path.expanduser("~")],
        runner=runner,
        name=leftover_name(env.agent_id, os.getpid()),
    )
    sandbox.start()
    return sandbox


def _git_common_dir(path: str) -> str | None:
    """The repository's own git directory when ``path`` is a git worktree (its ``.git`` is a
    file naming the worktree's git directory, whose ``commondir`` leads to the repository's)."""
    try:
        with open(os.path.join(path, ".git"), encoding="utf-8") as f:
            line = f.read(4096).strip()
    except OSError:  # none, or a directory: a repository of its own, inside ``path``
        return None
    if not line.startswith("gitdir: "):
        return None
    gitdir = os.path.join(path, line.removeprefix("gitdir: "))
    try:
        with open(os.path.join(gitdir, "commondir"), encoding="utf-8") as f:
            common = os.path.join(gitdir, f.read(4096).strip())
    except OSError:
        return None
    return os.path.realpath(common) if os.path.isdir(common) else None


def _directories(paths: Sequence[str]) -> list[str]:
    """The existing directories of ``paths``, resolved; never the root."""
    found = (os.path.realpath(p) for p in paths if p and os.path.isdir(p))
    return [p for p in found if p != "/"]


def _under(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")
