"""A command agent's report that its model provider refused the turn it runs: written by
``shepherd-child rate-limited|provider-error`` from inside the turn (:func:`write_report`),
read by the ``command`` adapter when the turn's process has ended (:class:`TurnReports`).

Rules:
- Each turn has its own report path, in a directory of the bridge's own (mode 0700, removed
  at close), handed to the turn's process as :data:`ENV_TURN_REPORT`. A call without it is not
  inside a command agent's turn: ``invalid_argument``.
- The report is one :class:`~protocol.records.refusals.Refusal`, JSON, written whole (a
  temporary file renamed over the path): the last report of a turn is the one taken. Its
  arguments were checked by the operation table (:mod:`protocol.ops.child`) before it is
  written, and it is decoded with the same bounded types when taken (at most
  :data:`MAX_REPORT_BYTES`; the agent could have written anything there): a bad one is an
  error said in the agent's output, and the turn ends as if nothing was reported.
- Taking a report removes it: a turn's report is acted on once.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
from collections.abc import Mapping
from typing import Any, TextIO

import msgspec

from protocol.core.errors import InvalidArgument
from protocol.ops.child import ChildProviderErrorArgs, ChildRateLimitedArgs
from protocol.ops.spec import Op
from protocol.records.refusals import Refusal

__all__ = ["ENV_TURN_REPORT", "MAX_REPORT_BYTES", "TurnReports", "write_report"]

#: where the running turn's report goes (set by the command adapter for each turn)
ENV_TURN_REPORT = "SHEPHERD_TURN_REPORT"
#: a report longer than this is not read (a Refusal's text is at most 16 Ki characters)
MAX_REPORT_BYTES = 128 * 1024

_decoder = msgspec.json.Decoder(Refusal)


def write_report(environ: Mapping[str, str], refusal: Refusal) -> str:
    """Write ``refusal`` as the running turn's report; its path. ``invalid_argument`` outside a
    command agent's turn."""
    path = environ.get(ENV_TURN_REPORT, "")
    if not path or not os.path.isabs(path) or not os.path.isdir(os.path.dirname(path)):
        raise InvalidArgument(
            f"{refusal.kind.replace('_', '-')} is for a command agent's turn: run it from the "
            f"turn's shell (no {ENV_TURN_REPORT} here)"
        )
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".report-")
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(msgspec.json.encode(refusal))
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return path


class TurnReports:
    """The adapter's side: a report path per turn, and taking what a turn reported."""

    def __init__(self) -> None:
        self._dir: str | None = None

    def path_for(self, turn: int) -> str:
        if self._dir is None:
            self._dir = tempfile.mkdtemp(prefix="shepherd-turns-")  # mode 0700
        return os.path.join(self._dir, f"turn-{turn}.json")

    def take(self, path: str) -> Refusal | str | None:
        """The turn's report (removed), an error text if it is not a valid one, or None."""
        try:
            with open(path, "rb") as f:
                data = f.read(MAX_REPORT_BYTES + 1)
        except FileNotFoundError:
            return None
        except OSError as exc:
            return f"cannot read the turn's report: {exc}"
        finally:
            with contextlib.suppress(OSError):
                os.unlink(path)
        if len(data) > MAX_REPORT_BYTES:
            return f"the turn's report is longer than {MAX_REPORT_BYTES} bytes"
        try:
            return _decoder.decode(data)
        except msgspec.DecodeError as exc:
            return f"the turn's report is not a valid one: {exc}"

    def close(self) -> None:
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None


def report_refusal(
    op: Op[Any],
    args: ChildRateLimitedArgs | ChildProviderErrorArgs,
    environ: Mapping[str, str],
    *,
    as_json: bool,
    out: TextIO,
) -> int:
    """``shepherd-child rate-limited`` / ``provider-error``: the running turn's report, for its
    bridge; prints what was reported."""
    if isinstance(args, ChildProviderErrorArgs) and not args.text.strip():
        raise InvalidArgument("--text is empty: say what the provider answered")
    refusal = Refusal(
        kind="rate_limited" if isinstance(args, ChildRateLimitedArgs) else "provider_error",
        provider=args.provider,
        retry_after_s=args.retry_after_s if isinstance(args, ChildRateLimitedArgs) else None,
        text=args.text or "",
    )
    write_report(environ, refusal)
    answer: dict[str, Any] = {"reported": refusal.kind, "provider": refusal.provider}
    if refusal.retry_after_s is not None:
        answer["retry_after_s"] = refusal.retry_after_s
    print(json.dumps(answer) if as_json else op.view(answer), file=out)
    return 0
