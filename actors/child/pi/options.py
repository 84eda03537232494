"""The ``pi-rpc`` adapter's options (``SHEPHERD_AGENT_OPTIONS``), checked: a bad one is
``invalid_argument`` and the bridge exits 2 before Pi is started.

Options::

    {"pi": PATH,                 # the Pi binary (default: find_pi(): $SHEPHERD_PI, the
                                 # project's scripts/pi install, then `pi` on PATH)
     "models_json": FILE,        # a Pi models.json (relative paths: the agent's cwd)
     "provider": NAME,           # default: the first provider of models_json
     "model": ID,                # default: that provider's first model
     "cwd": DIR,                 # Pi's working directory (default: the bridge's)
     "startup_timeout_s": 30}    # how long Pi may take to answer its first command

Without ``models_json`` both ``provider`` and ``model`` are required: one of Pi's built-in
providers, its key taken from the environment. Other keys (``script``, ``description``, ...)
are ignored.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from actors.child.pi.launch import find_pi
from protocol.core.errors import InvalidArgument

__all__ = ["DEFAULT_STARTUP_TIMEOUT_S", "PiOptions"]

DEFAULT_STARTUP_TIMEOUT_S = 30.0


class PiOptions:
    """The adapter's options, checked (a bad one is ``invalid_argument``, bridge exit 2)."""

    def __init__(self, cwd: str, options: Mapping[str, Any]) -> None:
        self.pi = self._pi(cwd, options.get("pi"))
        self.cwd = str(Path(cwd, self._str(options, "cwd") or "."))
        if not os.path.isdir(self.cwd):
            raise InvalidArgument(f'option "cwd": {self.cwd} is not a directory')
        provider = self._str(options, "provider")
        model = self._str(options, "model")
        self.models_json: Path | None = None
        models_json = self._str(options, "models_json")
        if models_json is not None:
            self.models_json = Path(cwd, models_json)
            provider, model = self._from_models(self.models_json, provider, model)
        elif provider is None or model is None:
            raise InvalidArgument(
                'the pi-rpc adapter needs "models_json" (a Pi models.json), or both "provider" '
                'and "model" of a provider Pi knows'
            )
        self.provider: str = provider
        self.model: str = model
        timeout = options.get("startup_timeout_s", DEFAULT_STARTUP_TIMEOUT_S)
        if not isinstance(timeout, int | float) or not 0 < timeout <= 600:
            raise InvalidArgument('option "startup_timeout_s" must be in (0, 600] seconds')
        self.startup_timeout_s = float(timeout)

    @staticmethod
    def _str(options: Mapping[str, Any], key: str) -> str | None:
        value = options.get(key)
        if value is None:
            return None
        if not isinstance(value, str) or not value.strip():
            raise InvalidArgument(f'option "{key}" must be a non-empty string')
        return value.strip()

    @staticmethod
    def _pi(cwd: str, value: object) -> Path:
        if value is None:
            found = find_pi()
            if found is None:
                raise InvalidArgument(
                    "the Pi coding agent is not installed: run scripts/install_pi.sh, or pass "
                    "--pi PATH (or set SHEPHERD_PI)"
                )
            path = found
        elif not isinstance(value, str) or not value.strip():
            raise InvalidArgument('option "pi" must be the path of the Pi binary')
        elif os.sep in value:
            path = Path(cwd, value)
        else:
            which = shutil.which(value)
            if which is None:
                raise InvalidArgument(f'option "pi": {value!r} is not on PATH')
            path = Path(which)
        if not (path.is_file() and os.access(path, os.X_OK)):
            raise InvalidArgument(f"the Pi binary {path} does not exist or is not executable")
        return path

    @staticmethod
    def _from_models(path: Path, provider: str | None, model: str | None) -> tuple[str, str]:
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, ValueError) as exc:
            raise InvalidArgument(f"cannot read the Pi models file {path}: {exc}") from None
        providers = data.get("providers") if isinstance(data, dict) else None
        if not isinstance(providers, dict) or not providers:
            raise InvalidArgument(f'{path} has no "providers" object: not a Pi models.json')
        if provider is None:
            provider = str(next(iter(providers)))
        if not isinstance(providers.get(provider), dict):
            known = ", ".join(map(str, providers))
            raise InvalidArgument(f"{path} declares no provider {provider!r} (it has: {known})")
        if model is None:
            models = providers[provider].get("models")
            first = models[0] if isinstance(models, list) and models else None
            if not isinstance(first, dict) or not isinstance(first.get("id"), str):
                raise InvalidArgument(f"{path}: provider {provider!r} lists no model; pass model")
            model = str(first["id"])
        return provider, model
