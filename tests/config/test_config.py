"""actors.surfaces.config: the two settings files (user, project), session overrides, and warnings.

Every test runs with HOME, XDG_CONFIG_HOME and the working directory inside tmp_path: the real
home directory is never read or written.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from actors.surfaces.config import (
    PROJECT_CONFIG,
    SESSION_SOURCE,
    config_paths,
    load_settings,
    parse_assignments,
    project_config_path,
    read_config_file,
    user_config_path,
)
from actors.testing import SimSession
from protocol.core.errors import InvalidArgument
from protocol.records.settings import Settings
from protocol.watchdog import DEFAULT_RESCUE_MESSAGE, WatchdogConfig


class Env:
    def __init__(self, tmp_path: Path) -> None:
        self.home = tmp_path / "home"
        self.xdg = tmp_path / "xdg"
        self.project = tmp_path / "project"
        for d in (self.home, self.xdg, self.project):
            d.mkdir()

    @property
    def user_file(self) -> Path:
        return self.xdg / "shepherd" / "config.toml"

    @property
    def project_file(self) -> Path:
        return self.project / ".shepherd" / "config.toml"

    def write_user(self, text: str | bytes) -> Path:
        return _write(self.user_file, text)

    def write_project(self, text: str | bytes) -> Path:
        return _write(self.project_file, text)


def _write(path: Path, text: str | bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text)
    return path


@pytest.fixture
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Env:
    e = Env(tmp_path)
    monkeypatch.setenv("HOME", str(e.home))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(e.xdg))
    monkeypatch.chdir(e.project)
    return e


# ----------------------------------------------------------------------------- paths


def test_paths_follow_xdg_config_home_and_the_working_directory(env: Env) -> None:
    assert user_config_path() == env.user_file
    assert project_config_path() == env.project_file
    assert project_config_path(env.home) == env.home / PROJECT_CONFIG
    assert config_paths() == config_paths(env.project)
    assert config_paths().user == env.user_file


def test_without_xdg_config_home_the_user_file_is_under_home(
    env: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("XDG_CONFIG_HOME")
    assert user_config_path() == env.home / ".config" / "shepherd" / "config.toml"
    # a relative XDG_CONFIG_HOME is ignored (XDG spec)
    assert user_config_path({"XDG_CONFIG_HOME": "rel", "HOME": str(env.home)}) == (
        env.home / ".config" / "shepherd" / "config.toml"
    )


def test_the_user_file_under_home_is_read(env: Env, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("XDG_CONFIG_HOME")
    _write(env.home / ".config" / "shepherd" / "config.toml", "fsync = true\n")
    settings, warnings = load_settings()
    assert settings.fsync is True
    assert warnings == []


# ----------------------------------------------------------------------------- layering


def test_no_files_give_defaults_and_no_warnings(env: Env) -> None:
    assert load_settings() == (Settings(), [])
    assert load_settings(env.project) == (Settings(), [])


def test_user_file_overrides_defaults_and_keeps_the_rest(env: Env) -> None:
    env.write_user("stale_wait_threshold_s = 30\ncoalesce_ms = 10\n")
    settings, warnings = load_settings()
    assert warnings == []
    assert settings.stale_wait_threshold_s == 30.0
    assert settings.coalesce_ms == 10.0
    assert settings.max_queue_depth == Settings().max_queue_depth


def test_project_wins_over_user_and_both_contribute(env: Env) -> None:
    env.write_user("stale_wait_threshold_s = 30\nfsync = true\n")
    env.write_project("stale_wait_threshold_s = 45\noutput_lines = 7\n")
    settings, warnings = load_settings()
    assert warnings == []
    assert settings.stale_wait_threshold_s == 45.0  # project wins
    assert settings.fsync is True  # from the user file
    assert settings.output_lines == 7  # from the project file


def test_project_dir_argument_is_used_instead_of_the_working_directory(
    env: Env, tmp_path: Path
) -> None:
    other = tmp_path / "other"
    _write(other / PROJECT_CONFIG, "output_lines = 9\n")
    env.write_project("output_lines = 7\n")
    assert load_settings(other)[0].output_lines == 9
    assert load_settings()[0].output_lines == 7


def test_explicit_user_file(env: Env, tmp_path: Path) -> None:
    env.write_user("output_lines = 1\n")
    explicit = _write(tmp_path / "mine.toml", "output_lines = 2\n")
    assert load_settings(user_file=explicit)[0].output_lines == 2
    assert load_settings(user_file=tmp_path / "missing.toml") == (Settings(), [])


def test_watchdog_table_layers_field_by_field(env: Env) -> None:
    env.write_user('[watchdog]\ncooldown_s = 90\nrescue_message = "from the user"\n')
    env.write_project("[watchdog]\nrepeat_threshold = 5\ncooldown_s = 120\n")
    settings, warnings = load_settings()
    assert warnings == []
    assert settings.watchdog == WatchdogConfig(
        cooldown_s=120.0, rescue_message="from the user", repeat_threshold=5
    )


def test_user_sets_cooldown_project_sets_threshold_both_apply(env: Env) -> None:
    env.write_user("[watchdog]\ncooldown_s = 10\n")
    env.write_project("[watchdog]\nrepeat_threshold = 4\n")
    wd = load_settings()[0].watchdog
    assert (wd.cooldown_s, wd.repeat_threshold) == (10.0, 4)
    assert wd.alert_mode == "main_only"


def test_session_overrides_win_nested_or_dotted(env: Env) -> None:
    env.write_user("[watchdog]\ncooldown_s = 10\n")
    env.write_project("stale_wait_threshold_s = 45\n[watchdog]\nrepeat_threshold = 4\n")
    settings, warnings = load_settings(
        overrides={
            "stale_wait_threshold_s": 5.0,
            "watchdog": {"repeat_threshold": 6},
            "watchdog.alert_mode": "both",
        }
    )
    assert warnings == []
    assert settings.stale_wait_threshold_s == 5.0
    assert settings.watchdog.repeat_threshold == 6
    assert settings.watchdog.alert_mode == "both"
    assert settings.watchdog.cooldown_s == 10.0  # the user's, untouched


def test_bad_session_overrides_warn_naming_the_session_and_key(env: Env) -> None:
    settings, warnings = load_settings(
        overrides={"bogus": 1, "watchdog.cooldown": 5, "output_lines": 3}
    )
    assert settings.output_lines == 3
    assert len(warnings) == 2
    assert all(w.startswith(SESSION_SOURCE) for w in warnings)
    assert "'bogus'" in warnings[0]
    assert "watchdog.cooldown" in warnings[1] and "cooldown_s" in warnings[1]  # did you mean


# ----------------------------------------------------------------------------- broken files


def test_broken_toml_warns_naming_the_file_and_start_up_goes_on(env: Env) -> None:
    env.write_user("output_lines = 5\n")
    path = env.write_project("stale_wait_threshold_s = \n[watchdog\n")
    settings, warnings = load_settings()  # never raises
    assert len(warnings) == 1
    assert str(path) in warnings[0] and "TOML" in warnings[0]
    assert settings.output_lines == 5  # the user layer still applied
    assert settings.stale_wait_threshold_s == Settings().stale_wait_threshold_s


def test_broken_user_file_falls_back_to_defaults(env: Env) -> None:
    path = env.write_user("this is not toml")
    settings, warnings = load_settings()
    assert settings == Settings()
    assert len(warnings) == 1 and str(path) in warnings[0]


def test_not_utf8_and_directory_files_warn(env: Env) -> None:
    user = env.write_user(b"output_lines = 5\n\xff\xfe\n")
    env.project_file.mkdir(parents=True)  # a directory where the file should be
    settings, warnings = load_settings()
    assert settings == Settings()
    assert len(warnings) == 2
    assert str(user) in warnings[0] and "UTF-8" in warnings[0]
    assert str(env.project_file) in warnings[1] and "directory" in warnings[1]


def test_read_config_file(env: Env) -> None:
    assert read_config_file(env.user_file) == (None, [])  # missing: no warning
    env.write_user("")
    assert read_config_file(env.user_file) == ({}, [])
    env.write_user("a = 1\n[t]\nb = 'x'\n")
    assert read_config_file(env.user_file) == ({"a": 1, "t": {"b": "x"}}, [])


def test_unknown_key_warns_naming_file_and_key_and_the_rest_applies(env: Env) -> None:
    path = env.write_project("stale_wait_treshold_s = 10\noutput_lines = 4\n")
    settings, warnings = load_settings()
    assert settings.output_lines == 4
    assert settings.stale_wait_threshold_s == Settings().stale_wait_threshold_s
    assert len(warnings) == 1
    assert str(path) in warnings[0] and "stale_wait_treshold_s" in warnings[0]


def test_unknown_watchdog_key_warns_naming_file_and_key(env: Env) -> None:
    path = env.write_user("[watchdog]\nrepeat_treshold = 9\ncooldown_s = 5\n")
    settings, warnings = load_settings()
    assert settings.watchdog.cooldown_s == 5.0
    assert settings.watchdog.repeat_threshold == 3
    assert len(warnings) == 1
    assert str(path) in warnings[0]
    assert "watchdog.repeat_treshold" in warnings[0]
    assert "repeat_threshold" in warnings[0]  # the hint


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ('stale_wait_threshold_s = "soon"\n', "stale_wait_threshold_s"),
        ("fsync = 1\n", "fsync"),
        ("max_queue_depth = 2.5\n", "max_queue_depth"),
        ("coalesce_ms = 1979-05-27\n", "coalesce_ms"),
        ("[watchdog]\nrepeat_threshold = 0\n", "watchdog.repeat_threshold"),
        ('[watchdog]\nalert_mode = "everyone"\n', "watchdog.alert_mode"),
        ('[watchdog]\nenabled = "no"\n', "watchdog.enabled"),
        ("[watchdog]\ncooldown_s = -1\n", "watchdog.cooldown_s"),
        ("[watchdog]\nidle_no_progress_s = inf\n", "watchdog.idle_no_progress_s"),
        ('[watchdog]\nrescue_message = ""\n', "watchdog.rescue_message"),
        ("watchdog = 5\n", "watchdog"),
    ],
)
def test_wrong_value_warns_naming_file_and_key_and_is_ignored(
    env: Env, text: str, key: str
) -> None:
    path = env.write_project(text + "output_lines = 4\n" if "[" not in text else text)
    settings, warnings = load_settings()
    assert len(warnings) == 1, warnings
    assert str(path) in warnings[0]
    assert key in warnings[0]
    assert settings.watchdog == WatchdogConfig()
    expected = Settings() if "[" in text else Settings(output_lines=4)
    assert settings == expected


def test_the_same_file_as_user_and_project_is_read_once(env: Env) -> None:
    path = env.write_project("bogus = 1\n")
    settings, warnings = load_settings(user_file=path)
    assert settings == Settings()
    assert len(warnings) == 1 and "bogus" in warnings[0]
    (env.xdg / "shepherd").symlink_to(env.project / ".shepherd")  # the same file, twice
    assert len(load_settings()[1]) == 1


def test_missing_working_directory_warns_and_goes_on(
    env: Env, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    env.write_user("output_lines = 3\n")
    gone = tmp_path / "gone"
    gone.mkdir()
    monkeypatch.chdir(gone)
    gone.rmdir()
    settings, warnings = load_settings()
    assert settings.output_lines == 3
    assert len(warnings) == 1 and "working directory" in warnings[0]


# ----------------------------------------------------------------------------- --set pairs


def test_parse_assignments_types_values() -> None:
    parsed = parse_assignments(
        ["stale_wait_threshold_s=30", "fsync=true", "watchdog.cooldown_s=5", "watchdog.enabled=no"]
    )
    assert parsed == {
        "stale_wait_threshold_s": 30.0,
        "fsync": True,
        "watchdog": {"cooldown_s": 5.0, "enabled": False},
    }
    settings, warnings = load_settings(overrides=parsed)
    assert warnings == []
    assert settings.watchdog.enabled is False and settings.watchdog.cooldown_s == 5.0


@pytest.mark.parametrize(
    ("pair", "named"),
    [
        ("novalue", "novalue"),
        ("=5", "=5"),
        ("bogus=1", "bogus"),
        ("fsync=maybe", "fsync"),
        ("watchdog.bogus=1", "bogus"),
        ("watchdog.repeat_threshold=0", "repeat_threshold"),
        ("other.x=1", "other"),
        ("watchdog=1", "watchdog"),
    ],
)
def test_parse_assignments_refuses_bad_pairs_naming_them(pair: str, named: str) -> None:
    with pytest.raises(InvalidArgument, match=named):
        parse_assignments([pair])


# ----------------------------------------------------------------------------- into a session


def test_loaded_settings_reach_the_sessions_watchdog(env: Env) -> None:
    env.write_user("[watchdog]\ncooldown_s = 90\n")
    env.write_project("[watchdog]\nrepeat_threshold = 5\n")
    settings, _ = load_settings()
    session = SimSession.simulated(1, settings=settings)
    try:
        config = session.watchdog("config")
    finally:
        session.shutdown()
    assert config["cooldown_s"] == 90.0
    assert config["repeat_threshold"] == 5
    assert config["rescue_message"] == DEFAULT_RESCUE_MESSAGE
