"""``shepherd node --nats-creds FILE`` and ``python -m actors.transports.nats.auth DIR --node
HOST``: hostile values are refused naming the option before anything connects
(actors/transports/nats/node_login.py); minting never overwrites and names its own bad values
(actors/transports/nats/auth.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from actors.runtime.transport import PARENT_INBOX
from actors.transports.nats.auth import Authority, main, make_authority, write_private
from actors.transports.nats.node_login import load_node_login
from actors.transports.nats.server import free_port
from protocol.core.errors import InvalidArgument
from protocol.core.ids import IdKind, make_id
from protocol.core.limits import MAX_NATS_CREDS_CHARS, MAX_OPTION_CHARS

AGENT = make_id(IdKind.AGENT, "a1a1a1a1a1a1a1a1")
SESSION = make_id(IdKind.SESSION, "5e5e5e5e5e5e5e5e")


@pytest.fixture
def authority(tmp_path: Path) -> Authority:
    make_authority(tmp_path / "auth")
    return Authority.load(str(tmp_path / "auth"))


def _file(tmp_path: Path, name: str, text: str, mode: int = 0o600) -> str:
    path = tmp_path / name
    write_private(path, text)
    os.chmod(path, mode)
    return str(path)


def _cases(tmp_path: Path, authority: Authority) -> dict[str, tuple[str, str]]:
    """name -> (the option's value, words the refusal must hold)"""
    node = authority.node_credentials("n1")
    (tmp_path / "a-dir").mkdir(mode=0o700)
    os.symlink(_file(tmp_path, "real.creds", node), tmp_path / "link.creds")
    jwt_only = node.split("************************* IMPORTANT")[0]
    binary = tmp_path / "bin.creds"
    write_private(binary, "")
    binary.write_bytes(b"\xff\xfe\x00garbage")
    return {
        "empty": ("", "is empty"),
        "blank": ("   ", "is empty"),
        "long": ("x" * (MAX_OPTION_CHARS + 1), f"longer than {MAX_OPTION_CHARS}"),
        "nul": ("a\0b", "NUL"),
        "missing": (str(tmp_path / "nothing.creds"), "does not exist"),
        "directory": (str(tmp_path / "a-dir"), "is not a file"),
        "symlink": (str(tmp_path / "link.creds"), "symbolic link"),
        "readable": (_file(tmp_path, "open.creds", node, 0o644), "readable by others"),
        "group": (_file(tmp_path, "group.creds", node, 0o640), "readable by others"),
        "huge": (_file(tmp_path, "huge.creds", "x" * (MAX_NATS_CREDS_CHARS + 1)), "larger than"),
        "garbage": (_file(tmp_path, "garbage.creds", "hello\n"), "not a NATS .creds"),
        "binary": (str(binary), "cannot be read as text"),
        "no seed": (_file(tmp_path, "jwt.creds", jwt_only), "not a NATS .creds"),
        "bad jwt": (
            _file(tmp_path, "badjwt.creds", node.replace(node.split("\n")[1], "e30.e30.e30")),
            "not a readable NATS .creds",
        ),
        "other seed": (
            _file(
                tmp_path,
                "swap.creds",
                node.replace(
                    node.split("-----BEGIN USER NKEY SEED-----\n")[1].split("\n", 1)[0],
                    authority.node_credentials("n1")
                    .split("-----BEGIN USER NKEY SEED-----\n")[1]
                    .split("\n", 1)[0],
                ),
            ),
            "its seed is not its JWT's key",
        ),
        "child": (
            _file(
                tmp_path, "child.creds", authority.child_credentials(SESSION, AGENT, PARENT_INBOX)
            ),
            "a child's credentials, not node n1's",
        ),
        "other node": (
            _file(tmp_path, "n2.creds", authority.node_credentials("n2")),
            "not node n1's",
        ),
        "parent": (
            _file(tmp_path, "parent.creds", authority.parent_credentials()),
            "not node n1's",
        ),
    }


def test_hostile_nats_creds_are_refused_naming_the_option(
    tmp_path: Path, authority: Authority
) -> None:
    for case, (raw, words) in _cases(tmp_path, authority).items():
        with pytest.raises(InvalidArgument) as caught:
            load_node_login(raw, "n1")
        message = caught.value.message
        assert message.startswith("--nats-creds: ") and words in message, (case, message)
        assert "SU" not in message.replace("SUB", ""), (case, message)  # never a seed shown
    good = load_node_login(_file(tmp_path, "good.creds", authority.node_credentials("n1")), "n1")
    assert good.connect_options()["inbox_prefix"] == "_INBOX_NODE_n1"
    assert "SU" not in repr(good)


@pytest.mark.parametrize("case", ["missing", "readable", "child", "garbage"])
def test_the_node_command_refuses_them_before_connecting(
    tmp_path: Path, authority: Authority, case: str
) -> None:
    """Against a port where nothing listens: a connection attempt would end in
    ``session_unavailable`` after its bound, the refusal comes first."""
    raw, words = _cases(tmp_path, authority)[case]
    argv = ["node", "--transport", f"nats://127.0.0.1:{free_port()}", "--name", "n1"]
    done = subprocess.run(
        [sys.executable, "-m", "actors.surfaces.cli", *argv, "--nats-creds", raw, "--json"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    error = json.loads(done.stdout)["error"]
    assert (done.returncode, error["code"]) == (2, "invalid_argument")
    assert error["message"].startswith("--nats-creds: ") and words in error["message"]


def test_minting_a_node_user_never_overwrites_and_refuses_bad_names(
    tmp_path: Path, authority: Authority, capsys: pytest.CaptureFixture[str]
) -> None:
    auth = str(authority.directory)
    assert main([auth, "--node", "n1"]) == 0
    made = Path(capsys.readouterr().out.strip())
    assert made == authority.directory / "nodes" / "n1.creds"
    assert load_node_login(str(made), "n1").inbox_prefix == "_INBOX_NODE_n1"
    before = made.read_text()
    assert main([auth, "--node", "n1"]) == 2
    assert "never overwritten" in capsys.readouterr().err and made.read_text() == before
    out = tmp_path / "elsewhere.creds"
    assert main([auth, "--node", "n2", "--out", str(out)]) == 0
    assert Path(capsys.readouterr().out.strip()) == out
    assert oct(out.stat().st_mode & 0o777) == oct(0o600)
    for bad, words in (
        ("any", "'any' is not a node name"),
        ("A.B", "is not a node name"),
        ("", "is not a node name"),
        ("x" * 64, "is not a node name"),
    ):
        assert main([auth, "--node", bad, "--out", str(tmp_path / "x.creds")]) == 2
        err = capsys.readouterr().err
        assert "--node" in err and words in err, err
    assert main([str(tmp_path / "nothing"), "--node", "n3"]) == 2
    assert "--nats-auth" in capsys.readouterr().err
    for argv in ([auth, "--node"], [auth, "--out", "x", "--node", "n1"], [auth, "--nod", "n1"]):
        assert main(argv) == 2
        assert "usage" in capsys.readouterr().err
