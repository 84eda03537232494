"""Settings files: read the two TOML layers and fold them onto the defaults.

Order, later wins::

    defaults  <-  user file     $XDG_CONFIG_HOME/shepherd/config.toml (~/.config/... without it)
              <-  project file  <project dir, default the working directory>/.shepherd/config.toml
              <-  session overrides (a mapping, e.g. from ``--set`` options)

Rules
-----
* A missing file is not an error: that layer is simply absent.
* A broken file (bad TOML, not UTF-8, unreadable, a directory) gives one warning naming the
  file and is ignored as a whole; the other layers still apply.
* An unknown key or a wrong value gives one warning naming the file and the key; only that
  key is ignored. Nothing here ever raises for a bad file: start-up goes on with defaults.
* Tables layer field by field: a user file setting ``[watchdog] cooldown_s`` and a project file
  setting ``[watchdog] repeat_threshold`` both apply.
* Session overrides may be nested (``{"watchdog": {"cooldown_s": 5}}``) or dotted
  (``{"watchdog.cooldown_s": 5}``); :func:`parse_assignments` turns ``KEY=VALUE`` strings into
  such a mapping with typed values.
* The files are read once, when asked; nothing watches them, nothing writes them.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import msgspec

from protocol.core.errors import InvalidArgument
from protocol.records.settings import Settings, apply_overrides, parse_value
from protocol.watchdog.config import parse_config_value

__all__ = [
    "PROJECT_CONFIG",
    "SESSION_SOURCE",
    "ConfigPaths",
    "config_paths",
    "load_settings",
    "parse_assignments",
    "project_config_path",
    "read_config_file",
    "user_config_path",
]

#: the project file, relative to the project directory
PROJECT_CONFIG = Path(".shepherd") / "config.toml"
#: how warnings name the session layer
SESSION_SOURCE = "session overrides"


class ConfigPaths(msgspec.Struct, frozen=True, kw_only=True):
    user: Path | None  # None: no home directory to look in
    project: Path | None  # None: no working directory (it was removed)


def user_config_path(environ: Mapping[str, str] | None = None) -> Path | None:
    """``$XDG_CONFIG_HOME/shepherd/config.toml``, else ``~/.config/shepherd/config.toml``.

    A relative ``XDG_CONFIG_HOME`` is ignored, as the XDG spec says. ``None`` when there is no
    home directory to expand ``~`` with.
    """
    env = os.environ if environ is None else environ
    xdg = env.get("XDG_CONFIG_HOME", "")
    if xdg and os.path.isabs(xdg):
        return Path(xdg) / "shepherd" / "config.toml"
    home = env.get("HOME") or os.path.expanduser("~")
    if not home or not os.path.isabs(home):
        return None
    return Path(home) / ".config" / "shepherd" / "config.toml"


def project_config_path(project_dir: Path | str | None = None) -> Path | None:
    """``<project_dir>/.shepherd/config.toml``; the working directory when none is given."""
    if project_dir is None:
        try:
            project_dir = Path.cwd()
        except OSError:  # the working directory was removed
            return None
    return Path(project_dir) / PROJECT_CONFIG


def config_paths(project_dir: Path | str | None = None) -> ConfigPaths:
    return ConfigPaths(user=user_config_path(), project=project_config_path(project_dir))


def read_config_file(path: Path) -> tuple[dict[str, Any] | None, list[str]]:
    """One settings file as a table: ``(None, [])`` when it does not exist, ``(None, [warning])``
    when it cannot be used, ``(table, [])`` otherwise."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None, []
    except IsADirectoryError:
        return None, [f"{path}: is a directory, not a settings file; ignored"]
    except OSError as exc:
        return None, [f"{path}: cannot be read ({exc.strerror or exc}); ignored"]
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        return None, [f"{path}: is not UTF-8 text ({exc.reason} at byte {exc.start}); ignored"]
    try:
        table = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        return None, [f"{path}: is not valid TOML ({exc}); the whole file is ignored"]
    except RecursionError:
        return None, [f"{path}: is nested too deeply to read; the whole file is ignored"]
    return table, []


def _nest(mapping: Mapping[str, Any], source: str) -> tuple[dict[str, Any], list[str]]:
    """``{"watchdog.cooldown_s": 5}`` -> ``{"watchdog": {"cooldown_s": 5}}`` (one level)."""
    nested: dict[str, Any] = {}
    warnings: list[str] = []
    for key, value in mapping.items():
        if not isinstance(key, str):
            warnings.append(f"{source}: setting {key!r} is not a name; ignored")
            continue
        table, dot, field = key.partition(".")
        if not dot:
            if isinstance(value, Mapping) and isinstance(nested.get(key), dict):
                nested[key].update(value)
            else:
                nested[key] = dict(value) if isinstance(value, Mapping) else value
            continue
        inner = nested.setdefault(table, {})
        if not isinstance(inner, dict):
            warnings.append(f"{source}: setting {key!r} conflicts with {table!r}; ignored")
            continue
        inner[field] = value
    return nested, warnings


def load_settings(
    project_dir: Path | str | None = None,
    *,
    user_file: Path | str | None = None,
    overrides: Mapping[str, Any] | None = None,
) -> tuple[Settings, list[str]]:
    """Defaults, then the user file, then the project file, then ``overrides``.

    Returns the settings and every warning (each names its file, or ``session overrides``,
    and the key). Never raises for a bad file or key.
    """
    settings = Settings()
    warnings: list[str] = []
    user = Path(user_file) if user_file is not None else user_config_path()
    project = project_config_path(project_dir)
    if project is None:
        warnings.append("the working directory is gone: no project settings file was read")
    seen: set[Path] = set()
    for given in (user, project):
        if given is None:
            continue
        path = given.expanduser().absolute()
        try:
            identity = path.resolve()
        except (OSError, RuntimeError):  # a symlink loop: reading it will warn
            identity = path
        if identity in seen:  # one file given as both layers (a symlink, --user-file)
            continue
        seen.add(identity)
        table, file_warnings = read_config_file(path)
        warnings.extend(file_warnings)
        if table is not None:
            settings, layer_warnings = apply_overrides(settings, table, str(path))
            warnings.extend(layer_warnings)
    if overrides:
        nested, nest_warnings = _nest(overrides, SESSION_SOURCE)
        warnings.extend(nest_warnings)
        settings, layer_warnings = apply_overrides(settings, nested, SESSION_SOURCE)
        warnings.extend(layer_warnings)
    return settings, warnings


def parse_assignments(pairs: Iterable[str]) -> dict[str, Any]:
    """``["stale_wait_threshold_s=30", "watchdog.cooldown_s=5"]`` -> a nested mapping of typed
    values for :func:`load_settings`'s ``overrides``. A malformed pair, an unknown key or a bad
    value raises :class:`~protocol.core.errors.InvalidArgument` naming it (these come from a command
    line, where failing loudly is right)."""
    result: dict[str, Any] = {}
    for pair in pairs:
        key, eq, text = pair.partition("=")
        key = key.strip()
        if not eq or not key:
            raise InvalidArgument(f"expected KEY=VALUE, got {pair!r}")
        table, dot, field = key.partition(".")
        if dot:
            if table != "watchdog":
                raise InvalidArgument(f"unknown settings table {table!r} in {pair!r}")
            result.setdefault("watchdog", {})[field] = parse_config_value(field, text)
            continue
        if key == "watchdog":
            raise InvalidArgument("set watchdog settings one by one: watchdog.KEY=VALUE")
        try:
            result[key] = parse_value(Settings, key, text)
        except KeyError:
            raise InvalidArgument(f"unknown setting {key!r}") from None
        except msgspec.ValidationError as exc:
            raise InvalidArgument(f"setting {key!r}: {exc} (got {text!r})") from None
    return result
